# -*- test-case-name: tests.integration.test_client -*-
"""The blocking facade: the Twisted producer and consumer for scripts that do not run a reactor.

Each call is made on the reactor thread with C{blockingCallFromThread} and
waits for its Deferred, so the operations, results and typed exceptions are
exactly those of L{Producer} and L{SimpleConsumer}.  If the reactor is not
running yet, the first facade object starts it in a daemon thread (without
signal handlers); if it is already running in another thread (a Twisted app,
or trial), that reactor is used.  The facade must not be called from the
reactor thread itself: that would wait forever, so it raises instead.

The paper's sample reads naturally::

    with BlockingConsumer("localhost", 9092) as consumer:
        for message in consumer.stream("clicks", 0, offset):
            process(message.payload)

Nothing waits forever: requests carry the clients' timeouts, a stream waits
for new data (that is what it is for) unless given C{idle_timeout_s}.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from twisted.internet.threads import blockingCallFromThread
from twisted.python import threadable
from typing_extensions import Self

from twlog.consumer.group import GroupConsumer
from twlog.consumer.simple import LATEST, FetchedMessages, MessageStream, SimpleConsumer
from twlog.deprecation import renamed
from twlog.errors import ClientClosed
from twlog.partition import TopicPartition
from twlog.producer import Producer
from twlog.protocol.codec import ProduceResult
from twlog.storage.batch import MessageBatch
from twlog.storage.message import MessageAndOffset

T = TypeVar("T")

# Guards starting the reactor thread, so that two facades made at once start it once.
_START_LOCK = threading.Lock()


def running_reactor(reactor=None, start_timeout_s: float = 10.0):
    """C{reactor} (default: the global one), started in a daemon thread unless it is already running."""
    if reactor is None:
        from twisted.internet import reactor
    _check_thread()
    with _START_LOCK:
        if not reactor.running:
            if getattr(reactor, "_startedBefore", False):
                raise RuntimeError("the reactor has stopped and cannot be restarted; the blocking facade needs it")
            started = threading.Event()
            reactor.callWhenRunning(started.set)
            thread = threading.Thread(
                target=reactor.run, kwargs={"installSignalHandlers": False}, name="twlog-reactor", daemon=True
            )
            thread.start()
            if not started.wait(start_timeout_s):
                raise RuntimeError(f"the reactor did not start within {start_timeout_s:g} s")
    return reactor


def _check_thread() -> None:
    """Refuse to block the reactor's own thread, where the call could never complete."""
    if threadable.isInIOThread():
        raise RuntimeError(
            "the blocking facade cannot be used on the reactor thread (it would wait forever); "
            "use twlog.producer.Producer or twlog.consumer.SimpleConsumer there"
        )


class _Facade:
    """Calls into the reactor thread and waits for the result."""

    def __init__(self, reactor) -> None:
        self._reactor = running_reactor(reactor)

    def _call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        _check_thread()
        if not self._reactor.running:
            raise ClientClosed("the reactor is not running")
        return blockingCallFromThread(self._reactor, function, *args, **kwargs)


