# -*- test-case-name: tests.avro.test_client,tests.integration.test_schema_registry -*-
"""Clients of a Confluent-style schema registry: L{RegistryClient} on Twisted, L{SyncRegistryClient} blocking.

Both speak the same few calls of Confluent's REST API (register a schema under a subject, a schema
by id, a subject's latest version) and raise L{RegistryError} with the registry's C{error_code}
and message.  Neither caches: the serializers do (once per subject and per id).

Both speak HTTPS to an C{https://} URL, trusting the CAs of C{tls} (a L{TLSSettings}: Confluent's
C{schema.registry.ssl.ca.location}; the system's trust store without it), and send basic auth as Confluent's
clients do: C{user_info="user:password"} (C{basic.auth.user.info} with C{basic.auth.credentials.source=USER_INFO}),
or C{user:password@} in the URL (the default source, C{URL}).  The credentials never appear in an error.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from io import BytesIO
from typing import Any

from twisted.internet.defer import Deferred
from twisted.web.client import Agent, FileBodyProducer, HTTPConnectionPool, readBody
from twisted.web.http_headers import Headers
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

from twlog.client.tls import TLSSettings, TLSSetupError, describe_tls_failure

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


def split_user_info(url: str) -> tuple[str, str | None]:
    """C{url} without its C{user:password@}, and that C{user:password} (None without one)."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    user_info, _, host = parts.netloc.rpartition("@")
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), urllib.parse.unquote(user_info)


def _reason(e: BaseException) -> str:
    """Why a request failed, in one line (a TLS failure said as the broker clients say it)."""
    text = str(getattr(e, "reason", None) or e)
    if "SSL" in text or "certificate" in text.lower() or "tls" in text.lower():
        return describe_tls_failure(text).replace("the broker", "the registry").replace("--tls-ca",
                                                                                          "--registry-ca")
    return text


class _Base:
    def __init__(self, url: str, timeout_s: float, tls: TLSSettings | None, user_info: str | None) -> None:
        url, from_url = split_user_info(url.rstrip("/"))
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the schema registry URL must start with http:// or https://, not {url!r}")
        user_info = user_info if user_info is not None else from_url
        if user_info is not None and ":" not in user_info:
            raise ValueError("the schema registry's basic auth user info must be user:password")
        if tls is not None and not url.startswith("https://"):
            raise ValueError(f"TLS settings for the schema registry need an https:// URL, not {url}")
        self.url = url
        self.timeout_s = timeout_s
        self.tls = tls
        #: The basic auth user (None: no basic auth).
        self.user = user_info.partition(":")[0] if user_info else None
        self._authorization = (b"Basic " + base64.b64encode(user_info.encode("utf-8"))) if user_info else None

    def _schema_of(self, answer: Any) -> str:
        return answer["schema"]

    def _id_of(self, answer: Any) -> int:
        return int(answer["id"])


