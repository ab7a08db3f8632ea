"""A journal in memory: one shared list of records (the topic), a position per registry process."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from twlog.errors import ConnectionFailed


class Topic:
    """The records of C{twlog-schemas}: offsets are indexes."""

    def __init__(self) -> None:
        self.records: list[Any] = []
        self.down = False


class FakeJournal:
    """L{twlog.schema_registry.core.IJournal} over a L{Topic}; with C{hold}, appends wait for L{release}."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.position = 0
        self.hold = False
        self.held: list[tuple[Deferred, dict]] = []

    async def append(self, record: dict) -> int:
        if self.topic.down:
            raise ConnectionFailed("no broker of twlog-schemas answers")
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
        if self.topic.down:
            raise ConnectionFailed("no broker of twlog-schemas answers")
        new = list(enumerate(self.topic.records))[self.position:]
        self.position = len(self.topic.records)
        return new
