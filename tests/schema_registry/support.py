"""A journal in memory: one shared list of records (the topic), a position per registry process; requests to
a L{RegistryResource} over it."""

from __future__ import annotations

import json
from collections.abc import Callable
from io import BytesIO
from types import SimpleNamespace
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from twlog.errors import ConnectionFailed
from twlog.schema_registry.core import SchemaRegistry
from twlog.schema_registry.web import RegistryResource

CONTENT_TYPE = b"application/vnd.schemaregistry.v1+json"


class Topic:
    """The records of C{twlog-schemas}: offsets are indexes.

    C{down}: the cluster refuses connections (every call fails at once); C{hung}: it takes them and never
    answers (every call waits for ever).
    """

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.down = False
        self.hung = False


class FakeJournal:
    """L{twlog.schema_registry.core.IJournal} over a L{Topic}; with C{hold}, appends wait for L{release}."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.position = 0
        self.hold = False
        self.held: list[tuple[Deferred, dict]] = []
        self.on_lost: Callable[[str], object] | None = None
        self.cluster = "127.0.0.1:2181/twlog"
        #: How many times each call was made.
        self.calls = {"append": 0, "read_new": 0, "probe": 0, "disconnect": 0}

    async def _reach(self, call: str) -> None:
        self.calls[call] += 1
        if self.topic.down:
            raise ConnectionFailed("cannot connect to 127.0.0.1:9092: Connection refused")
        if self.topic.hung:
            await Deferred()

    async def append(self, record: dict) -> int:
        await self._reach("append")
        if self.hold:
            d: Deferred = Deferred()
            self.held.append((d, record))
            await d
        self.topic.records.append(record)
        return len(self.topic.records) - 1

    def release(self) -> None:
        held, self.held = self.held, []
        for d, _ in held:
            d.callback(None)

    async def read_new(self) -> list[tuple[int, Any]]:
        await self._reach("read_new")
        new = list(enumerate(self.topic.records))[self.position:]
        self.position = len(self.topic.records)
        return new

    async def probe(self) -> None:
        await self._reach("probe")

    def disconnect(self) -> Deferred[None]:
        self.calls["disconnect"] += 1
        return succeed(None)

    def drop(self) -> None:
        """The connection to the broker drops (the broker died, or closed it)."""
        self.on_lost("the connection to broker 0 at 127.0.0.1:9092 dropped")


class RestCalls:
    """A test case's requests to a registry over a L{FakeJournal} (C{self.topic}, C{self.resource})."""

    def setUp(self) -> None:
        self.topic = Topic()
        self.clock = Clock()
        self.resource = RegistryResource(SchemaRegistry(FakeJournal(self.topic), reactor=self.clock))

    def call(self, method: str, path: str, data: bytes = b"", resource: RegistryResource | None = None):
        """(status, JSON answer) of one request."""
        path, _, query = path.partition("?")
        request = DummyRequest([])
        request.method, request.path = method.encode(), path.encode()
        request.args = {}
        for key, value in (p.split("=") for p in query.split("&") if p):
            request.args.setdefault(key.encode(), []).append(value.encode())
        request.content = BytesIO(data)
        request.channel = SimpleNamespace(site=SimpleNamespace(max_body_bytes=1024))
        result = (resource or self.resource).render(request)
        if result is NOT_DONE_YET:
            self.assertTrue(request.finished, f"{method} {path} is not answered")
            result = b"".join(request.written)
        self.assertEqual(request.responseHeaders.getRawHeaders(b"content-type"), [CONTENT_TYPE])
        return request.responseCode or 200, json.loads(result)