class RegistryClient(_Base):
    """The registry's calls as Deferreds, over Twisted's HTTP client."""

    def __init__(self, url: str, *, reactor=None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 tls: TLSSettings | None = None, user_info: str | None = None) -> None:
        if reactor is None:
            from twisted.internet import reactor
        super().__init__(url, timeout_s, tls, user_info)
        self._reactor = reactor
        self._pool = HTTPConnectionPool(reactor, persistent=False)
        self._agent = Agent(reactor, _Policy(tls or TLSSettings()), connectTimeout=timeout_s, pool=self._pool)

    def register(self, subject: str, schema: str) -> Deferred[int]:
        """The id of C{schema} under C{subject}, registering it if new (POST /subjects/{subject}/versions)."""
        return self._call(b"POST", _paths_register(subject), {"schema": schema}).addCallback(self._id_of)

    def schema(self, schema_id: int) -> Deferred[str]:
        """The schema text registered as C{schema_id} (GET /schemas/ids/{id})."""
        return self._call(b"GET", f"/schemas/ids/{int(schema_id)}").addCallback(self._schema_of)

    def latest(self, subject: str) -> Deferred[dict]:
        """The subject's latest version: C{subject}, C{version}, C{id}, C{schema}."""
        return self._call(b"GET", f"/subjects/{_quote(subject)}/versions/latest")

    def get(self, path: str) -> Deferred[Any]:
        """The registry's JSON answer to C{GET path} (C{/subjects}, C{/config/<subject>}...), for the console."""
        return self._call(b"GET", path)

    def close(self) -> Deferred[None]:
        return self._pool.closeCachedConnections()

    def _call(self, method: bytes, path: str, body: Any = None) -> Deferred:
        return Deferred.fromCoroutine(self._request(method, path, body))

    async def _request(self, method: bytes, path: str, body: Any) -> Any:
        headers = Headers({b"Accept": [ACCEPT.encode()]})
        if self._authorization is not None:
            headers.addRawHeader(b"Authorization", self._authorization)
        producer = None
        if body is not None:
            headers.addRawHeader(b"Content-Type", CONTENT_TYPE.encode())
            producer = FileBodyProducer(BytesIO(json.dumps(body).encode()))
        try:
            response = await self._agent.request(method, (self.url + path).encode(), headers, producer).addTimeout(
                self.timeout_s, self._reactor
            )
            data = await readBody(response).addTimeout(self.timeout_s, self._reactor)
        except TLSSetupError as e:
            raise RegistryError(f"cannot reach the schema registry at {self.url}: {e}") from None
        except Exception as e:  # connection refused, timeout, lost, TLS refused: all one "cannot reach"
            raise RegistryError(f"cannot reach the schema registry at {self.url}: {_failure_reason(e)}") from None
        return _decode(self.url, response.code, data)


@implementer(IPolicyForHTTPS)
class _Policy:
    """The Agent's TLS for an C{https://} registry: L{TLSSettings.twisted_options} for the host."""

    def __init__(self, tls: TLSSettings) -> None:
        self.tls = tls

    def creatorForNetloc(self, hostname: bytes, port: int):
        return self.tls.twisted_options(hostname.decode("ascii"))


def _failure_reason(e: BaseException) -> str:
    """One line of an Agent's failure (its C{ResponseNeverReceived} wraps the TLS error)."""
    reasons = getattr(e, "reasons", None)
    if reasons:
        return "; ".join(_reason(reason.value) for reason in reasons)
    return _reason(e)


class SyncRegistryClient(_Base):
    """The registry's calls, blocking (urllib): for code without a reactor, such as Spark's executors."""

    def __init__(self, url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, tls: TLSSettings | None = None,
                 user_info: str | None = None) -> None:
        super().__init__(url, timeout_s, tls, user_info)

    def register(self, subject: str, schema: str) -> int:
        return self._id_of(self._request("POST", _paths_register(subject), {"schema": schema}))

    def schema(self, schema_id: int) -> str:
        return self._schema_of(self._request("GET", f"/schemas/ids/{int(schema_id)}"))

    def latest(self, subject: str) -> dict:
        return self._request("GET", f"/subjects/{_quote(subject)}/versions/latest")

    def close(self) -> None:
        return None

    _ssl_context = None

    def _context(self):
        """The standard library's TLS context for an https:// registry (made once), else None.

        @raise RegistryError: a TLS file cannot be used.
        """
        if self._ssl_context is None and self.url.startswith("https://"):
            try:
                self._ssl_context = (self.tls or TLSSettings()).ssl_context()
            except TLSSetupError as e:
                raise RegistryError(f"cannot reach the schema registry at {self.url}: {e}") from None
        return self._ssl_context

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method, headers={"Accept": ACCEPT})
        if data is not None:
            request.add_header("Content-Type", CONTENT_TYPE)
        if self._authorization is not None:
            request.add_header("Authorization", self._authorization.decode("ascii"))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._context()) as response:
                return _decode(self.url, response.status, response.read())
        except urllib.error.HTTPError as e:
            return _decode(self.url, e.code, e.read())
        except (OSError, urllib.error.URLError) as e:
            raise RegistryError(f"cannot reach the schema registry at {self.url}: {_reason(e)}") from None
