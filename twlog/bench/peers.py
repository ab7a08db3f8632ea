# -*- test-case-name: tests.bench.test_compare -*-
"""The peers of C{twlog bench compare}: RabbitMQ (pika) and ActiveMQ (stomp.py) on loopback, as the paper ran them.

Each peer's producer sends one persistent 200-byte message per request to a durable queue (the paper: "ActiveMQ
and RabbitMQ don't seem to have an easy way to batch messages"); its consumer prefetches up to 1000 messages and
acknowledges automatically. The clients are blocking: C{twlog bench compare} runs them on a thread while its
reactor waits. Both client libraries are optional (C{pip install twlog[compare]}); L{unavailable} says why a
peer cannot run. Every loop is bounded by a message count and a L{Deadline}.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence

import attrs

try:
    import pika
except ImportError:  # an optional extra: compare runs without this peer
    pika = None
try:
    import stomp
except ImportError:  # an optional extra: compare runs without this peer
    stomp = None

#: The peers: name -> (label, default loopback port, client package, script that starts one).
PEERS = {
    "rabbitmq": ("RabbitMQ", 5672, "pika", "scripts/peers/rabbitmq.sh start"),
    "activemq": ("ActiveMQ", 61613, "stomp.py", "scripts/peers/activemq.sh start"),
}


class Deadline:
    """A time limit for one test; L{check} raises C{TimeoutError} naming the test once it has passed, or
    L{Interrupted} once L{cancel} was called (from another thread: the reactor shutting down on Ctrl-C)."""

    def __init__(self, seconds: float, what: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.what = what
        self._clock = clock
        self._end = clock() + seconds
        self._cancelled = threading.Event()

    @property
    def passed(self) -> bool:
        return self._cancelled.is_set() or self._clock() >= self._end

    def cancel(self) -> None:
        self._cancelled.set()

    def check(self, done: int, total: int) -> None:
        if self._cancelled.is_set():
            raise Interrupted(f"{self.what} interrupted ({done:,} of {total:,} messages)")
        if self._clock() >= self._end:
            raise TimeoutError(f"{self.what} did not finish within {self.seconds:g} s ({done:,} of {total:,} messages)")


class Interrupted(Exception):
    """A test stopped by L{Deadline.cancel}."""


@attrs.define
class Trace:
    """Cumulative (messages done, seconds since the start) points of one test: its throughput over time.

    L{mark} is cheap enough for every message; it records a point every C{step} messages and reports
    progress through C{on_mark}.
    """

    total: int
    step: int = 0
    on_mark: Callable[[int], None] | None = None
    points: list[tuple[int, float]] = attrs.field(factory=list)
    started: float = 0.0
    _next: int = 0

    def __attrs_post_init__(self) -> None:
        if self.step <= 0:
            self.step = max(1, self.total // 100)

    def start(self) -> None:
        self.started = time.perf_counter()
        self.points = [(0, 0.0)]
        self._next = self.step

    def mark(self, done: int) -> None:
        if done >= self._next:
            self._next = done + self.step
            self.points.append((done, time.perf_counter() - self.started))
            if self.on_mark is not None:
                self.on_mark(done)

    def finish(self, done: int) -> float:
        """The last point (C{done} messages, now); the test's seconds."""
        seconds = time.perf_counter() - self.started
        if self.points and self.points[-1][0] == done:
            self.points[-1] = (done, seconds)
        else:
            self.points.append((done, seconds))
        if self.on_mark is not None:
            self.on_mark(done)
        return seconds


def listening(port: int, timeout_s: float = 1.0) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:C{port}."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def unavailable(peer: str, port: int) -> str | None:
    """Why C{peer} cannot run on 127.0.0.1:C{port} (its client is not installed, nothing listens), or None."""
    label, _, package, script = PEERS[peer]
    if (pika if peer == "rabbitmq" else stomp) is None:
        return f"{label}: the {package} package is not installed (pip install 'twlog[compare]')"
    if not listening(port):
        return f"{label}: nothing listens on 127.0.0.1:{port} (start one with {script})"
    return None


def client_version(peer: str) -> str:
    """The client library's name and version."""
    module = pika if peer == "rabbitmq" else stomp
    version = getattr(module, "__version__", None)
    if isinstance(version, tuple):
        version = ".".join(map(str, version))
    return f"{PEERS[peer][2]} {version or '?'}"


# -- RabbitMQ (AMQP 0-9-1 through pika) ---------------------------------------------------------------


def _rabbitmq_connection(port: int):
    parameters = pika.ConnectionParameters("127.0.0.1", port, credentials=pika.PlainCredentials("guest", "guest"),
                                           blocked_connection_timeout=60, socket_timeout=30)
    return pika.BlockingConnection(parameters)


def rabbitmq_server_version(port: int) -> str:
    connection = _rabbitmq_connection(port)
    try:
        # pika keeps the server's connection.start properties on the connection it wraps.
        properties = getattr(getattr(connection, "_impl", None), "server_properties", None) or {}
        version = properties.get("version", b"?")
        return "RabbitMQ " + (version.decode() if isinstance(version, bytes) else str(version))
    finally:
        connection.close()


