# -*- test-case-name: tests.bench.test_latency -*-
"""C{twlog bench latency}: milliseconds from produce to a consumer's hand-off, at fixed offered rates.

For each flush policy asked for (C{--flush-policy group,timer}) a broker
process runs (L{BrokerProcess}, with metrics on).  For each offered rate
(1,000, 20,000 and 200,000 msg/s by default) and each policy in turn
(interleaved, so both see the same machine), a producer process sends
fire-and-forget PRODUCE requests on a fixed schedule for C{--seconds}: message
i is due at C{start + i / rate}, carries that time (C{CLOCK_MONOTONIC}, which
every process of the machine shares) in its first 8 bytes, and goes out with
the other messages already due (a late producer sends a bigger set and its
lateness counts as latency: no coordinated omission).  In this process a
consumer reads the partition with waiting fetches (WAIT_FETCH, one in flight,
over a L{BrokerConnection}) and decodes each answer into a batch
(L{decode_fetched_batch}, every CRC checked, no object per message: the
per-message decoding costs three times the CPU and cannot keep up with 200,000
msg/s on a loaded 2-core machine); as each batch is handed over it records now
minus each message's due time.

The table gives p50, p99, p99.9 and the maximum of that latency per rate and
policy, the fsyncs per second the broker did (C{twlog_flush_duration_seconds}
from its metrics, before and after the run) with the fsync time distribution
by bucket, and the broker's CPU.  Before the runs, the fsync time of the data
directory's disk is probed directly (C{--fsync-probes} fsyncs of 20 KB
writes): under group commit it bounds the latency.

Every loop is bounded in count and time; everything is on 127.0.0.1.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from array import array
from collections.abc import Sequence

import attrs
from prometheus_client.parser import text_string_to_metric_families

from twlog.bench.broker import BrokerProcess
from twlog.bench.common import BenchProgress, BenchTable, Column, react_with_progress
from twlog.client.connection import BrokerConnection
from twlog.consumer.batches import decode_fetched_batch
from twlog.errors import check
from twlog.protocol import codec
from twlog.protocol.codec import FetchRequest, ProduceRequest, WaitFetchRequest
from twlog.storage.message import encode_message_set

#: The offered rates (msg/s) the issue asks for.
DEFAULT_RATES = (1_000, 20_000, 200_000)
#: The most messages the producer puts in one set (one PRODUCE request).
MAX_SET = 1_000
_STAMP = struct.Struct(">q")
_SIZE = struct.Struct(">i")
#: Bytes per fetch.
FETCH_BYTES = 1024 * 1024
#: How long the consumer keeps reading after the producer ended, at most.
DRAIN_S = 30.0


def stamped_payloads(stamps_ns: Sequence[int], size: int) -> list[bytes]:
    """One payload of C{size} bytes (at least 8) per time stamp: the stamp, big-endian, then padding."""
    pad = b"." * (size - _STAMP.size)
    return [_STAMP.pack(t) + pad for t in stamps_ns]


def due_count(elapsed_ns: int, rate: int, total: int) -> int:
    """How many messages are due C{elapsed_ns} after the start at C{rate} msg/s (message i at i / rate)."""
    return min(total, elapsed_ns * rate // 1_000_000_000 + 1) if elapsed_ns >= 0 else 0


def produce_at_rate(host: str, port: int, topic: str, rate: int, seconds: float, size: int) -> tuple[int, float]:
    """Send C{rate * seconds} stamped messages to C{topic} partition 0 on schedule (blocking); how many were sent,
    and how long it took (longer than C{seconds} when the producer could not keep up)."""
    total = max(1, int(rate * seconds))
    with socket.create_connection((host, port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.monotonic_ns()
        sent = 0
        while sent < total:
            now = time.monotonic_ns()
            due = due_count(now - start, rate, total)
            if due <= sent:  # ahead of schedule: sleep until the next message is due
                time.sleep(max(0.0, (start + sent * 1_000_000_000 // rate - now) / 1e9))
                continue
            count = min(due - sent, MAX_SET)
            stamps = [start + i * 1_000_000_000 // rate for i in range(sent, sent + count)]
            frame = codec.encode_request(ProduceRequest(topic, 0, encode_message_set(stamped_payloads(stamps, size))))
            sock.sendall(_SIZE.pack(len(frame)) + frame)
            sent += count
    return sent, (time.monotonic_ns() - start) / 1e9


def produce_child() -> None:
    """The producer process: C{HOST PORT TOPIC RATE SECONDS SIZE} on the command line; prints the count sent and
    the seconds it took."""
    host, port, topic, rate, seconds, size = sys.argv[1:7]
    sent, took = produce_at_rate(host, int(port), topic, int(rate), float(seconds), int(size))
    print(sent, took, flush=True)


def start_producer(port: int, topic: str, rate: int, seconds: float, size: int) -> subprocess.Popen:
    """A producer process (L{produce_child}) sending to the broker on C{port}."""
    argv = [sys.executable, "-c", "from twlog.bench.latency import produce_child; produce_child()",
            "127.0.0.1", str(port), topic, str(rate), repr(seconds), str(size)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)


def percentile(values: Sequence[float], fraction: float) -> float:
    """The C{fraction} (0-1) percentile of C{values}, nearest rank; NaN when there are none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = math.ceil(fraction * len(ordered) - 1e-9)
    return ordered[min(len(ordered), max(1, rank)) - 1]


