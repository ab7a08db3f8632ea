# -*- test-case-name: tests.console.test_messages -*-
"""The message browser: C{GET /api/topics/{topic}/messages} (docs/console.md).

Where to start, per partition:

  - C{offset=O} (one partition): O itself, which must start a message or be the partition's end: anything else is
    refused (400) with the nearest message boundaries, as C{twlog groups reset --to-offset} refuses it
    (L{twlog.consumer.admin.check_reset_offset}: twlog's offsets are byte positions, so an offset inside a message
    is no message at all);
  - C{time=T} (ISO 8601 or ms since the epoch): the first segment still written at or after T: the start of the
    segment after the newest one last modified before T (OFFSETS by time, Kafka 0.7's resolution: a segment), or
    the earliest offset when every segment is newer;
  - C{newest=N}: the last N messages within C{max_bytes} of the end;
  - C{oldest=1}, the default: the earliest offset;
  - C{cursor=} (the previous answer's C{next_cursor}): where that answer stopped, per partition.

Each partition is read with one fetch of at most C{max_bytes} (at most 1 MiB); at most C{limit} messages are
answered in all (the partitions taking turns), those matching C{filter=} (a case-insensitive substring of the
value as shown).  C{next_cursor} resumes after the last message looked at in each partition.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet import defer

from twlog.avro import AvroDeserializer, RegistryClient
from twlog.client.times import parse_time
from twlog.console.cluster import reader_of
from twlog.console.context import ConsoleContext
from twlog.console.http import ApiError, ApiRequest, bad_parameter, not_found
from twlog.console.partitions import MAX_FETCH_BYTES, BrokerUnreachable, brokers_for
from twlog.consumer.admin import OffsetRefused, check_reset_offset
from twlog.errors import FetchSizeTooSmall, OffsetOutOfRange, TwlogError
from twlog.partition import TopicPartition
from twlog.protocol.codec import LATEST

FORMATS = ("text", "json", "avro", "hex")
DEFAULT_MAX_BYTES = 65536
MAX_LIMIT = 500
MAX_NEWEST = 10_000
#: How many segment starts are asked for when seeking by time (OFFSETS' max_offsets).
MAX_SEGMENTS = 10_000


def parse_cursor(text: str, known: dict[str, TopicPartition]) -> dict[TopicPartition, int]:
    """C{P:offset,P:offset} as each partition's offset.  @raise ApiError: 400 naming C{cursor}."""
    found: dict[TopicPartition, int] = {}
    for part in (p for p in text.split(",") if p):
        name, sep, offset = part.rpartition(":")
        if not sep or not offset.isdigit():
            raise bad_parameter("cursor", f"{part[:40]!r} is not PARTITION:OFFSET (give the next_cursor of an answer)")
        if name not in known:
            raise bad_parameter("cursor", f"{name[:40]!r} is not a partition of the topic")
        found[known[name]] = int(offset)
    if not found:
        raise bad_parameter("cursor", "it is empty")
    return found


def render(payload: bytes, fmt: str) -> tuple[str, str | None]:
    """A message's value as the browser shows it in C{fmt} (but avro: L{_avro}), and why it could not be shown
    so (then the value is shown as text)."""
    if fmt == "hex":
        return payload.hex(" "), None
    text = payload.decode("utf-8", errors="replace")
    error = None if "\ufffd" not in text or b"\xef\xbf\xbd" in payload else "not UTF-8 (shown with U+FFFD)"
    if fmt == "json":
        try:
            return json.dumps(json.loads(payload), indent=2, ensure_ascii=False), None
        except (ValueError, UnicodeDecodeError) as e:
            return text, f"not JSON: {str(e).splitlines()[0]}"
    return text, error


