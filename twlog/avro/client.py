# -*- test-case-name: tests.avro.test_client,tests.integration.test_schema_registry -*-
"""Clients of a Confluent-style schema registry: L{RegistryClient} on Twisted, L{SyncRegistryClient} blocking.

Both speak the same few calls of Confluent's REST API (register a schema under a subject, a schema
by id, a subject's latest version) and raise L{RegistryError} with the registry's C{error_code}
and message.  Neither caches: the serializers do (once per subject and per id).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from io import BytesIO
from typing import Any

from twisted.internet.defer import Deferred
from twisted.web.client import Agent, FileBodyProducer, HTTPConnectionPool, readBody
from twisted.web.http_headers import Headers

#: Confluent's content type (requests and answers).
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
#: What the clients accept, in Confluent's order of preference.
ACCEPT = f"{CONTENT_TYPE}, application/vnd.schemaregistry+json; qs=0.9, application/json; qs=0.5"
DEFAULT_TIMEOUT_S = 10.0


class RegistryError(Exception):
    """The registry answered with an error (C{status}, Confluent's C{error_code}) or could not be reached (None)."""

    def __init__(self, message: str, status: int | None = None, error_code: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _paths_register(subject: str) -> str:
    return f"/subjects/{_quote(subject)}/versions"


def _decode(url: str, status: int, body: bytes) -> Any:
    """The JSON answer, or L{RegistryError} for a status that is not 2xx."""
    try:
        value = json.loads(body) if body else None
    except ValueError:
        value = None
    if 200 <= status < 300:
        if value is None and body:
            raise RegistryError(f"the schema registry at {url} answered {status} with a body that is not JSON", status)
        return value
    if isinstance(value, dict) and "message" in value:
        raise RegistryError(f"schema registry at {url}: {value['message']} (error {value.get('error_code')})",
                            status, value.get("error_code"))
    raise RegistryError(f"schema registry at {url}: HTTP {status}", status)


class _Base:
    def __init__(self, url: str, timeout_s: float) -> None:
        url = url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the schema registry URL must start with http:// or https://, not {url!r}")
        self.url = url
        self.timeout_s = timeout_s

    def _schema_of(self, answer: Any) -> str:
        return answer["schema"]

    def _id_of(self, answer: Any) -> int:
        return int(answer["id"])


class RegistryClient(_Base):
    """The registry's calls as Deferreds, over Twisted's HTTP client."""

    def __init__(self, url: str, *, reactor=None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if reactor is None:
            from twisted.internet import reactor
        super().__init__(url, timeout_s)
        self._reactor = reactor
        self._pool = HTTPConnectionPool(reactor, persistent=False)
        self._agent = Agent(reactor, connectTimeout=timeout_s, pool=self._pool)

    def register(self, subject: str, schema: str) -> Deferred[int]:
        """The id of C{schema} under C{subject}, registering it if new (POST /subjects/{subject}/versions)."""
        return self._call(b"POST", _paths_register(subject), {"schema": schema}).addCallback(self._id_of)

    def schema(self, schema_id: int) -> Deferred[str]:
        """The schema text registered as C{schema_id} (GET /schemas/ids/{id})."""
        return self._call(b"GET", f"/schemas/ids/{int(schema_id)}").addCallback(self._schema_of)

    def latest(self, subject: str) -> Deferred[dict]:
        """The subject's latest version: C{subject}, C{version}, C{id}, C{schema}."""
        return self._call(b"GET", f"/subjects/{_quote(subject)}/versions/latest")

    def close(self) -> Deferred[None]:
        return self._pool.closeCachedConnections()

    def _call(self, method: bytes, path: str, body: Any = None) -> Deferred:
        return Deferred.fromCoroutine(self._request(method, path, body))

    async def _request(self, method: bytes, path: str, body: Any) -> Any:
        headers = Headers({b"Accept": [ACCEPT.encode()]})
        producer = None
        if body is not None:
            headers.addRawHeader(b"Content-Type", CONTENT_TYPE.encode())
            producer = FileBodyProducer(BytesIO(json.dumps(body).encode()))
        try:
            response = await self._agent.request(method, (self.url + path).encode(), headers, producer).addTimeout(
                self.timeout_s, self._reactor
            )
            data = await readBody(response).addTimeout(self.timeout_s, self._reactor)
        except Exception as e:  # connection refused, timeout, lost: all one "cannot reach"
            raise RegistryError(f"cannot reach the schema registry at {self.url}: {e}") from None
        return _decode(self.url, response.code, data)


class SyncRegistryClient(_Base):
    """The registry's calls, blocking (urllib): for code without a reactor, such as Spark's executors."""

    def __init__(self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(url, timeout_s)

    def register(self, subject: str, schema: str) -> int:
        return self._id_of(self._request("POST", _paths_register(subject), {"schema": schema}))

    def schema(self, schema_id: int) -> str:
        return self._schema_of(self._request("GET", f"/schemas/ids/{int(schema_id)}"))

    def latest(self, subject: str) -> dict:
        return self._request("GET", f"/subjects/{_quote(subject)}/versions/latest")

    def close(self) -> None:
        return None

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={"Accept": ACCEPT})
        if data is not None:
            request.add_header("Content-Type", CONTENT_TYPE)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return _decode(self.url, response.status, response.read())
        except urllib.error.HTTPError as e:
            return _decode(self.url, e.code, e.read())
        except (OSError, urllib.error.URLError) as e:
            raise RegistryError(f"cannot reach the schema registry at {self.url}: {e}") from None
