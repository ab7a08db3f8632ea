# -*- test-case-name: tests.schema_registry.test_web -*-
"""The registry's HTTP face: Confluent Schema Registry's REST paths, JSON shapes, codes and content type.

L{RegistryResource} routes a request (method and path segments) to a handler that reads or
changes the L{SchemaRegistry}; every answer is JSON in C{application/vnd.schemaregistry.v1+json};
every error, C{{"error_code": ..., "message": ...}}.  L{LimitedRequest} keeps at most
C{max_body_bytes} of a request body (the rest is dropped and the request answered 413), so a
large body costs no memory.  docs/registry.md lists the endpoints.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.web import resource, server

from twlog.avro.client import CONTENT_TYPE
from twlog.avro.schema import COMPATIBILITY_LEVELS, AvroSchema
from twlog.schema_registry import errors, listing, rules
from twlog.schema_registry.core import SchemaRegistry
from twlog.schema_registry.errors import RestError
from twlog.schema_registry.listing import Listing, flag
from twlog.schema_registry.state import EXTRAS, MAX_INT, RegistryState

#: The largest request body taken (a schema is rarely more than some kilobytes).
DEFAULT_MAX_BODY_BYTES = 1024 * 1024


class LimitedRequest(server.Request):
    """A request that keeps at most C{channel.site.max_body_bytes} of its body, and remembers if there was more."""

    too_large = False
    _received = 0

    def handleContentChunk(self, data: bytes) -> None:
        self._received += len(data)
        if self._received > getattr(self.channel.site, "max_body_bytes", DEFAULT_MAX_BODY_BYTES):
            self.too_large = True
            return
        super().handleContentChunk(data)


def _flag(request, name: str) -> bool:
    return flag(request.args, name)


def _version(text: str) -> int | None:
    """A version segment: None for the latest (C{latest} or C{-1}), else 1 to 2^31-1.

    @raise RestError: 42202.
    """
    if text in ("latest", "-1"):
        return None
    try:
        version = int(text)
    except ValueError:
        raise errors.invalid_version(text) from None
    if not 1 <= version <= MAX_INT:
        raise errors.invalid_version(text)
    return version


def _schema_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise errors.schema_not_found() from None


class RegistryResource(resource.Resource):
    """Every path of the registry (a leaf: it routes by path segments itself)."""

    isLeaf = True
    _log = Logger()

    def __init__(self, registry: SchemaRegistry) -> None:
        super().__init__()
        self.registry = registry

    def render(self, request) -> Any:
        request.setHeader(b"Content-Type", CONTENT_TYPE.encode())
        try:
            answer = self._route(request)
        except RestError as e:
            return self._error(request, e)
        if isinstance(answer, Deferred):
            answer.addCallbacks(lambda value: self._finish(request, 200, value),
                                lambda failure: self._failed(request, failure))
            return server.NOT_DONE_YET
        return self._body(request, 200, answer)

    # -- answering ------------------------------------------------------------------------

    def _body(self, request, status: int, value: Any) -> bytes:
        request.setResponseCode(status)
        return json.dumps(value).encode()

    def _error(self, request, error: RestError) -> bytes:
        return self._body(request, error.status, error.body())

    def _finish(self, request, status: int, value: Any) -> None:
        if getattr(request, "_disconnected", False):
            return
        request.write(self._body(request, status, value))
        request.finish()

    def _failed(self, request, failure) -> None:
        if failure.check(RestError):
            error = failure.value
        else:
            self._log.failure("registry request {method} {path} failed", failure,
                              method=request.method, path=request.path)
            error = errors.store_error(failure.getErrorMessage())
        self._finish(request, error.status, error.body())

    # -- routing ----------------------------------------------------------------------------

    def _route(self, request) -> Any:
        if getattr(request, "too_large", False):
            limit = getattr(request.channel.site, "max_body_bytes", DEFAULT_MAX_BODY_BYTES)
            raise RestError(413, 413, f"the request body is larger than the registry's limit of {limit} bytes")
        path = request.path.split(b"?", 1)[0].decode("utf-8", errors="replace")
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        method = request.method.decode("ascii", errors="replace")
        head, rest = (parts[0], parts[1:]) if parts else ("", [])
        route = getattr(self, f"_{head}", None) if head in ("schemas", "subjects", "compatibility", "config",
                                                            "mode", "v1") else None
        if not parts:
            if method != "GET":
                raise RestError(405, 405, "HTTP 405 Method Not Allowed")
            return {}
        if route is None:
            raise RestError(404, 404, "HTTP 404 Not Found")
        return route(request, method, rest)

    def _json(self, request) -> Any:
        try:
            return json.loads(request.content.read() or b"null")
        except ValueError as e:
            raise errors.bad_request(f"the request body is not JSON: {e}") from None

    def _schema_body(self, request) -> tuple[str, dict]:
        """The schema text of a request body, and its C{references}, C{metadata} and C{ruleSet} (those given),
        checked as Confluent checks them (the schema is parsed against the state: L{_parse})."""
        body = self._json(request)
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
            raise errors.unprocessable('the request body must be a JSON object with a "schema" string')
        if body.get("schemaType", "AVRO") != "AVRO":
            raise errors.invalid_schema_type(body.get("schemaType"))
        extras = {key: body[key] for key in EXTRAS if body.get(key) not in (None, {}, [])}
        for key, value in extras.items():
            if key == "references":
                extras[key] = rules.check_references(value)
            elif not isinstance(value, dict):
                raise errors.invalid_extra(key, value)
        if "ruleSet" in extras:
            rules.check_rule_set(extras["ruleSet"])
        return body["schema"], extras

    @staticmethod
    def _parse(state: RegistryState, text: str, extras: dict) -> AvroSchema:
        """The schema of a request, its references resolved (a version -1 becomes the subject's latest, as Confluent
        records it).  @raise RestError: 42201."""
        for reference in extras.get("references", []):
            if reference["version"] == -1 and state.subjects.get(reference["subject"]):
                reference["version"] = max(state.subjects[reference["subject"]])
        return state.parse(text, extras.get("references", []))

    def _not_found(self) -> RestError:
        return RestError(404, 404, "HTTP 404 Not Found")

    def _v1(self, request, method: str, rest: list[str]) -> Any:
        if rest != ["metadata", "id"]:
            raise self._not_found()
        if method != "GET":
            raise RestError(405, 405, "HTTP 405 Method Not Allowed")
        clusters = {"kafka-cluster": self.registry.cluster, "schema-registry-cluster": "schema-registry"}
        return {"scope": {"path": [], "clusters": clusters}}

    def _schemas(self, request, method: str, rest: list[str]) -> Any:
        if method != "GET":
            raise RestError(405, 405, "HTTP 405 Method Not Allowed")
        if not rest:
            wanted = Listing.of(request.args)
            return self.registry.read(lambda s: listing.schemas(s, wanted))
        if rest == ["types"]:
            return ["AVRO"]
        if len(rest) < 2 or rest[0] != "ids" or len(rest) > 3:
            raise self._not_found()
        schema_id = _schema_id(rest[1])
        tail = rest[2] if len(rest) == 3 else None
        if tail is None:
            return self.registry.read(lambda s: s.schema_body(schema_id))
        if tail == "schema":
            return self.registry.read(lambda s: json.loads(s.schema(schema_id)))
        wanted = Listing.of(request.args)
        if tail in ("subjects", "versions"):
            return self.registry.read(lambda s: listing.holders(s, schema_id, wanted, subjects=tail == "subjects"))
        raise self._not_found()

    def _subjects(self, request, method: str, rest: list[str]) -> Any:
        deleted = _flag(request, "deleted")
        if not rest:
            if method != "GET":
                raise RestError(405, 405, "HTTP 405 Method Not Allowed")
            wanted = Listing.of(request.args)
            return self.registry.read(lambda s: listing.subjects(s, wanted))
        subject, rest = rest[0], rest[1:]
        if not rest:
            if method == "POST":
                text, extras = self._schema_body(request)
                return self.registry.read(lambda s: s.describe(subject, s.lookup(
                    subject, self._parse(s, text, extras), extras, deleted)))
            if method == "DELETE":
                return self._delete(subject, None, _flag(request, "permanent"))
            raise RestError(405, 405, "HTTP 405 Method Not Allowed")
        if rest == ["metadata"] and method == "GET":
            return self.registry.read(lambda s: listing.latest_with_metadata(s, subject, request.args))
        if rest[0] != "versions" or len(rest) > 3:
            raise self._not_found()
        if len(rest) == 1:
            if method == "POST":
                text, extras = self._schema_body(request)
                return self.registry.write(lambda s: self._register(s, subject, self._parse(s, text, extras), extras))
            if method == "GET":
                wanted = Listing.of(request.args)
                return self.registry.read(lambda s: listing.versions(s, subject, wanted))
            raise RestError(405, 405, "HTTP 405 Method Not Allowed")
        version = _version(rest[1])
        if len(rest) == 3:
            if rest[2] not in ("schema", "referencedby") or method != "GET":
                raise self._not_found()
            if rest[2] == "referencedby":
                return self.registry.read(lambda s: rules.referenced_by(
                    s, subject, s.version(subject, version, deleted=True).version, deleted))
            return self.registry.read(lambda s: json.loads(s.schema(s.version(subject, version, deleted).schema_id)))
        if method == "GET":
            return self.registry.read(lambda s: s.describe(subject, s.version(subject, version, deleted)))
        if method == "DELETE":
            return self._delete(subject, rest[1], _flag(request, "permanent"))
        raise RestError(405, 405, "HTTP 405 Method Not Allowed")

    @staticmethod
    def _register(state: RegistryState, subject: str, schema: AvroSchema, extras: dict) -> tuple[dict, dict | None]:
        schema_id, record = state.plan_register(subject, schema, extras)
        return {"id": schema_id}, record

    def _delete(self, subject: str, version_text: str | None, permanent: bool) -> Deferred:
        version = _version(version_text) if version_text is not None else None

        def plan(state: RegistryState) -> tuple[Any, dict | None]:
            entries = state.versions(subject, deleted=True)
            if version_text is not None:
                entry = state.version(subject, version, deleted=True) if version is not None else \
                    state.version(subject, None)
                entries = [entry]
            live = [e for e in entries if not e.deleted]
            if permanent and live:
                if version_text is None:
                    raise errors.subject_not_soft_deleted(subject)
                raise errors.version_not_soft_deleted(subject, entries[0].version)
            if not permanent and not live:
                if version_text is None:
                    raise errors.subject_soft_deleted(subject)
                raise errors.version_soft_deleted(subject, entries[0].version)
            for entry in entries:
                if rules.referenced_by(state, subject, entry.version, deleted=permanent):
                    raise errors.reference_exists(subject, entry.version)
            numbers = [e.version for e in entries]
            record = {"op": "delete", "subject": subject, "version": numbers[0] if version_text else None,
                      "permanent": permanent}
            return (numbers[0] if version_text is not None else numbers), record

        return self.registry.write(plan)

    def _compatibility(self, request, method: str, rest: list[str]) -> Any:
        if len(rest) not in (3, 4) or rest[0] != "subjects" or rest[2] != "versions":
            raise self._not_found()
        if method != "POST":
            raise RestError(405, 405, "HTTP 405 Method Not Allowed")
        subject = rest[1]
        version = _version(rest[3]) if len(rest) == 4 else None
        every = len(rest) == 3
        text, extras = self._schema_body(request)
        verbose = _flag(request, "verbose")

        def answer(state: RegistryState) -> dict:
            schema = self._parse(state, text, extras)
            if every:
                against = state.subjects_versions(subject)
            else:
                against = [state.version(subject, version)]
                if state.level(subject).endswith("_TRANSITIVE"):
                    against = [v for v in state.subjects_versions(subject) if v.version <= against[0].version]
            problems = state.problems(subject, schema, against)
            result: dict[str, Any] = {"is_compatible": not problems}
            if verbose:
                result["messages"] = problems
            return result

        return self.registry.read(answer)

    def _config(self, request, method: str, rest: list[str]) -> Any:
        if len(rest) > 1:
            raise self._not_found()
        subject = rest[0] if rest else None
        if method == "GET":
            default = _flag(request, "defaultToGlobal")

            def level(state: RegistryState) -> dict:
                if subject is not None and subject not in state.levels and not default:
                    raise RestError(404, errors.SUBJECT_COMPATIBILITY_NOT_CONFIGURED,
                                    f"Subject '{subject}' does not have subject-level compatibility configured")
                return {"compatibilityLevel": state.level(subject)}

            return self.registry.read(level)
        if method == "PUT":
            return self._set_config(request, subject)
        if method == "DELETE" and subject is not None:

            def remove(state: RegistryState) -> tuple[dict, dict | None]:
                if subject not in state.levels:
                    raise errors.subject_not_found(subject)
                return {"compatibilityLevel": state.levels[subject]}, {"op": "config", "subject": subject,
                                                                        "compatibility": None}

            return self.registry.write(remove)
        raise RestError(405, 405, "HTTP 405 Method Not Allowed")

    def _set_config(self, request, subject: str | None) -> Deferred:
        """C{PUT /config[/S]}: without C{compatibility}, the level is left as it is (and answered, if set)."""
        body = self._json(request)
        if not isinstance(body, dict):
            raise errors.unprocessable("the request body must be a JSON object")
        others = sorted(key for key, value in body.items() if key != "compatibility" and value not in (None, False))
        if others:
            raise errors.unsupported_config(others)
        wanted = body.get("compatibility")
        if wanted is None:
            def unchanged(state: RegistryState) -> tuple[dict, None]:
                level = state.levels.get(subject) if subject is not None else state.global_level
                return ({"compatibility": level} if level else {}), None

            return self.registry.write(unchanged)
        if wanted not in COMPATIBILITY_LEVELS:
            raise errors.invalid_compatibility_level()
        record = {"op": "config", "subject": subject, "compatibility": wanted}
        return self.registry.write(lambda state: ({"compatibility": wanted}, record))

    def _mode(self, request, method: str, rest: list[str]) -> Any:
        if method != "GET" or len(rest) > 1:
            raise RestError(405, 405, "HTTP 405 Method Not Allowed: the registry is always READWRITE")
        return {"mode": "READWRITE"}


def make_site(registry: SchemaRegistry, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> server.Site:
    """The registry's twisted.web site."""
    site = server.Site(RegistryResource(registry), requestFactory=LimitedRequest)
    site.max_body_bytes = max_body_bytes
    site.displayTracebacks = False
    return site
