# -*- test-case-name: tests.bench.test_hostile,tests.integration.test_bench_hostile -*-
"""The five attacks of C{twlog bench hostile} (the healthy client is L{twlog.bench.healthy}).

Each attack (L{idle_flood}, L{half_sent_frames}, L{pipelined_flood}, L{big_frames}, L{connection_burst}) is
bounded in count and in time, talks only to 127.0.0.1 and closes everything it opened before it returns its
figures (L{twlog.bench.verdicts}).  They run in the benchmark's process, on blocking sockets in threads or on
non-blocking ones under a selector.
"""

from __future__ import annotations

import math
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence

from twlog.bench.healthy import FRAME_SIZE, HOST, TOPIC, call, connect, framed
from twlog.bench.verdicts import BigFrames, Burst, HalfSent, IdleFlood, Pipelined, error_name
from twlog.protocol import codec
from twlog.protocol.codec import (
    ACK_APPENDED,
    LATEST,
    AckProduceRequest,
    OffsetsRequest,
    ProduceRequest,
)
from twlog.storage.message import encode_message_set

MIB = 1024 * 1024
#: The big-frame attack's topic.
BIG_TOPIC = "big"
#: Bytes of its frame each stalled sender never sends.
UNSENT_BYTES = 64 * 1024
#: Payload bytes of each message of the large produces (under the broker's default --max-message-bytes).
MESSAGE_BYTES = 900_000
FRAME_ERROR = struct.Struct(">h")
#: What an attack calls as it goes: (done, description or None).
Report = Callable[[float, "str | None"], object]


def _no_report(done: float, description: str | None = None) -> None:
    pass


def big_message_set(total_bytes: int) -> bytes:
    """A message set of about C{total_bytes}: messages of at most L{MESSAGE_BYTES} that do not compress."""
    count = max(1, math.ceil(total_bytes / MESSAGE_BYTES))
    size = max(1, total_bytes // count - 10)  # 10 bytes of header per message
    chunk = os.urandom(size)
    return encode_message_set([b"%09d" % i + chunk[9:] for i in range(count)])


class FrameCounter:
    """Counts the answers (size-prefixed frames) in a byte stream fed to it piece by piece."""

    def __init__(self) -> None:
        self._buffer = b""
        self.frames = 0
        #: The first whole answer's body, once it has come.
        self.first: bytes | None = None

    def feed(self, data: bytes) -> int:
        """Add C{data}; the frames it completed."""
        buf = self._buffer + data if self._buffer else data
        pos, end, before = 0, len(buf), self.frames
        unpack = FRAME_SIZE.unpack_from
        while end - pos >= 4:
            (size,) = unpack(buf, pos)
            if end - pos - 4 < size:
                break
            if self.first is None:
                self.first = bytes(buf[pos + 4 : pos + 4 + size])
            pos += 4 + size
            self.frames += 1
        self._buffer = buf[pos:]
        return self.frames - before


# -- waiting for answers on many connections ------------------------------------------------------------------


def await_answers(socks: Sequence[socket.socket | str], deadline: float) -> list[float | str]:
    """Wait (until C{deadline}, monotonic) for one answer on each of C{socks} (a request already sent; or why
    it could not be): per socket, the monotonic time its answer was whole, or why there was none."""
    outcome: list[float | str] = [s if isinstance(s, str) else "no answer in time" for s in socks]
    counters = {}
    with selectors.DefaultSelector() as selector:
        for i, sock in enumerate(socks):
            if not isinstance(sock, str):
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ, i)
                counters[i] = FrameCounter()
        while counters and time.monotonic() < deadline:
            for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
                i = key.data
                try:
                    data = key.fileobj.recv(65536)
                except OSError as e:
                    data, outcome[i] = b"", _why(e)
                else:
                    if not data:
                        outcome[i] = "closed by the broker"
                if data and counters[i].feed(data):
                    outcome[i] = answer_error(counters[i].first) or time.monotonic()
                if not data or counters[i].frames:
                    selector.unregister(key.fileobj)
                    del counters[i]
    return outcome


def answer_error(body: bytes | None) -> str | None:
    """The error an answer carries (every answer starts with its int16 error code), in words; None if none."""
    if body is None or len(body) < 2:
        return "an answer too short to hold an error code"
    (code,) = FRAME_ERROR.unpack_from(body)
    return None if code == 0 else error_name(code)


