# -*- test-case-name: tests.client.test_consumer,tests.consumer.test_batches -*-
"""The Twisted driver of a L{PartitionReader}: send what it asks for on an L{IBrokerConnection}, hand back the answer.

Every rule is the reader's (L{twlog.client.reader}); this module only turns its
requests into the wire's (a L{SizeProbe} is Kafka 0.7's plain FETCH, anything
else twlog's WAIT_FETCH, which names every error precisely) and the answers
into bytes or the typed error they raised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twlog.client.connection import IBrokerConnection
from twlog.client.reader import Fetch, Fetched, PartitionReader, Refresh, Request, SizeProbe
from twlog.errors import BrokerError, BrokerTimeout, ConnectionFailed, ProtocolViolation, check
from twlog.protocol.codec import WaitFetchRequest
from twlog.storage.message import CorruptMessage

__all__ = ["answer", "log_skip", "read"]

_log = Logger()


def log_skip(error: CorruptMessage) -> None:
    """Log (to Twisted's logger) that the corrupt message C{error} is skipped, naming its byte range."""
    _log.warn("skipping the corrupt message at bytes {range} of {topic}-{partition}: {reason}",
              range=error.byte_range, topic=error.topic, partition=error.partition, reason=error.reason)


async def answer(connection: IBrokerConnection, reader: PartitionReader, request: Request, *,
                 max_wait_ms: int = 0, min_bytes: int = 0) -> bytes | Exception:
    """The broker's answer to the reader's C{request}: the fetched bytes, or the broker or connection error
    it raised (which the reader judges)."""
    part = request.part(reader.tp)
    try:
        if isinstance(request, SizeProbe):
            return (await connection.request(part)).messages
        if not isinstance(request, Fetch):
            max_wait_ms = min_bytes = 0  # a re-read: its bytes are there
        parts = (await connection.request(WaitFetchRequest(max_wait_ms, min_bytes, (part,)))).parts
        if len(parts) != 1:
            raise ProtocolViolation(
                f"broker {connection.address} answered a one-part WAIT_FETCH with {len(parts)} parts"
            )
        context = f"broker {connection.address} refused WAIT_FETCH {part.topic}-{part.partition}@{part.offset}"
        return check(parts[0], context).messages
    except (BrokerError, ConnectionFailed, BrokerTimeout) as e:
        return e


async def read(connection: IBrokerConnection, reader: PartitionReader, request: Request | None = None, *,
               max_wait_ms: int = 0, min_bytes: int = 0,
               on_refresh: Callable[[Refresh], IBrokerConnection | Deferred | None] | None = None) -> Any:
    """One fetch's worth of C{reader} (from C{request}, default its L{PartitionReader.next_request}): its probes
    and re-reads sent, and its refreshes handed to C{on_refresh} (which may return the connection to use now, or
    a Deferred of it).

    @return: the L{Fetched} value (L{twlog.client.reader.FetchedMessages} or a L{MessageBatch}).
    @raise BrokerError: what the reader raises (L{FetchSizeTooSmall}, L{CorruptMessage}...).
    """
    if request is None:
        request = reader.next_request()
    while True:
        got = await answer(connection, reader, request, max_wait_ms=max_wait_ms, min_bytes=min_bytes)
        event = reader.receive(got, request)
        if isinstance(event, Fetched):
            return event.value
        if isinstance(event, Refresh) and on_refresh is not None:
            moved = on_refresh(event)
            if isinstance(moved, Deferred):
                moved = await moved
            connection = moved or connection
        request = reader.next_request()
