# No __init__.py in twisted/ or twisted/plugins/: this directory joins
# Twisted's plugin namespace.  Lazy: twistd imports twlog.broker.tap only when run.
from twisted.application.service import ServiceMaker

twlog_broker = ServiceMaker("twlog broker", "twlog.broker.tap", "A log-structured publish/subscribe broker.", "twlog")

twlog_console = ServiceMaker("twlog console", "twlog.console.tap", "A web console for a twlog cluster.",
                             "twlog-console")
