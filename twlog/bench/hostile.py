# -*- test-case-name: tests.bench.test_hostile -*-
"""C{twlog bench hostile}: a healthy client's latency while other clients dribble frames they never finish.

A broker process (L{BrokerProcess}, the default C{--max-buffered-request-bytes}
unless told otherwise) serves one healthy client that produces a small set
(ACK_PRODUCE, acknowledged once appended) and fetches (FETCH) in a loop.  The
loop runs twice for the same time: alone, then while C{clients} connections
each announce a frame of C{frame_mb} MiB, send all of it but its last 64 KiB as
fast as the broker reads, and never finish (they close when the phase ends).
Meanwhile a thread samples the broker's C{VmRSS} from C{/proc/<pid>/status}
(and C{VmHWM} at the end).  The table gives the healthy client's latencies per
phase and the broker's peak memory against the bound: the broker stops
reading the dribbling connections once their frames would pass it
(L{twlog.protocol.budget}), so its memory stays under the bound plus a constant
and the healthy client's requests, which arrive whole in one read, are never held.

Every loop here is bounded in time and in count; everything is on 127.0.0.1.
"""

from __future__ import annotations

import math
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

import attrs

from twlog.bench.broker import BrokerProcess
from twlog.bench.common import BenchProgress, BenchTable, Column, read_exactly
from twlog.config import BrokerConfig
from twlog.protocol import codec
from twlog.protocol.codec import ACK_APPENDED, AckProduceRequest, FetchRequest, ProduceRequest
from twlog.storage.message import encode_message_set

MIB = 1024 * 1024
#: Bytes of its frame each dribbling client never sends.
UNSENT_BYTES = 64 * 1024
#: The most requests of each kind the healthy client sends in one phase.
MAX_REQUESTS = 200_000
_SIZE = struct.Struct(">i")
TOPIC = "healthy"


@attrs.frozen
class PhaseRow:
    """The healthy client's latencies (seconds) in one phase, and the broker's memory then."""

    phase: str
    produce_s: tuple[float, ...]
    fetch_s: tuple[float, ...]
    peak_rss_bytes: int
    #: Bytes the dribbling clients got into the broker's socket before it stopped reading them.
    dribbled_bytes: int = 0


def percentile(values: Sequence[float], fraction: float) -> float:
    """The C{fraction} (0-1) percentile of C{values}, nearest rank; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = math.ceil(fraction * len(ordered) - 1e-9)  # the smallest value with this fraction at or below it
    return ordered[min(len(ordered), max(1, rank)) - 1]


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """A process's C{VmRSS} (or C{VmHWM}, its peak) from C{/proc/<pid>/status}, in bytes; 0 if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class RssSampler(threading.Thread):
    """Samples a process's RSS every C{interval_s} until stopped; L{peak} is the largest sample."""

    def __init__(self, pid: int, interval_s: float = 0.02) -> None:
        super().__init__(daemon=True)
        self._pid, self._interval_s = pid, interval_s
        self._stop_event = threading.Event()
        self.peak = 0

    def reset(self) -> None:
        """Start a new peak."""
        self.peak = rss_bytes(self._pid)

    def run(self) -> None:
        while not self._stop_event.wait(self._interval_s):
            self.peak = max(self.peak, rss_bytes(self._pid))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


def _call(sock: socket.socket, request: bytes) -> bytes:
    sock.sendall(request)
    (size,) = _SIZE.unpack(read_exactly(sock, 4, "the broker (to the healthy client)"))
    return read_exactly(sock, size, "the broker (to the healthy client)")


def _framed(request) -> bytes:
    body = codec.encode_request(request)
    return _SIZE.pack(len(body)) + body