def probe_fsync(directory: str, count: int, size: int = 20_000) -> list[float]:
    """Seconds each of C{count} fsyncs took after a C{size}-byte write, in a scratch file of C{directory}."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    times = []
    try:
        block = b"x" * size
        for _ in range(count):
            os.write(fd, block)
            started = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        os.unlink(path)
    return times


@attrs.frozen
class FlushStats:
    """The broker's fsync histogram (C{twlog_flush_duration_seconds}) at one moment."""

    count: float = 0.0
    total_s: float = 0.0
    #: (upper bound in seconds, cumulative count), ascending, +Inf last.
    buckets: tuple[tuple[float, float], ...] = ()

    def since(self, before: FlushStats) -> FlushStats:
        """What happened between C{before} and this."""
        earlier = dict(before.buckets)
        return FlushStats(self.count - before.count, self.total_s - before.total_s,
                          tuple((bound, n - earlier.get(bound, 0.0)) for bound, n in self.buckets))

    def bound(self, fraction: float) -> float:
        """The smallest bucket bound at or below which C{fraction} of the fsyncs fell (NaN without fsyncs)."""
        for bound, n in self.buckets:
            if self.count and n >= fraction * self.count:
                return bound
        return float("nan")


def parse_flush_stats(text: str) -> FlushStats:
    """The fsync histogram out of a Prometheus text scrape."""
    count = total = 0.0
    buckets = []
    for family in text_string_to_metric_families(text):
        if family.name != "twlog_flush_duration_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_count"):
                count = sample.value
            elif sample.name.endswith("_sum"):
                total = sample.value
            elif sample.name.endswith("_bucket"):
                buckets.append((float(sample.labels["le"]), sample.value))
    return FlushStats(count, total, tuple(sorted(buckets)))


@attrs.frozen
class LatencyRow:
    """One rate under one policy."""

    policy: str
    rate: int
    sent: int
    received: int
    seconds: float
    #: How long the producer took to send them (the offered rate was met when this is about C{--seconds}).
    send_seconds: float
    latencies_s: Sequence[float]
    flushes: FlushStats
    broker_cpu_s: float


class PolicyBroker:
    """A broker process under one flush policy, with its metrics URL."""

    def __init__(self, root: str, policy: str, extra: Sequence[str]) -> None:
        self.policy = policy
        self.settings = ["--flush-policy", policy, *extra]
        self.process = BrokerProcess(os.path.join(root, policy), *self.settings, "--metrics-port", "0")
        with open(self.process.log_path, "rb") as f:
            match = re.search(rb"metrics at (http://\S+)", f.read())
        if match is None:
            self.process.stop()
            raise RuntimeError(f"the {policy} broker does not say where its metrics are")
        self.metrics_url = match.group(1).decode() + "?" + "&".join(  # samples, by name
            f"name[]=twlog_flush_duration_seconds_{part}" for part in ("bucket", "count", "sum"))

    def flush_stats(self) -> FlushStats:
        with urllib.request.urlopen(self.metrics_url, timeout=10) as response:
            return parse_flush_stats(response.read().decode())


async def measure(reactor, broker: PolicyBroker, rate: int, seconds: float, size: int,
                  progress: BenchProgress | None = None, which: str = "") -> LatencyRow:
    """Run one producer at C{rate} against C{broker} and consume with waiting fetches; one table row."""
    topic = f"latency-{rate}"
    expected = max(1, int(rate * seconds))
    connection = BrokerConnection("127.0.0.1", broker.process.port, reactor=reactor)
    latencies = array("d")
    flushes_before, cpu_before = broker.flush_stats(), broker.process.cpu_seconds()
    if progress is not None:
        progress.step(f"{which}{broker.policy}: {rate:,} msg/s for {seconds:g} s, received", total=expected,
                      unit="msg")
    producer = start_producer(broker.process.port, topic, rate, seconds, size)
    started = time.monotonic()
    offset = sent = 0
    send_seconds = float("nan")
    try:
        while True:
            if sent == 0 and producer.poll() is not None:
                out = (producer.stdout.read().decode() if producer.stdout else "").split()
                if producer.returncode != 0 or len(out) != 2 or not out[0].isdigit():
                    raise RuntimeError(f"the producer failed (exit status {producer.returncode})")
                sent, send_seconds = int(out[0]), float(out[1])
            if sent and len(latencies) >= sent:
                break
            if time.monotonic() - started > seconds + DRAIN_S:
                break
            # Before the first set arrives the partition reads as an empty log at offset 0, and the wait holds.
            fetch = FetchRequest(topic, 0, offset, FETCH_BYTES)
            response = await connection.request(WaitFetchRequest(200, 1, (fetch,)))
            data = check(response.parts[0], f"WAIT_FETCH {topic}-0@{offset}").messages
            batch = decode_fetched_batch(data, topic, 0, offset, FETCH_BYTES)
            now = time.monotonic_ns()
            unpack = _STAMP.unpack_from
            latencies.extend([(now - unpack(view)[0]) / 1e9 for view in batch.views()])
            offset = batch.next_offset
            if progress is not None:
                progress.update(len(latencies))
    finally:
        if producer.poll() is None:
            producer.kill()
        producer.wait()
        if producer.stdout:
            producer.stdout.close()
        await connection.close()
    elapsed = time.monotonic() - started
    return LatencyRow(broker.policy, rate, sent, len(latencies), elapsed, send_seconds, latencies,
                      broker.flush_stats().since(flushes_before), broker.process.cpu_seconds() - cpu_before)


