# -*- test-case-name: tests.console.test_api_schemas -*-
"""The schemas' routes (docs/console.md, "Schemas"), read from the schema registry (C{--registry URL}) through
L{twlog.avro.client.RegistryClient}.

  - C{GET /api/schemas}: the registry's subjects, filtered and paged here; for the page's subjects only, their
    versions, latest id and compatibility level (a few requests each, at most L{CONCURRENT_REQUESTS} at once).
  - C{GET /api/schemas/<subject>}: its compatibility level and every version (at most L{MAX_VERSIONS}, the
    newest) with its id and schema.
  - C{GET /api/schemas/<subject>/diff?from=V&to=V}: the two versions' schemas pretty-printed (JSON, indented by
    2) and compared line by line (difflib).

No registry given: 503 naming C{--registry}; the registry unreachable: 503 naming it; a subject or version it
does not have: 404.
"""

from __future__ import annotations

import difflib
import json
import urllib.parse

from twisted.internet.defer import Deferred, DeferredList, DeferredSemaphore

from twlog.avro.client import RegistryClient, RegistryError
from twlog.console.http import ApiError, ApiRequest, Route, bad_parameter

#: Where the registry client is kept in C{context.parts} (a test may put its own there: C{get(path)}).
REGISTRY = "schemas.registry"

#: The most requests to the registry one API request has in flight, and the most versions one subject shows.
CONCURRENT_REQUESTS = 8
MAX_VERSIONS = 100

DEFAULT_LIMIT = 50
MAX_LIMIT = 200

#: The registry's error codes for a subject and a version it does not have (Confluent's).
_SUBJECT_NOT_FOUND = 40401
_VERSION_NOT_FOUND = 40402


def routes(context) -> list[Route]:
    return [
        Route("GET", "schemas", lambda api: list_subjects(context, api)),
        Route("GET", "schemas/{subject}", lambda api: subject(context, api)),
        Route("GET", "schemas/{subject}/diff", lambda api: diff(context, api)),
    ]


def registry_of(context):
    """The client of the console's registry.  @raise ApiError: 503 when the console has none (C{--registry})."""
    if context.registry_url is None:
        raise ApiError(503, "no schema registry: start the console with --registry URL",
                       ["schema registry (--registry URL)"])
    client = context.parts.get(REGISTRY)
    if client is None:
        client = context.parts[REGISTRY] = RegistryClient(context.registry_url, reactor=context.reactor,
                                                          timeout_s=context.timeout_s)
    return client


async def _get(context, path: str, subject: str | None = None, version=None):
    client = registry_of(context)
    try:
        return await client.get(path)
    except RegistryError as e:
        if e.status is None:
            raise ApiError(503, str(e), [f"schema registry {context.registry_url}"]) from None
        if e.error_code == _SUBJECT_NOT_FOUND and subject is not None:
            raise ApiError(404, f"subject {subject!r} does not exist in the schema registry") from None
        if e.error_code == _VERSION_NOT_FOUND and subject is not None:
            raise ApiError(404, f"version {version} of subject {subject!r} does not exist in the schema "
                                "registry") from None
        raise ApiError(502, str(e)) from None


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


async def _gather(calls) -> list:
    """Run C{calls} (each a function returning a Deferred or coroutine result), at most L{CONCURRENT_REQUESTS} at
    once; their results in order (the first failure raised)."""
    semaphore = DeferredSemaphore(CONCURRENT_REQUESTS)
    results = await DeferredList([semaphore.run(lambda call=call: Deferred.fromCoroutine(call())) for call in calls],
                                 fireOnOneErrback=True, consumeErrors=True)
    return [value for _, value in results]


async def _compatibility(context, name: str) -> str | None:
    answer = await _get(context, f"/config/{_quote(name)}?defaultToGlobal=true", name)
    return answer.get("compatibilityLevel") if isinstance(answer, dict) else None


async def list_subjects(context, api: ApiRequest) -> dict:
    text = (api.arg("filter") or "").lower()
    order = api.choice("order", ("asc", "desc"), "asc")
    offset = api.int_arg("offset", 0, low=0)
    limit = api.int_arg("limit", DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
    names = sorted((s for s in await _get(context, "/subjects") if text in s.lower()), reverse=order == "desc")
    page = names[offset:offset + limit]

    async def row(name: str) -> dict:
        versions = await _get(context, f"/subjects/{_quote(name)}/versions", name)
        latest = await _get(context, f"/subjects/{_quote(name)}/versions/latest", name, "latest")
        return {"subject": name, "versions": versions, "latest_version": latest.get("version"),
                "latest_id": latest.get("id"), "compatibility": await _compatibility(context, name)}

    rows = await _gather([lambda name=name: row(name) for name in page])
    return {"total": len(names), "offset": offset, "limit": limit, "subjects": rows, "problems": []}


async def subject(context, api: ApiRequest) -> dict:
    name = api.params["subject"]
    numbers = await _get(context, f"/subjects/{_quote(name)}/versions", name)
    shown = numbers[-MAX_VERSIONS:]
    versions = await _gather([lambda v=v: _version(context, name, v) for v in shown])
    return {"subject": name, "compatibility": await _compatibility(context, name),
            "versions": [{"version": v["version"], "id": v["id"], "schema": v["schema"]} for v in versions],
            "versions_left_out": len(numbers) - len(shown)}


async def _version(context, name: str, version) -> dict:
    return await _get(context, f"/subjects/{_quote(name)}/versions/{version}", name, version)


def _version_arg(api: ApiRequest, parameter: str) -> str:
    text = api.arg(parameter)
    if text is None or text == "":
        raise bad_parameter(parameter, "name a version (a number from 1, or latest)")
    if text != "latest" and not (text.isdigit() and text.isascii() and int(text) >= 1):
        raise bad_parameter(parameter, f"{text[:40]!r} is not a version (a number from 1, or latest)")
    return text


def pretty(schema: str) -> list[str]:
    """A schema's text as lines of indented JSON (as it is, when it is not JSON)."""
    try:
        return json.dumps(json.loads(schema), indent=2).splitlines()
    except ValueError:
        return schema.splitlines()


def diff_lines(old: list[str], new: list[str]) -> list[dict]:
    """C{old} to C{new} line by line: C{{"op": " " | "-" | "+", "text"}}, the removed lines before the added."""
    lines: list[dict] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            lines += [{"op": " ", "text": text} for text in old[i1:i2]]
            continue
        lines += [{"op": "-", "text": text} for text in old[i1:i2]]
        lines += [{"op": "+", "text": text} for text in new[j1:j2]]
    return lines


async def diff(context, api: ApiRequest) -> dict:
    name = api.params["subject"]
    old_version, new_version = _version_arg(api, "from"), _version_arg(api, "to")
    old = await _version(context, name, old_version)
    new = await _version(context, name, new_version)
    return {"subject": name, "from": old["version"], "to": new["version"],
            "lines": diff_lines(pretty(old["schema"]), pretty(new["schema"]))}