def _why(error: OSError) -> str:
    """What a failed connection tells its client, in words."""
    if isinstance(error, ConnectionResetError):
        return "reset by the broker"
    return f"{type(error).__name__}: {error}"


def closed_by_peer(socks: Sequence[socket.socket], wait_s: float = 0.0) -> int:
    """How many of C{socks} (on which nothing is expected) the other end has closed, waiting up to C{wait_s}."""
    closed = 0
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            selector.register(sock, selectors.EVENT_READ)
        for key, _ in selector.select(wait_s):
            try:
                closed += not key.fileobj.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except OSError:
                closed += 1
    return closed


def _offsets_request() -> bytes:
    return framed(OffsetsRequest(TOPIC, 0, LATEST, 1))


def _close_all(socks: Sequence[socket.socket | str]) -> None:
    for sock in socks:
        if not isinstance(sock, str):
            sock.close()


# -- the attacks ----------------------------------------------------------------------------------------------


def idle_flood(port: int, idle: int, newcomers: int, idle_s: float, answer_timeout_s: float,
               report: Report = _no_report) -> IdleFlood:
    """C{idle} connections that send nothing, for C{idle_s}; then C{newcomers} new clients each asking for an
    offset: how many of those are answered within C{answer_timeout_s}, and how many idle ones the broker closed."""
    flood: list[socket.socket] = []
    new: list[socket.socket | str] = []
    try:
        for i in range(idle):
            flood.append(connect(port))
            if i % 50 == 0:
                report(i, None)
        report(idle, f"idle flood: {idle:,} idle connections open; {newcomers} newcomers")
        threading.Event().wait(idle_s)  # idle, and time for the broker to take them all in
        refused = closed_by_peer(flood)  # those it closed, before the newcomers came
        request = _offsets_request()
        for _ in range(newcomers):
            try:
                sock = connect(port)
            except OSError as e:
                new.append(_why(e))
                continue
            new.append(sock)
            try:
                sock.sendall(request)
            except OSError as e:
                new[-1] = _why(e)
                sock.close()
        outcome = await_answers(new, time.monotonic() + answer_timeout_s)
        served = sum(isinstance(o, float) for o in outcome)
        failures = [o for o in outcome if isinstance(o, str)]
        return IdleFlood(idle, idle - refused, newcomers, served, closed_by_peer(flood) - refused,
                         failures[0] if failures else None)
    finally:
        _close_all(flood)
        _close_all(new)


class _Staller(threading.Thread):
    """Announces a frame of C{len(body)} bytes and sends all of it but the last L{UNSENT_BYTES}, as fast as
    the broker reads; then waits, sending nothing, until the broker closes it or L{close} is called."""

    def __init__(self, port: int, body: memoryview) -> None:
        super().__init__(daemon=True)
        self._port, self._body = port, body
        self._closing = threading.Event()
        self.sock: socket.socket | None = None
        self.sent = 0
        #: Set once it has sent what it will (or cannot go on).
        self.stalled = threading.Event()
        #: Monotonic time the broker closed the connection, if it did.
        self.closed_by_broker_at: float | None = None
        self.error: str | None = None

    def run(self) -> None:
        try:
            self.sock = sock = connect(self._port)
            sock.settimeout(0.2)
            sock.sendall(FRAME_SIZE.pack(len(self._body)))
            end = len(self._body) - UNSENT_BYTES
            while self.sent < end and not self._closing.is_set():
                try:
                    self.sent += sock.send(self._body[self.sent : min(end, self.sent + MIB)])
                except socket.timeout:
                    continue  # the broker is not reading us: wait (bounded by close())
            self.stalled.set()
            while not self._closing.is_set():
                try:
                    if not sock.recv(65536):
                        break
                except socket.timeout:
                    continue
            if not self._closing.is_set():
                self.closed_by_broker_at = time.monotonic()
        except OSError as e:
            if not self._closing.is_set():
                self.closed_by_broker_at = time.monotonic()
                self.error = f"{type(e).__name__}: {e}"
        finally:
            self.stalled.set()

    def close(self) -> None:
        self._closing.set()
        self.join(5)
        if self.sock is not None:
            self.sock.close()


def stalled_body(frame_bytes: int) -> memoryview:
    """An ACK_PRODUCE request body of C{frame_bytes}: a valid header and a message set of zeros after it."""
    header = codec.encode_request(AckProduceRequest(ACK_APPENDED, 10_000, (ProduceRequest(TOPIC, 0, b""),)))
    body = bytearray(frame_bytes)
    body[: len(header)] = header
    struct.pack_into(">i", body, len(header) - 4, frame_bytes - len(header))  # the message set's size
    return memoryview(body).toreadonly()


