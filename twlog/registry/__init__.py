"""C{twlog registry}: a schema registry speaking Confluent's REST API, durable in the twlog topic C{twlog-schemas}.

L{twlog.registry.state} is the registry's content as a pure state machine over the records of
the topic; L{twlog.registry.journal} appends to and reads that topic; L{twlog.registry.core}
turns requests into records (one writer's record wins where two conflict); L{twlog.registry.web}
is the HTTP face; L{twlog.registry.service} and L{twlog.registry.tap} run it.  docs/registry.md.
"""
