# Lazy, as twlog_plugin.py: twistd imports twlog.schema_registry.tap only when run.
from twisted.application.service import ServiceMaker

twlog_registry = ServiceMaker(
    "twlog schema registry", "twlog.schema_registry.tap",
    "A schema registry speaking Confluent's REST API, durable in a twlog topic.", "twlog-registry",
)