def half_sent_frames(port: int, stalled: int, frame_bytes: int, produce_bytes: int, request_timeout_s: float,
                     hold_s: float, answer_timeout_s: float, report: Report = _no_report) -> HalfSent:
    """C{stalled} connections each send all but the last 64 KiB of a C{frame_bytes} frame and stop; then a
    legitimate acknowledged produce of C{produce_bytes} is sent.  The stalled senders close after C{hold_s}
    unless the broker closed them first; the produce's answer is awaited until C{answer_timeout_s} after that."""
    body = stalled_body(frame_bytes)
    produce = framed(AckProduceRequest(ACK_APPENDED, 30_000, (
        ProduceRequest(TOPIC, 0, big_message_set(produce_bytes)),)))
    stallers = [_Staller(port, body) for _ in range(stalled)]
    began = time.monotonic()
    for s in stallers:
        s.start()
    answer: dict[str, object] = {}
    answered = threading.Event()

    def legitimate() -> None:
        try:
            with connect(port, hold_s + answer_timeout_s) as sock:
                answer["sock"], answer["sent"] = sock, time.monotonic()
                (result,) = codec.decode_ack_produce_response(call(sock, produce)).results
                answer["at"], answer["error"] = time.monotonic(), result.error
        except (OSError, RuntimeError) as e:
            answer["failure"] = f"{type(e).__name__}: {e}"
        finally:
            answered.set()

    producer = threading.Thread(target=legitimate, daemon=True)
    freed_by_bench_at = None
    try:
        for s in stallers:
            s.stalled.wait(max(0.0, began + hold_s / 2 - time.monotonic()))
        report(time.monotonic() - began, f"half-sent frames: {stalled} senders stalled "
               f"({sum(s.sent for s in stallers) / MIB:,.0f} MiB sent); the legitimate produce waits")
        producer.start()
        while not answered.wait(0.1) and time.monotonic() < began + hold_s:
            report(time.monotonic() - began, None)
        if not answered.is_set():
            freed_by_bench_at = time.monotonic()
            for s in stallers:
                s.close()
            answered.wait(answer_timeout_s)
    finally:
        for s in stallers:
            s.close()
    producer.join(1)
    if producer.is_alive() and "sock" in answer:  # still waiting for its answer: give up on it
        answer["sock"].close()
        producer.join(5)
    by_broker = [s.closed_by_broker_at for s in stallers if s.closed_by_broker_at is not None]
    freed_at = min([*by_broker, *([freed_by_bench_at] if freed_by_bench_at is not None else [])], default=None)
    at = answer.get("at")
    return HalfSent(
        stalled=stalled, frame_bytes=frame_bytes, produce_bytes=produce_bytes, request_timeout_s=request_timeout_s,
        answered_after_s=None if at is None else at - answer["sent"],
        answered_since_stall_s=None if at is None else at - began,
        freed_since_stall_s=None if freed_at is None else freed_at - began,
        freed_by="broker" if by_broker and freed_at == min(by_broker) else ("bench" if freed_at else None),
        error=answer.get("error") or 0, failure=answer.get("failure"))