def latency_table(rows: Sequence[LatencyRow], title: str) -> BenchTable:
    """The benchmark's table."""
    table = BenchTable(title, [
        Column.label("policy"), Column("offered", "msg/s"), Column("sent", "msg/s"), Column("received/sent", "msg"),
        Column("latency p50", "ms"), Column("latency p99", "ms"), Column("latency p99.9", "ms"),
        Column("latency max", "ms"), Column("fsyncs", "1/s"), Column("fsync mean", "ms"), Column("fsync p50 <=", "ms"),
        Column("fsync p99 <=", "ms"), Column("broker CPU", "% of a core")])

    def ms(seconds: float, reason: str) -> str:
        if math.isnan(seconds):
            return table.missing(reason)
        if math.isinf(seconds):
            return table.missing("beyond the largest bucket of the broker's fsync histogram")
        return f"{seconds * 1000:,.1f}"

    no_messages = "no message reached the consumer"
    no_fsyncs = "the broker did no fsync during the run"
    for r in rows:
        values = sorted(r.latencies_s)
        fsyncs = r.flushes.count
        sent = (f"{r.sent / r.send_seconds:,.0f}" if r.send_seconds > 0 and not math.isnan(r.send_seconds)
                else table.missing("the producer did not report (it failed or the run timed out)"))
        table.add_row(
            r.policy, f"{r.rate:,}", sent, f"{r.received:,}/{r.sent:,}",
            *(ms(percentile(values, q), no_messages) for q in (0.5, 0.99, 0.999, 1.0)),
            f"{fsyncs / r.seconds:,.0f}", ms(r.flushes.total_s / fsyncs if fsyncs else float("nan"), no_fsyncs),
            ms(r.flushes.bound(0.5), no_fsyncs), ms(r.flushes.bound(0.99), no_fsyncs),
            f"{100 * r.broker_cpu_s / r.seconds:.0f}",
        )
    return table


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:,.1f}"


def main_latency(args) -> int:
    """Entry point of C{twlog bench latency}."""
    root = args.dir or tempfile.mkdtemp(prefix="twlog-bench-latency-")
    os.makedirs(root, exist_ok=True)
    extra = []
    if args.flush_interval_ms is not None:
        extra += ["--flush-interval-ms", str(args.flush_interval_ms)]
    if args.flush_messages is not None:
        extra += ["--flush-messages", str(args.flush_messages)]
    if getattr(args, "flush_min_gap_ms", None) is not None:
        extra += ["--flush-min-gap-ms", str(args.flush_min_gap_ms)]
    probe = sorted(probe_fsync(root, args.fsync_probes)) if args.fsync_probes else []
    brokers: list[PolicyBroker] = []
    rows: list[LatencyRow] = []
    try:
        for policy in args.flush_policy:
            print(f"starting a broker with --flush-policy {policy} under {root}", file=sys.stderr)
            brokers.append(PolicyBroker(root, policy, extra))

        async def run(reactor, progress: BenchProgress) -> None:
            runs = len(args.rates) * len(brokers)
            for rate in args.rates:
                for broker in brokers:
                    rows.append(await measure(reactor, broker, rate, args.seconds, args.size, progress,
                                              f"run {len(rows) + 1}/{runs}: "))

        status = react_with_progress(run)
        if status:
            return status
    finally:
        for broker in brokers:
            broker.process.stop()
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    settings = ", ".join(f"{b.policy}: {' '.join(b.settings)}" for b in brokers)
    load = os.getloadavg()
    table = latency_table(rows, f"twlog produce-to-consume latency: {args.size}-byte messages, one producer "
                                f"process, one WAIT_FETCH consumer (batches), {args.seconds:g} s per rate")
    table.note(f"broker flush settings (the rest are the broker's defaults): {settings}")
    if probe:
        table.note(f"fsync of this disk ({len(probe)} x 20 KB, before the runs): p50 {_ms(percentile(probe, 0.5))}"
                   f" ms, p99 {_ms(percentile(probe, 0.99))} ms, max {_ms(probe[-1])} ms")
    table.note(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (fsync p50/p99 are the broker's histogram "
               "bucket bounds; latency = consumer hand-off minus the message's scheduled send time)")
    table.print()
    return 0
