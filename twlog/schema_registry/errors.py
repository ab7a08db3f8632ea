# -*- test-case-name: tests.schema_registry.test_state,tests.schema_registry.test_web -*-
"""The registry's errors: an HTTP status, Confluent's C{error_code} and a message (its JSON error body)."""

from __future__ import annotations

import json


class RestError(Exception):
    """An answer that is an error: C{{"error_code": code, "message": message}} with HTTP C{status}."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict:
        return {"error_code": self.code, "message": self.message}


# Confluent's codes (io.confluent.kafka.schemaregistry.rest.exceptions.Errors); docs/registry.md has the table.
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
#: Confluent's INCOMPATIBLE_SCHEMA_ERROR_CODE was the HTTP CONFLICT status, 409, from its first release to
#: 8.0.3 and 8.1.1; 8.0.4, 8.1.2 and 8.2.0 (2026) changed it to 40901.  Clients written against the long-standing
#: value compare against 409, so the registry answers 409 (docs/registry.md).
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
REFERENCE_EXISTS = 42206
INVALID_SUBJECT = 42208
INVALID_RULE_SET = 42210
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002


def subject_not_found(subject: str) -> RestError:
    return RestError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RestError:
    return RestError(404, VERSION_NOT_FOUND, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RestError:
    message = "Schema not found" if schema_id is None else f"Schema {schema_id} not found"
    return RestError(404, SCHEMA_NOT_FOUND, message)


def invalid_schema(why: str) -> RestError:
    """42201, in Confluent's words (C{AbstractSchemaRegistry.loadSchema}: the provider's reason after its type)."""
    return RestError(422, INVALID_SCHEMA, f"Invalid schema of type AVRO, details: {why}")


def invalid_schema_type(schema_type: object) -> RestError:
    """42201 for a C{schemaType} other than AVRO (Confluent's words for a type it has no provider of)."""
    return RestError(422, INVALID_SCHEMA, f"Invalid schema type {schema_type}")


def invalid_version(text: str) -> RestError:
    return RestError(422, INVALID_VERSION, f"The specified version '{text}' is not a valid version id. Allowed values "
                                           "are between [1, 2^31-1] and the string \"latest\"")


def incompatible(subject: str, problems: list[str]) -> RestError:
    message = (f'Schema being registered is incompatible with an earlier schema for subject "{subject}", '
               f"details: [{', '.join(problems)}]")
    return RestError(409, INCOMPATIBLE_SCHEMA, message)


def invalid_compatibility_level() -> RestError:
    return RestError(422, INVALID_COMPATIBILITY_LEVEL, "Invalid compatibility level. Valid values are none, backward, "
                     "forward, full, backward_transitive, forward_transitive, and full_transitive")


def subject_soft_deleted(subject: str) -> RestError:
    # (Confluent's message has no space after "deleted."; kept, for clients that match it)
    return RestError(404, SUBJECT_SOFT_DELETED, f"Subject '{subject}' was soft deleted.Set permanent=true to delete "
                     "permanently")


def subject_not_soft_deleted(subject: str) -> RestError:
    return RestError(404, SUBJECT_NOT_SOFT_DELETED, f"Subject '{subject}' was not deleted first before being "
                     "permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RestError:
    return RestError(404, VERSION_SOFT_DELETED, f"Subject '{subject}' Version {version} was soft deleted.Set "
                     "permanent=true to delete permanently")


def version_not_soft_deleted(subject: str, version: int) -> RestError:
    return RestError(404, VERSION_NOT_SOFT_DELETED, f"Subject '{subject}' Version {version} was not deleted first "
                     "before being permanently deleted")


def invalid_rule_set(why: str) -> RestError:
    """42210: a C{ruleSet} that Confluent's C{RuleSet.validate()} refuses (its message)."""
    return RestError(422, INVALID_RULE_SET, why)


def reference_exists(subject: str, version: int) -> RestError:
    """42206: deleting a version another schema references (Confluent names its C{SchemaKey})."""
    return RestError(422, REFERENCE_EXISTS, f"One or more references exist to the schema "
                     f"{{magic=1,keytype=SCHEMA,subject={subject},version={version}}}.")


def invalid_extra(field: str, value: object) -> RestError:
    """A C{metadata} or C{ruleSet} that is not a JSON object (Confluent: Jackson cannot map it, 422)."""
    return RestError(422, 422, f"{field} must be a JSON object, not {type(value).__name__} {json.dumps(value)}")


def unsupported_config(fields: list[str]) -> RestError:
    """A configuration field Confluent takes and twlog does not (docs/registry.md: compatibility only)."""
    return RestError(422, 422, f"config field(s) {', '.join(fields)} not supported: twlog takes compatibility only")


def store_error(why: str) -> RestError:
    """50001: the twlog cluster holding twlog-schemas refused or could not be reached (Confluent: the Kafka store)."""
    return RestError(500, STORE_ERROR, f"Error in the backend data store (twlog topic twlog-schemas): {why}")


def timeout(why: str) -> RestError:
    """50002: the twlog cluster did not answer within --request-timeout."""
    return RestError(500, OPERATION_TIMEOUT, f"Operation timed out: {why}")


def bad_request(why: str) -> RestError:
    """A body that is not JSON, or JSON of the wrong shape (Confluent answers such bodies 400 or 422)."""
    return RestError(400, 400, why)


def unprocessable(why: str) -> RestError:
    return RestError(422, 422, why)
