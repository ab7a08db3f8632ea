"""C{twlog registry}: a schema registry speaking Confluent's REST API, durable in the twlog topic C{twlog-schemas}.

L{twlog.schema_registry.state} is the registry's content as a pure state machine over the records of
the topic; L{twlog.schema_registry.journal} appends to and reads that topic; L{twlog.schema_registry.core}
turns requests into records (one writer's record wins where two conflict); L{twlog.schema_registry.web}
is the HTTP face; L{twlog.schema_registry.service} and L{twlog.schema_registry.tap} run it.  docs/registry.md.
"""