class Browse:
    """One request of the message browser."""

    def __init__(self, api: ApiRequest) -> None:
        self.api = api
        self.context: ConsoleContext = api.context
        self.view = reader_of(self.context).ready_view()
        self.topic = api.params["topic"]
        layout = self.view.layout()
        partitions = sorted(layout.partitions.get(self.topic, ()))
        if not partitions:
            raise not_found(f"topic {self.topic!r}")
        self.all = {tp.name: tp for tp in partitions}
        self.brokers = brokers_for(self.context, layout)
        self.format = api.choice("format", FORMATS, "text")
        if self.format == "avro" and self.context.registry_url is None:
            raise bad_parameter("format", "avro needs the console's --registry URL (the schema registry)")
        self.limit = api.int_arg("limit", 50, low=1, high=MAX_LIMIT)
        self.max_bytes = api.int_arg("max_bytes", DEFAULT_MAX_BYTES, low=1, high=MAX_FETCH_BYTES)
        self.filter = (api.arg("filter") or "").lower()
        self.problems: list[str] = []
        self.unreachable: list[str] = []

    def partitions(self) -> list[TopicPartition]:
        text = self.api.arg("partition")
        if not text:
            return list(self.all.values())
        chosen = []
        for name in (n.strip() for n in text.split(",") if n.strip()):
            if name not in self.all:
                names = ", ".join(list(self.all)[:20]) + (" ..." if len(self.all) > 20 else "")
                raise bad_parameter("partition", f"{name[:40]!r} is not a partition of topic {self.topic!r} (its "
                                    f"partitions: {names})")
            if self.all[name] not in chosen:
                chosen.append(self.all[name])
        return chosen

    def mode(self) -> tuple[str, Any]:
        """Where to start: C{("cursor" | "offset" | "time" | "newest" | "oldest", value)}."""
        given = [name for name in ("cursor", "offset", "time", "newest", "oldest") if self.api.has(name)]
        if len(given) > 1:
            raise bad_parameter(given[1], "give one of cursor, offset, time, newest and oldest, not "
                                + " and ".join(given))
        mode = given[0] if given else "oldest"
        if mode == "cursor":
            return mode, parse_cursor(self.api.arg("cursor") or "", self.all)
        if mode == "offset":
            return mode, self.api.int_arg("offset", low=0)
        if mode == "newest":
            return mode, self.api.int_arg("newest", low=1, high=MAX_NEWEST)
        if mode == "time":
            text = self.api.arg("time") or ""
            try:
                when = parse_time(text)
            except ValueError:
                raise bad_parameter("time", f"{text[:40]!r} is not a date/time like 2024-05-01T12:00:00 (UTC unless "
                                    "it says) or milliseconds since the epoch") from None
            if when < 0:
                raise bad_parameter("time", f"{text[:40]!r}: give a time (for the ends: oldest=1 or newest=N)")
            return mode, when
        return mode, None

    async def answer(self) -> dict:
        mode, value = self.mode()
        chosen = list(value) if mode == "cursor" else self.partitions()
        if mode == "offset" and len(chosen) != 1:
            raise bad_parameter("offset", f"an offset is in one partition: give partition= one of "
                                f"{', '.join(list(self.all)[:20])}")
        try:
            return await self._read(chosen, mode, value)
        finally:
            await self.brokers.close()

    async def _read(self, chosen: list[TopicPartition], mode: str, value: Any) -> dict:
        bounds = await self._gather(chosen, self._bounds)
        live = [tp for tp in chosen if tp in bounds]
        if mode == "offset":
            if not live:
                raise ApiError(503, f"cannot read {chosen[0]}: {self.problems[0] if self.problems else 'no leader'}",
                               self.unreachable)
            await self._check_offset(live[0], value)
        starts = await self._gather(live, lambda tp: self._start(tp, mode, value, bounds[tp]))
        fetched = await self._gather([tp for tp in live if tp in starts],
                                     lambda tp: self._fetch(tp, starts[tp], bounds[tp][1]))
        return await self._page(chosen, bounds, starts, fetched, mode, value)

    async def _gather(self, partitions: list[TopicPartition], step) -> dict[TopicPartition, Any]:
        """C{step(tp)} for every partition at once; a failure is a problem of that partition (and its broker
        unreachable, when it is one), an ApiError (a bad offset) is the answer."""
        results = await defer.DeferredList([defer.ensureDeferred(step(tp)) for tp in partitions], consumeErrors=True)
        found: dict[TopicPartition, Any] = {}
        for tp, (ok, result) in zip(partitions, results):
            if ok:
                found[tp] = result
            elif result.check(ApiError):
                result.raiseException()
            else:
                error = result.value
                if not isinstance(error, TwlogError):
                    result.raiseException()
                self.problems.append(f"{tp}: {str(error).splitlines()[0] if str(error) else type(error).__name__}")
                if isinstance(error, BrokerUnreachable) and error.what not in self.unreachable:
                    self.unreachable.append(error.what)
        return found

    async def _bounds(self, tp: TopicPartition) -> tuple[int, int]:
        return await self.brokers.first_last(tp)

    async def _check_offset(self, tp: TopicPartition, offset: int) -> None:
        try:
            await check_reset_offset(lambda request: self.brokers.request(tp, request), tp, offset)
        except OffsetRefused as e:
            raise bad_parameter("offset", str(e)) from None

    async def _start(self, tp: TopicPartition, mode: str, value: Any, bounds: tuple[int, int]) -> int:
        first, last = bounds
        if mode == "cursor":
            return min(max(value[tp], first), last)
        if mode == "offset":
            return value
        if mode == "time":
            before = await self.brokers.offsets(tp, value, 1)
            if not before:
                return first  # (every segment is newer than the time)
            starts = await self.brokers.offsets(tp, LATEST, MAX_SEGMENTS)
            later = [s for s in starts if s > before[0]]
            return min(later) if later else last
        if mode == "newest":
            return max(first, last - self.max_bytes)  # (the first message there: _fetch finds it)
        return first

    async def _fetch(self, tp: TopicPartition, start: int, end: int) -> tuple[int, list, bool]:
        """The messages in at most C{max_bytes} from C{start}: C{(start, messages, more)} (C{more}: the log goes on
        past them).  A fetch stops at a segment's end, so fetches follow one another until the budget or the end
        is reached.  A start inside a message (newest=N's window) moves to the next message boundary first."""
        if start >= end:
            return start, [], False
        if self.api.has("newest"):
            start = await self.brokers.boundary(tp, start)
        messages: list = []
        position, budget = start, self.max_bytes
        while position < end and budget > 0:
            try:
                found = await self.brokers.fetch(tp, position, budget)
            except FetchSizeTooSmall:
                if messages:
                    break  # (the next message does not fit in what is left: the next page starts there)
                raise TwlogError(f"the message at offset {position} is larger than max_bytes={self.max_bytes}: ask "
                                 f"for more (at most {MAX_FETCH_BYTES})") from None
            except OffsetOutOfRange as e:
                raise TwlogError(f"offset {position} is out of range (retention deleted it meanwhile?): {e}") from None
            if not found:
                break
            messages += found
            budget -= found[-1].next_offset - position
            position = found[-1].next_offset
        return start, messages, position < end

    async def _page(self, chosen, bounds, starts, fetched, mode: str, value: Any) -> dict:
        queues = {tp: list(found[1]) for tp, found in fetched.items()}
        if mode == "newest":
            queues = {tp: q[-value:] for tp, q in queues.items()}
        cursor = {tp: (q[0].offset if q else fetched[tp][0]) for tp, q in queues.items()}
        answered: list[dict] = []
        scanned = matched = bytes_read = 0
        truncated = any(found[2] for found in fetched.values())
        while len(answered) < self.limit and any(queues.values()):
            for tp in [tp for tp in chosen if queues.get(tp)]:
                if len(answered) >= self.limit:
                    break
                message = queues[tp].pop(0)
                scanned += 1
                bytes_read += message.next_offset - message.offset
                cursor[tp] = message.next_offset
                shown, error = await self._render(message.payload)
                if self.filter and self.filter not in shown.lower():
                    continue
                matched += 1
                answered.append({"partition": tp.name, "offset": message.offset, "next_offset": message.next_offset,
                                 "size": len(message.payload), "value": shown, "format": self.format,
                                 "error": error})
        truncated = truncated or any(queues.values())
        answer = {
            "topic": self.topic,
            "partitions": [{"partition": tp.name, "first_offset": bounds[tp][0] if tp in bounds else None,
                            "end_offset": bounds[tp][1] if tp in bounds else None} for tp in chosen],
            "messages": answered,
            "next_cursor": ",".join(f"{tp.name}:{cursor[tp]}" for tp in chosen if tp in cursor) or None,
            "bytes_read": bytes_read, "scanned": scanned, "matched": matched, "truncated": truncated,
            "problems": self.problems}
        if self.unreachable:
            answer["unreachable"] = self.unreachable
        return answer

    async def _render(self, payload: bytes) -> tuple[str, str | None]:
        if self.format != "avro":
            return render(payload, self.format)
        try:
            record = await defer.maybeDeferred(avro_deserializer(self.context), self.topic, payload)
        except Exception as e:  # (not Avro, an unknown id, the registry down: shown as text, with why)
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            return render(payload, "text")[0], f"not decoded as Avro: {why}"
        return json.dumps(record, indent=2, ensure_ascii=False, default=_jsonable), None


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return value.decode("latin-1")
    return str(value)


def avro_deserializer(context: ConsoleContext):
    """The console's Avro deserializer (its registry client made once, schemas cached)."""
    deserializer = context.parts.get("avro")
    if deserializer is None:
        client = RegistryClient(context.registry_url, reactor=context.reactor, timeout_s=context.timeout_s,
                                tls=context.options.tls)
        deserializer = context.parts["avro"] = AvroDeserializer(client)
    return deserializer


async def browse(api: ApiRequest) -> dict:
    return await Browse(api).answer()


__all__ = ["browse", "parse_cursor", "render"]
