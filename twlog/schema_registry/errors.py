# -*- test-case-name: tests.schema_registry.test_state,tests.schema_registry.test_web -*-
"""The registry's errors: an HTTP status, Confluent's C{error_code} and a message (its JSON error body)."""

from __future__ import annotations


class RestError(Exception):
    """An answer that is an error: C{{"error_code": code, "message": message}} with HTTP C{status}."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict:
        return {"error_code": self.code, "message": self.message}


# Confluent's codes (io.confluent.kafka.schemaregistry.rest.exceptions.Errors).
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
VERSION_SOFT_DELETED = 40406
VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_COMPATIBILITY_NOT_CONFIGURED = 40408
INCOMPATIBLE_SCHEMA = 40901
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_SUBJECT = 42208
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
    return RestError(422, INVALID_SCHEMA, f"Invalid schema: {why}")


def invalid_version(text: str) -> RestError:
    return RestError(422, INVALID_VERSION, f"The specified version '{text}' is not a valid version id. Allowed values "
                                           "are between [1, 2^31-1] and the string \"latest\"")


def incompatible(problems: list[str]) -> RestError:
    message = "Schema being registered is incompatible with an earlier schema for subject: " + "; ".join(problems)
    return RestError(409, INCOMPATIBLE_SCHEMA, message)


def store_error(why: str) -> RestError:
    return RestError(500, STORE_ERROR, f"Error in the backend data store (twlog topic twlog-schemas): {why}")


def timeout(why: str) -> RestError:
    return RestError(500, OPERATION_TIMEOUT, f"Operation timed out: {why}")


def bad_request(why: str) -> RestError:
    """A body that is not JSON, or JSON of the wrong shape (Confluent answers such bodies 400 or 422)."""
    return RestError(400, 400, why)


def unprocessable(why: str) -> RestError:
    return RestError(422, 422, why)