def pipelined_flood(port: int, flooders: int, requests_each: int, seconds: float, report: Report = _no_report
                    ) -> Pipelined:
    """C{flooders} connections each pipeline C{requests_each} OFFSETS requests, as fast as the broker takes
    them, and read the answers; until all are answered or C{seconds} pass."""
    blob = _offsets_request() * requests_each
    chunk = 256 * 1024
    socks = [connect(port) for _ in range(flooders)]
    sent = [0] * flooders
    counters = [FrameCounter() for _ in range(flooders)]
    failures: list[str] = []
    began = time.monotonic()
    deadline = began + seconds
    try:
        with selectors.DefaultSelector() as selector:
            for i, sock in enumerate(socks):
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, i)
            open_ = flooders
            next_report = began
            while open_ and time.monotonic() < deadline:
                for key, events in selector.select(0.1):
                    i = key.data
                    sock = key.fileobj
                    if events & selectors.EVENT_WRITE:
                        try:
                            sent[i] += sock.send(blob[sent[i] : sent[i] + chunk])
                        except BlockingIOError:
                            pass
                        except OSError as e:  # the broker closed us
                            failures.append(_why(e))
                            selector.unregister(sock)
                            open_ -= 1
                            continue
                        if sent[i] == len(blob):
                            selector.modify(sock, selectors.EVENT_READ, i)
                    if events & selectors.EVENT_READ:
                        try:
                            data = sock.recv(1024 * 1024)
                        except BlockingIOError:
                            continue
                        except OSError as e:
                            data = b""
                            failures.append(_why(e))
                        counters[i].feed(data)
                        if not data or counters[i].frames >= requests_each:
                            selector.unregister(sock)
                            open_ -= 1
                now = time.monotonic()
                if now >= next_report:
                    answered = sum(c.frames for c in counters)
                    report(now - began, f"pipelined flood: {answered:,} of {flooders * requests_each:,} "
                           "OFFSETS answered")
                    next_report = now + 0.2
    finally:
        _close_all(socks)
    size = len(_offsets_request())
    return Pipelined(flooders, requests_each, sum(s // size for s in sent), sum(c.frames for c in counters),
                     time.monotonic() - began, failures[0] if failures else None)


def big_frames(port: int, clients: int, frame_bytes: int, frames_each: int, seconds: float,
               report: Report = _no_report) -> BigFrames:
    """C{clients} connections each send up to C{frames_each} acknowledged produces of C{frame_bytes}, one
    after the other, until done or C{seconds} pass."""
    frame = framed(AckProduceRequest(ACK_APPENDED, 30_000, (
        ProduceRequest(BIG_TOPIC, 0, big_message_set(frame_bytes)),)))
    began = time.monotonic()
    deadline = began + seconds
    answered = [0] * clients
    failures: list[str] = []

    def client(i: int) -> None:
        try:
            with connect(port, seconds + 30) as sock:
                for _ in range(frames_each):
                    if time.monotonic() >= deadline:
                        return
                    (result,) = codec.decode_ack_produce_response(call(sock, frame)).results
                    if result.error:
                        raise RuntimeError(f"the broker refused a big frame with error {result.error}")
                    answered[i] += 1
        except (OSError, RuntimeError) as e:
            failures.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive() and time.monotonic() < deadline + 30:
            t.join(0.2)
            report(time.monotonic() - began, f"big frames: {sum(answered)} of {clients * frames_each} "
                   f"{len(frame) / 1e6:,.1f} MB frames answered")
    return BigFrames(clients, len(frame), frames_each, sum(answered), time.monotonic() - began,
                     failures[0] if failures else None)


def connection_burst(port: int, count: int, timeout_s: float, report: Report = _no_report) -> Burst:
    """C{count} connections started at once (non-blocking connects), each asking for an offset once
    connected: the time each took to connect and to be answered, until C{timeout_s}."""
    request = _offsets_request()
    socks: list[socket.socket] = []
    connected: list[float | None] = [None] * count
    answered: list[float | None] = [None] * count
    counters = [FrameCounter() for _ in range(count)]
    try:
        with selectors.DefaultSelector() as selector:
            began = time.monotonic()
            for i in range(count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setblocking(False)
                sock.connect_ex((HOST, port))
                socks.append(sock)
                selector.register(sock, selectors.EVENT_WRITE, i)
            deadline = began + timeout_s
            pending = count
            while pending and time.monotonic() < deadline:
                for key, events in selector.select(max(0.0, min(0.2, deadline - time.monotonic()))):
                    i, sock = key.data, key.fileobj
                    now = time.monotonic()
                    if connected[i] is None:
                        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                            selector.unregister(sock)
                            pending -= 1
                            continue
                        connected[i] = now - began
                        try:
                            sock.send(request)  # a few bytes: the socket buffer takes them
                        except OSError:
                            selector.unregister(sock)
                            pending -= 1
                            continue
                        selector.modify(sock, selectors.EVENT_READ, i)
                        continue
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    if data and counters[i].feed(data) and answer_error(counters[i].first) is None:
                        answered[i] = now - began
                    if not data or counters[i].frames:
                        selector.unregister(sock)
                        pending -= 1
                report(time.monotonic() - began, f"connection burst: {sum(a is not None for a in answered):,} "
                       f"of {count:,} connected and answered")
    finally:
        _close_all(socks)
    return Burst(count, tuple(c for c in connected if c is not None), tuple(a for a in answered if a is not None))