def healthy_loop(port: int, seconds: float, max_requests: int = MAX_REQUESTS,
                 on_tick: Callable[[float], object] | None = None) -> tuple[list[float], list[float]]:
    """Produce 50 messages of 200 bytes, then fetch 64 KiB from offset 0, in turn, for C{seconds}:
    the latency of every produce and of every fetch. C{on_tick(seconds so far)} is called every 0.1 s."""
    produce = _framed(AckProduceRequest(ACK_APPENDED, 10_000, (
        ProduceRequest(TOPIC, 0, encode_message_set([b"%0200d" % i for i in range(50)])),)))
    fetch = _framed(FetchRequest(TOPIC, 0, 0, 64 * 1024))
    produce_s: list[float] = []
    fetch_s: list[float] = []
    clock = time.perf_counter
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        began = clock()
        deadline = began + seconds
        tick = began
        while clock() < deadline and len(fetch_s) < max_requests:
            started = clock()
            if on_tick is not None and started >= tick:
                on_tick(started - began)
                tick = started + 0.1
            (result,) = codec.decode_ack_produce_response(_call(sock, produce)).results
            produce_s.append(clock() - started)
            if result.error:
                raise RuntimeError(f"the broker refused the healthy client's produce with error {result.error}")
            started = clock()
            answer = codec.decode_fetch_response(_call(sock, fetch))
            fetch_s.append(clock() - started)
            if answer.error:
                raise RuntimeError(f"the broker refused the healthy client's fetch with error {answer.error}")
    return produce_s, fetch_s


class Dribbler(threading.Thread):
    """One client announcing a C{frame_bytes} ACK_PRODUCE and sending all but its last 64 KiB, never finishing.

    The frame is valid up to where it stops.  L{sent} counts what the kernel
    took; once the broker stops reading, the send blocks until L{close}.
    """

    def __init__(self, port: int, body: memoryview) -> None:
        super().__init__(daemon=True)
        self._port, self._body = port, body
        self._sock: socket.socket | None = None
        self._closed = threading.Event()
        self.sent = 0
        self.error: str | None = None

    def run(self) -> None:
        try:
            self._sock = socket.create_connection(("127.0.0.1", self._port), timeout=5)
            self._sock.settimeout(0.2)
            self._sock.sendall(_SIZE.pack(len(self._body)))
            end = len(self._body) - UNSENT_BYTES
            while self.sent < end and not self._closed.is_set():
                try:
                    self.sent += self._sock.send(self._body[self.sent : min(end, self.sent + MIB)])
                except socket.timeout:
                    continue  # the broker stopped reading us: wait (bounded by close())
        except OSError as e:
            if not self._closed.is_set():
                self.error = str(e)

    def close(self) -> None:
        self._closed.set()
        self.join(5)
        if self._sock is not None:
            self._sock.close()


def dribble_body(frame_bytes: int) -> memoryview:
    """An ACK_PRODUCE request body of C{frame_bytes}: a valid header and a message set of zeros after it."""
    header = codec.encode_request(AckProduceRequest(ACK_APPENDED, 10_000, (ProduceRequest(TOPIC, 1, b""),)))
    body = bytearray(frame_bytes)
    body[: len(header)] = header
    struct.pack_into(">i", body, len(header) - 4, frame_bytes - len(header))  # the message set's size
    return memoryview(body).toreadonly()


def measure(broker: BrokerProcess, clients: int, frame_bytes: int, seconds: float, progress=None) -> list[PhaseRow]:
    """Both phases: the healthy client alone, then beside C{clients} dribbling ones."""
    sampler = RssSampler(broker.pid)
    sampler.start()
    rows = []
    try:
        on_tick = None if progress is None else progress.update
        if progress is not None:
            progress.step(f"phase 1 of 2: the healthy client alone for {seconds:g} s", total=seconds, unit="s")
        sampler.reset()
        produce_s, fetch_s = healthy_loop(broker.port, seconds, on_tick=on_tick)
        rows.append(PhaseRow("alone", tuple(produce_s), tuple(fetch_s), sampler.peak))
        if progress is not None:
            progress.step(f"phase 2 of 2: the healthy client beside {clients} clients dribbling "
                          f"{frame_bytes / MIB:g} MiB frames, {seconds:g} s", total=seconds, unit="s")
        body = dribble_body(frame_bytes)
        dribblers = [Dribbler(broker.port, body) for _ in range(clients)]
        sampler.reset()
        for d in dribblers:
            d.start()
        try:
            produce_s, fetch_s = healthy_loop(broker.port, seconds, on_tick=on_tick)
        finally:
            for d in dribblers:
                d.close()
        errors = [d.error for d in dribblers if d.error]
        if errors:
            raise RuntimeError(f"a dribbling client failed: {errors[0]}")
        rows.append(PhaseRow(f"{clients} dribbling", tuple(produce_s), tuple(fetch_s), sampler.peak,
                             sum(d.sent for d in dribblers)))
    finally:
        sampler.stop()
    return rows