class _ClosingFacade(_Facade, ABC):
    """A facade over a client that holds resources: a context manager that closes it on exit."""

    @abstractmethod
    def close(self) -> None:
        """Release what the wrapped client holds (each facade says what that is)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class BlockingProducer(_ClosingFacade):
    """L{Producer} for plain scripts: the same arguments; L{send} returns what the Deferred fired with."""

    def __init__(self, brokers: str | Sequence[tuple[str, int]] | None = None, *, reactor=None,
                 **options: Any) -> None:
        super().__init__(reactor)
        self._producer: Producer = self._call(lambda: Producer(brokers, reactor=self._reactor, **options))

    @property
    def dropped(self) -> int:
        """Messages dropped because the async queue was full."""
        return self._producer.dropped

    def send(
        self, topic: str, messages: bytes | Sequence[bytes], key: bytes | str | None = None, *,
        partition_index: int | None = None, partition: int | None = None,
    ) -> ProduceResult | None:
        """Send a batch; see L{Producer.send} (C{partition=} is the deprecated name of C{partition_index=})."""
        partition_index = renamed("partition", "partition_index", partition, partition_index)
        return self._call(self._producer.send, topic, messages, key, partition_index=partition_index)

    def partitions(self, topic: str) -> list[TopicPartition]:
        """The partitions of C{topic}, ordered by (broker id, partition)."""
        return self._call(self._producer.partitions, topic)

    def flush(self) -> None:
        """Send everything queued and wait for it."""
        self._call(self._producer.flush)

    def close(self) -> None:
        """Flush and close the connections."""
        self._call(self._producer.close)


class BlockingStream(_ClosingFacade):
    """A plain iterator over one partition; it never ends unless it has an idle timeout or is closed."""

    def __init__(self, reactor, stream: MessageStream) -> None:
        self._reactor = reactor
        self._stream = stream

    @property
    def next_offset(self) -> int:
        """The offset after the last message returned: where to resume."""
        return self._stream.next_offset

    def __iter__(self) -> Iterator[MessageAndOffset]:
        return self

    def __next__(self) -> MessageAndOffset:
        try:
            return self._call(self._stream.__anext__)
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        """Stop the stream and close its connection."""
        self._call(self._stream.close)


class BlockingConsumer(_ClosingFacade):
    """L{SimpleConsumer} for plain scripts: fetch, offsets, and a blocking L{stream}.

    It takes L{SimpleConsumer}'s keywords: C{on_corrupt="skip"} skips corrupt stored messages (logged
    with their byte range) instead of raising L{twlog.storage.message.CorruptMessage} after the valid
    messages before them.
    """

    def __init__(self, host: str, port: int, *, reactor=None, **options: Any) -> None:
        super().__init__(reactor)
        self._consumer: SimpleConsumer = self._call(
            lambda: SimpleConsumer(host, port, reactor=self._reactor, **options)
        )

    def fetch(self, topic: str, partition: str | int, offset: int, max_bytes: int | None = None, **options: Any
              ) -> FetchedMessages:
        """Messages from C{offset} and the offset to fetch next; see L{SimpleConsumer.fetch}."""
        return self._call(self._consumer.fetch, topic, partition, offset, max_bytes, **options)

    def fetch_batch(self, topic: str, partition: str | int, offset: int, max_bytes: int | None = None) -> MessageBatch:
        """L{fetch} as a L{MessageBatch}: no object per message until iterated; see L{SimpleConsumer.fetch_batch}."""
        return self._call(self._consumer.fetch_batch, topic, partition, offset, max_bytes)

    def batches(self, topic: str, partition: str | int, offset: int, **options: Any) -> BlockingStream:
        """An iterator of L{MessageBatch}es, pipelined; see L{SimpleConsumer.batches}."""
        return BlockingStream(self._reactor, self._call(self._consumer.batches, topic, partition, offset, **options))

    def offsets(self, topic: str, partition: str | int, time: int = LATEST, max_offsets: int = 1) -> list[int]:
        """Offsets before C{time} (-1 latest, -2 earliest, or ms), newest first."""
        return self._call(self._consumer.offsets, topic, partition, time, max_offsets)

    def stream(self, topic: str, partition: str | int, offset: int, **options: Any) -> BlockingStream:
        """An iterator over C{topic}-C{partition} from C{offset}; see L{SimpleConsumer.stream}."""
        return BlockingStream(self._reactor, self._call(self._consumer.stream, topic, partition, offset, **options))

    def close(self) -> None:
        """Close the consumer's connections and streams."""
        self._call(self._consumer.close)


class BlockingGroupStream(_Facade):
    """A group stream as a plain iterator: it never ends, unless its consumer is closed.

    C{next()} raises what the stream raises: L{RebalanceFailed} (once) when the
    consumer's rebalance ran out of retries, a partition's error in its place.
    """

    def __init__(self, reactor, stream) -> None:
        self._reactor = reactor
        self._stream = stream

    @property
    def topic(self) -> str:
        """The stream's topic."""
        return self._stream.topic

    @property
    def stream_id(self) -> str:
        """C{<consumer id>-<n>}: the id its partitions' owner nodes hold."""
        return self._stream.stream_id

    def __iter__(self) -> Iterator:
        return self

    def __next__(self):
        try:
            return self._call(self._stream.__anext__)
        except StopAsyncIteration:
            raise StopIteration from None


class BlockingGroupConsumer(_ClosingFacade):
    """L{GroupConsumer} for plain scripts: the same arguments; streams are plain iterators.

    ::

        with BlockingGroupConsumer("localhost:2181", "loaders") as consumer:
            [stream] = consumer.create_message_streams({"clicks": 1})["clicks"]
            for message in stream:
                process(message.payload)
    """

    def __init__(self, zookeeper: str, group: str, *, reactor=None, **options: Any) -> None:
        super().__init__(reactor)
        self._consumer = self._call(lambda: GroupConsumer(zookeeper, group, reactor=self._reactor, **options))

    @property
    def consumer_id(self) -> str:
        """This member's id in the group."""
        return self._consumer.consumer_id

    def create_message_streams(self, subscription: dict[str, int]) -> dict[str, list[BlockingGroupStream]]:
        """Join the group with C{subscription} (topic -> number of streams); the streams per topic."""
        streams = self._call(self._consumer.create_message_streams, subscription)
        return {topic: [BlockingGroupStream(self._reactor, s) for s in ss] for topic, ss in streams.items()}

    def owned(self) -> dict[str, dict[str, str]]:
        """The partitions this member delivers now: topic -> {partition name: stream id}."""
        return self._call(self._consumer.owned)

    def commit(self) -> None:
        """Write the consumed offsets of the partitions owned now."""
        self._call(self._consumer.commit)

    def close(self) -> None:
        """Commit, release the partitions, leave the group; the streams end."""
        self._call(self._consumer.close)
