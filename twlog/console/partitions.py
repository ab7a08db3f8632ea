# -*- test-case-name: tests.console.test_api_cluster -*-
"""The console's requests to the brokers for one API request: one L{SimpleConsumer} per broker (closed when the
request is answered), every wait bounded by the console's timeout, and a broker that does not answer named (as
C{broker 1 (127.0.0.1:9092)}) rather than waited for."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer

from twlog.client.connection import BrokerConnection
from twlog.client.replica_status import ask_leaders
from twlog.console.context import ConsoleContext
from twlog.console.http import ApiError
from twlog.consumer.simple import SimpleConsumer
from twlog.coord.layout import ClusterLayout
from twlog.errors import BrokerTimeout, ConnectionFailed, TwlogError
from twlog.partition import TopicPartition, address_text
from twlog.protocol.codec import EARLIEST, LATEST, BoundariesRequest, OffsetsRequest

#: The most bytes one fetch of the message browser asks for (docs/console.md: max_bytes at most 1 MiB).
MAX_FETCH_BYTES = 1024 * 1024


class BrokerUnreachable(TwlogError):
    """A broker that did not answer (C{what}: C{broker 1 (127.0.0.1:9092)})."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"cannot reach {what}: {why}")
        self.what = what


class Brokers:
    """The brokers of one API request, reached at the addresses of C{layout}."""

    def __init__(self, context: ConsoleContext, layout: ClusterLayout) -> None:
        self.context = context
        self.layout = layout
        self._consumers: dict[int, SimpleConsumer] = {}
        self._connections: dict[int, BrokerConnection] = {}

    def name(self, broker_id: int) -> str:
        address = self.layout.brokers.get(broker_id)
        return f"broker {broker_id}" + (f" ({address_text(*address)})" if address else "")

    def consumer(self, broker_id: int) -> SimpleConsumer:
        if broker_id not in self._consumers:
            host, port = self.layout.brokers[broker_id]
            self._consumers[broker_id] = SimpleConsumer(host, port, reactor=self.context.reactor,
                                                        options=self.context.options, max_bytes=MAX_FETCH_BYTES)
        return self._consumers[broker_id]

    def connection(self, broker_id: int) -> BrokerConnection:
        """A connection to C{broker_id} for OFFSETS and BOUNDARIES (asked of a partition's leader directly)."""
        if broker_id not in self._connections:
            host, port = self.layout.brokers[broker_id]
            self._connections[broker_id] = BrokerConnection(host, port, reactor=self.context.reactor,
                                                            options=self.context.options)
        return self._connections[broker_id]

    def leader(self, tp: TopicPartition) -> int | None:
        return self.layout.leader(tp)

    def _leader_of(self, tp: TopicPartition) -> int:
        leader = self.leader(tp)
        if leader is None:
            raise BrokerUnreachable(f"the leader of {tp}", "it has no live leader")
        return leader

    async def request(self, tp: TopicPartition, request: Any) -> Any:
        """C{request} (about C{tp}) of C{tp}'s leader, within the timeout (as L{ask})."""
        leader = self._leader_of(tp)
        return await self.ask(leader, self.connection(leader).request(request))

    async def boundary(self, tp: TopicPartition, position: int) -> int:
        """The first message boundary of C{tp} at or after C{position} (BOUNDARIES; its end when none)."""
        answer = await self.request(tp, BoundariesRequest(tp.topic, tp.number, (position,)))
        return answer.offsets[0]

    async def ask(self, broker_id: int, d: defer.Deferred) -> Any:
        """C{d} (a request to C{broker_id}) within the timeout.  @raise BrokerUnreachable: it took longer, or the
        connection failed; other errors as they are."""
        d.addTimeout(self.context.timeout_s, self.context.reactor)
        try:
            return await d
        except defer.TimeoutError:
            raise BrokerUnreachable(self.name(broker_id), f"no answer within {self.context.timeout_s:g} s") from None
        except (ConnectionFailed, BrokerTimeout) as e:
            raise BrokerUnreachable(self.name(broker_id), str(e).splitlines()[0]) from None

    async def offsets(self, tp: TopicPartition, time: int, max_offsets: int = 1) -> list[int]:
        """OFFSETS of C{tp} at its leader (L{LATEST}, L{EARLIEST}, or ms since the epoch).

        @raise BrokerUnreachable: as L{ask}; or C{tp} has no live leader.
        """
        answer = await self.request(tp, OffsetsRequest(tp.topic, tp.number, time, max_offsets))
        return list(answer.offsets)

    async def first_last(self, tp: TopicPartition) -> tuple[int, int]:
        """C{tp}'s earliest and latest (the flushed end, where the next message goes) offsets."""
        (first,) = await self.offsets(tp, EARLIEST) or [0]
        (last,) = await self.offsets(tp, LATEST) or [0]
        return first, last

    async def fetch(self, tp: TopicPartition, offset: int, max_bytes: int) -> list:
        """The whole messages of C{tp} in the C{max_bytes} from C{offset} (L{MessageAndOffset}s), read from its
        leader.  @raise FetchSizeTooSmall: the message at C{offset} is larger; OffsetOutOfRange."""
        leader = self._leader_of(tp)
        fetched = await self.ask(leader, self.consumer(leader).fetch(tp.topic, tp.name, offset, max_bytes))
        return list(fetched.messages)

    async def progress(self, replicated) -> tuple[dict, list[str]]:
        """What the leaders of a replicated topic's partitions know (high watermarks, replica ends), as C{twlog
        topics describe} asks it (L{ask_leaders}): the answers and one line per problem."""
        return await ask_leaders(replicated, self.layout.brokers, reactor=self.context.reactor,
                                 options=self.context.options)

    async def close(self) -> None:
        closing = [c.close() for c in self._consumers.values()] + [c.close() for c in self._connections.values()]
        self._consumers, self._connections = {}, {}
        await defer.DeferredList(closing, consumeErrors=True)


def brokers_for(context: ConsoleContext, layout: ClusterLayout) -> Brokers:
    """The L{Brokers} of one request (C{context.parts["brokers"]}, a factory, replaces them in tests)."""
    return context.parts.get("brokers", Brokers)(context, layout)


async def first_last_all(brokers: Brokers, partitions: list[TopicPartition]
                         ) -> tuple[dict[TopicPartition, tuple[int, int]], list[str], list[str]]:
    """Each partition's (first, last) offsets, asked of the leaders all at once: the answers, the problems (one
    line each), and the brokers unreachable (for the banner)."""
    async def one(tp: TopicPartition) -> tuple[int, int]:
        return await brokers.first_last(tp)

    answers = await defer.DeferredList([defer.ensureDeferred(one(tp)) for tp in partitions], consumeErrors=True)
    found: dict[TopicPartition, tuple[int, int]] = {}
    problems: list[str] = []
    unreachable: list[str] = []
    for tp, (ok, result) in zip(partitions, answers):
        if ok:
            found[tp] = result
            continue
        error = result.value
        line = str(error).splitlines()[0] if str(error) else type(error).__name__
        if f"{tp}: {line}" not in problems:
            problems.append(f"{tp}: {line}")
        if isinstance(error, BrokerUnreachable) and error.what not in unreachable:
            unreachable.append(error.what)
    return found, problems, unreachable


def no_answer(what: str, error: BaseException) -> ApiError:
    """503 naming what did not answer."""
    line = str(error).splitlines()[0] if str(error) else type(error).__name__
    return ApiError(503, line, [what])