def format_hostile_table(rows: Sequence[PhaseRow], bound: int, peak_hwm: int, pid: int) -> BenchTable:
    """The table: latencies in ms per phase, then the broker's memory against the bound."""
    table = BenchTable(
        f"twlog hostile-clients benchmark: broker process {pid}, loopback TCP; the healthy client alternates an "
        "acknowledged produce of 50 x 200 B and a 64 KiB fetch",
        [Column.label("phase"), Column("requests", "count"), Column("produce p50", "ms"), Column("produce p99", "ms"),
         Column("produce max", "ms"), Column("fetch p50", "ms"), Column("fetch p99", "ms"), Column("fetch max", "ms"),
         Column("broker peak RSS", "MB")])

    def ms(values: Sequence[float], fraction: float) -> str:
        if not values:
            return table.missing("the healthy client got no answer in this phase")
        return f"{percentile(values, fraction) * 1e3:.2f}"

    for r in rows:
        p, f = r.produce_s, r.fetch_s
        table.add_row(r.phase, f"{len(p) + len(f):,}", ms(p, .5), ms(p, .99), ms(p, 1.0), ms(f, .5), ms(f, .99),
                      ms(f, 1.0), f"{r.peak_rss_bytes / 1e6:,.1f}")
    base = rows[0].peak_rss_bytes if rows else 0
    table.note("(MB = 10^6 bytes; RSS sampled from /proc/<pid>/status every 20 ms)")
    if len(rows) > 1:
        table.note(
            f"sent by the dribbling clients (socket buffers included): {rows[1].dribbled_bytes / 1e6:,.1f} MB;"
            f" broker peak RSS {rows[1].peak_rss_bytes / 1e6:,.1f}"
            f" MB (VmHWM {peak_hwm / 1e6:,.1f} MB) = {(rows[1].peak_rss_bytes - base) / 1e6:,.1f} MB over the"
            f" healthy-only peak; bound (--max-buffered-request-bytes) {bound / 1e6:,.1f} MB"
        )
    return table


def main_hostile(args) -> int:
    """Entry point of C{twlog bench hostile}."""
    if args.seconds <= 0 or args.seconds > 600:
        print(f"twlog: --seconds {args.seconds:g} must be above 0 and at most 600", file=sys.stderr)
        return 2
    root = args.dir or tempfile.mkdtemp(prefix="twlog-bench-hostile-")
    frame_bytes = args.frame_mb * MIB
    extra: list[str] = ["--flush-interval-ms", "5"]
    if args.max_buffered_mb is not None:
        bound = args.max_buffered_mb * MIB
        extra += ["--max-buffered-request-bytes", str(bound), "--max-request-bytes",
                  str(min(bound, max(frame_bytes + MIB, 1024)))]
    else:
        bound = attrs.fields(BrokerConfig).max_buffered_request_bytes.default
        limit = attrs.fields(BrokerConfig).max_request_bytes.default
        if frame_bytes > limit:
            extra += ["--max-request-bytes", str(min(bound, frame_bytes + MIB))]
    print(f"starting a broker with its data under {root}", file=sys.stderr)
    broker = BrokerProcess(root, *extra)
    try:
        with BenchProgress() as progress:
            rows = measure(broker, args.clients, frame_bytes, args.seconds, progress)
        peak_hwm = rss_bytes(broker.pid, "VmHWM")
    finally:
        broker.stop()
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    format_hostile_table(rows, bound, peak_hwm, broker.pid).print()
    return 0