def rabbitmq_produce(port: int, queue: str, data: Sequence[bytes], count: int, trace: Trace,
                     deadline: Deadline) -> float:
    """Publish C{count} persistent messages to the durable C{queue}, one per request; seconds until the queue
    holds them all."""
    connection = _rabbitmq_connection(port)
    try:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        channel.queue_purge(queue)
        persistent = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent)
        publish = channel.basic_publish
        distinct = len(data)
        trace.start()
        try:
            for i in range(count):
                publish("", queue, data[i % distinct], persistent)
                if i % 1000 == 999:
                    trace.mark(i + 1)
                    deadline.check(i + 1, count)
            # The channel delivers in order: once a passive declare counts them all, the queue has every message.
            while channel.queue_declare(queue, durable=True, passive=True).method.message_count < count:
                deadline.check(count, count)
                time.sleep(0.005)
        except (TimeoutError, Interrupted):
            channel.queue_delete(queue)  # no durable leftovers in the broker's store
            raise
        return trace.finish(count)
    finally:
        connection.close()


def rabbitmq_consume(port: int, queue: str, count: int, prefetch: int, trace: Trace, deadline: Deadline) -> float:
    """Consume C{count} messages of C{queue} with automatic acknowledgement (basic.qos C{prefetch}); seconds.

    The queue is deleted afterwards."""
    connection = _rabbitmq_connection(port)
    try:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=prefetch)
        received = 0
        trace.start()
        for method, _, body in channel.consume(queue, auto_ack=True, inactivity_timeout=1.0):
            if method is not None:
                received += 1
                trace.mark(received)
                if received >= count:
                    break
                if received % 1000 == 0:
                    deadline.check(received, count)
            elif deadline.passed:
                deadline.check(received, count)
        seconds = trace.finish(received)
        channel.cancel()
        channel.queue_delete(queue)
        return seconds
    finally:
        connection.close()


# -- ActiveMQ (STOMP 1.2 through stomp.py) ------------------------------------------------------------------


class _Counter:
    """A stomp.py listener that counts messages into a L{Trace} and wakes the waiting thread at C{count}."""

    def __init__(self, count: int, trace: Trace) -> None:
        self.count = count
        self.trace = trace
        self.received = 0
        self.done = threading.Event()
        self.error: str | None = None

    def on_message(self, frame) -> None:
        self.received += 1
        self.trace.mark(self.received)
        if self.received >= self.count:
            self.done.set()

    def on_error(self, frame) -> None:
        self.error = frame.headers.get("message", str(frame.body)[:200])
        self.done.set()

    def on_disconnected(self) -> None:
        if self.received < self.count:
            self.error = self.error or "the broker closed the connection"
        self.done.set()


def _activemq_connection(port: int):
    connection = stomp.Connection12([("127.0.0.1", port)], auto_decode=False, heartbeats=(0, 0))
    connection.connect(wait=True)
    return connection


def activemq_server_version(port: int) -> str:
    connection = stomp.Connection12([("127.0.0.1", port)], auto_decode=False)
    server: list[str] = []

    class Listener:
        def on_connected(self, frame) -> None:
            server.append(frame.headers.get("server", "ActiveMQ ?"))

    connection.set_listener("version", Listener())
    connection.connect(wait=True)
    try:
        return server[0].replace("/", " ") if server else "ActiveMQ ?"
    finally:
        connection.disconnect()


class _Receipt:
    """A stomp.py listener that wakes the waiting thread when the broker's RECEIPT for C{receipt} comes."""

    def __init__(self, receipt: str) -> None:
        self.receipt = receipt
        self.done = threading.Event()
        self.error: str | None = None

    def on_receipt(self, frame) -> None:
        if frame.headers.get("receipt-id") == self.receipt:
            self.done.set()

    def on_error(self, frame) -> None:
        self.error = frame.headers.get("message", str(frame.body)[:200])
        self.done.set()

    def on_disconnected(self) -> None:
        self.error = self.error or "the broker closed the connection"
        self.done.set()


def activemq_produce(port: int, queue: str, data: Sequence[bytes], count: int, trace: Trace,
                     deadline: Deadline) -> float:
    """Send C{count} persistent messages to C{queue}, one per frame; seconds until the broker's receipt for the
    last one, which asks for one (ActiveMQ answers it once that message is stored; the journal is written in
    order, so every message before it is stored too)."""
    connection = _activemq_connection(port)
    receipt = _Receipt(f"twlog-compare-{queue}")
    connection.set_listener("receipt", receipt)
    destination = f"/queue/{queue}"
    headers = {"persistent": "true"}
    send = connection.send
    distinct = len(data)
    trace.start()
    try:
        for i in range(count - 1):
            send(destination, data[i % distinct], headers=headers)
            if i % 1000 == 999:
                trace.mark(i + 1)
                deadline.check(i + 1, count)
        send(destination, data[(count - 1) % distinct], headers={**headers, "receipt": receipt.receipt})
        while not receipt.done.wait(0.5):
            deadline.check(count, count)
        if receipt.error is not None:
            raise RuntimeError(f"ActiveMQ: {receipt.error}")
        return trace.finish(count)
    finally:
        connection.disconnect()


def activemq_consume(port: int, queue: str, count: int, prefetch: int, trace: Trace, deadline: Deadline) -> float:
    """Consume C{count} messages of C{queue} with C{ack:auto} and C{activemq.prefetchSize} C{prefetch}; seconds."""
    connection = _activemq_connection(port)
    counter = _Counter(count, trace)
    connection.set_listener("count", counter)
    try:
        trace.start()
        connection.subscribe(f"/queue/{queue}", id="1", ack="auto",
                             headers={"activemq.prefetchSize": str(prefetch)})
        while not counter.done.wait(1.0):
            deadline.check(counter.received, count)
        if counter.error is not None:
            raise RuntimeError(f"ActiveMQ: {counter.error}")
        seconds = trace.finish(counter.received)
        connection.unsubscribe(id="1")
        return seconds
    finally:
        connection.disconnect()
