# Lazy, as twlog_plugin.py: twistd imports twlog.registry.tap only when run.
from twisted.application.service import ServiceMaker

twlog_registry = ServiceMaker(
    "twlog schema registry", "twlog.registry.tap",
    "A schema registry speaking Confluent's REST API, durable in a twlog topic.", "twlog-registry",
)
