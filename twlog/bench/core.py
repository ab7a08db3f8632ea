# -*- test-case-name: tests.test_bench -*-
"""Benchmarks that print tables: C{twlog bench storage} and C{twlog bench crc}.

The storage benchmark runs in process, with no network: it appends N
messages through a real L{LogManager} (CRC validation included, fsyncs on the
reactor's thread pool as in the broker), then reads them back through
C{Log.read} regions and decodes every message as a consumer does.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import TextIO

import attrs

from twlog.config import LogConfig
from twlog.storage.crc import crc32, crcmod_crc32, crcmod_uses_extension
from twlog.storage.message import OVERHEAD, encode_message_set, iter_messages

MB = 1_000_000


@attrs.frozen
class StorageRow:
    """One line of the storage benchmark's table."""

    batch: int
    messages: int
    encode_msg_s: float
    append_msg_s: float
    append_mb_s: float
    read_msg_s: float
    read_mb_s: float
    disk_bytes_per_msg: float
    overhead_bytes: float


def _payloads(count: int, size: int) -> list[bytes]:
    """Distinct log-like payloads (so nothing compresses or dedupes by accident)."""
    seed = os.urandom(size)
    return [(b"%012d " % i + seed)[:size] for i in range(count)]


async def _run_storage_case(
    reactor, directory: str, messages: int, size: int, batch: int, fetch_bytes: int, progress: TextIO | None
) -> StorageRow:
    from twisted.internet.task import deferLater

    from twlog.storage.manager import LogManager, thread_pool_runner

    config = LogConfig(directory, segment_bytes=256 * 1024 * 1024)
    manager = LogManager(config, reactor, thread_pool_runner(reactor))
    manager.start()
    try:
        log = manager.get_or_create_log("bench", 0)
        batches = messages // batch
        distinct = min(batches, 1000)  # pre-built sets, reused round-robin
        payloads = _payloads(distinct * batch, size)
        started = time.perf_counter()
        sets = [encode_message_set(payloads[i * batch : (i + 1) * batch]) for i in range(distinct)]
        encode_s = time.perf_counter() - started
        append = log.append
        written = 0
        started = time.perf_counter()
        for i in range(batches):
            data = sets[i % distinct]
            append(data)
            written += len(data)
            if i % 2000 == 1999:  # let fsync completions and timers run, as a broker's reactor would
                await deferLater(reactor, 0, lambda: None)
                if progress is not None and i % 200_000 == 199_999:
                    progress.write(f"  batch {batch}: appended {(i + 1) * batch:,} messages\r")
        append_s = time.perf_counter() - started
        await log.flush()
        disk = log.size_bytes()
        count = batches * batch
        if progress is not None:
            progress.write(f"  batch {batch}: reading back{' ' * 30}\r")
        read = 0
        read_bytes = 0
        offset = 0
        started = time.perf_counter()
        while True:
            region = log.read(offset, fetch_bytes)
            data = region.read()
            last = None
            for last in iter_messages(data, offset):
                read += 1
            if last is None:
                break
            read_bytes += last.next_offset - offset
            offset = last.next_offset
        read_s = time.perf_counter() - started
        if read != count:
            raise RuntimeError(f"read back {read} messages, expected {count}")
        return StorageRow(
            batch=batch,
            messages=count,
            encode_msg_s=distinct * batch / encode_s,
            append_msg_s=count / append_s,
            append_mb_s=written / append_s / MB,
            read_msg_s=read / read_s,
            read_mb_s=read_bytes / read_s / MB,
            disk_bytes_per_msg=disk / count,
            overhead_bytes=disk / count - size,
        )
    finally:
        await manager.stop()


def run_storage_benchmark(
    reactor,
    messages: int,
    size: int,
    batches: Sequence[int],
    directory: str | None,
    fetch_bytes: int = 1024 * 1024,
    progress: TextIO | None = None,
):
    """Run the storage benchmark for each batch size; a Deferred firing with the rows."""
    from twisted.internet.defer import Deferred

    async def run() -> list[StorageRow]:
        rows = []
        for batch in batches:
            root = directory or tempfile.mkdtemp(prefix="twlog-bench-")
            case_dir = os.path.join(root, f"batch-{batch}")
            if os.path.exists(case_dir):
                shutil.rmtree(case_dir)
            try:
                rows.append(await _run_storage_case(reactor, case_dir, messages, size, batch, fetch_bytes, progress))
            finally:
                shutil.rmtree(case_dir if directory else root, ignore_errors=True)
        return rows

    return Deferred.fromCoroutine(run())


def format_storage_table(rows: Sequence[StorageRow], size: int) -> str:
    """The storage benchmark's table, one line per batch size."""
    header = (
        f"{'batch':>5}  {'messages':>10}  {'encode msg/s':>12}  {'append msg/s':>12}  {'append MB/s':>11}"
        f"  {'read msg/s':>11}  {'read MB/s':>9}  {'disk B/msg':>10}  {'overhead B/msg':>14}"
    )
    lines = [f"twlog storage benchmark: {size}-byte messages, CRC checked on append and on read", header]
    for r in rows:
        lines.append(
            f"{r.batch:>5}  {r.messages:>10,}  {r.encode_msg_s:>12,.0f}  {r.append_msg_s:>12,.0f}"
            f"  {r.append_mb_s:>11,.1f}  {r.read_msg_s:>11,.0f}  {r.read_mb_s:>9,.1f}"
            f"  {r.disk_bytes_per_msg:>10,.2f}  {r.overhead_bytes:>14,.2f}"
        )
    lines.append(f"(expected overhead for uncompressed messages: {OVERHEAD} bytes)")
    return "\n".join(lines)


def run_crc_benchmark(size: int = 200, count: int = 10_000, rounds: int = 20) -> list[tuple[str, float]]:
    """Nanoseconds per message of each CRC-32 implementation over C{count} payloads of C{size} bytes."""
    payloads = _payloads(count, size)
    results = []
    for name, function in (("zlib.crc32 (hot path)", crc32), ("crcmod crc-32 (C extension)", crcmod_crc32)):
        best = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            for payload in payloads:
                function(payload)
            best = min(best, time.perf_counter() - started)
        results.append((name, best / count * 1e9))
    return results


def format_crc_table(results: Sequence[tuple[str, float]], size: int) -> str:
    """The CRC benchmark's table."""
    fastest = min(ns for _, ns in results)
    lines = [
        f"CRC-32 of {size}-byte payloads (crcmod C extension in use: {crcmod_uses_extension()})",
        f"{'implementation':<30} {'ns/msg':>8} {'msg/s':>12} {'relative':>8}",
    ]
    for name, ns in results:
        lines.append(f"{name:<30} {ns:>8.0f} {1e9 / ns:>12,.0f} {ns / fastest:>7.2f}x")
    return "\n".join(lines)


def main_storage(args) -> int:
    """Entry point of C{twlog bench storage}."""
    from twisted.internet import task

    out = sys.stdout
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    where = args.dir or tempfile.gettempdir()
    print(f"appending {args.messages:,} messages of {args.size} bytes per batch size; data under {where}",
          file=sys.stderr)
    result: list[StorageRow] = []

    def run(reactor):
        d = run_storage_benchmark(
            reactor, args.messages, args.size, args.batch, args.dir,
            fetch_bytes=args.fetch_bytes, progress=sys.stderr if sys.stderr.isatty() else None,
        )
        return d.addCallback(result.extend)

    try:
        task.react(run)
    except SystemExit as e:
        if e.code:
            return int(e.code)
    print(format_storage_table(result, args.size), file=out)
    return 0


def main_crc(args) -> int:
    """Entry point of C{twlog bench crc}."""
    print(format_crc_table(run_crc_benchmark(args.size, args.count), args.size))
    return 0


# -- the broker benchmark: a broker process, the Twisted client, loopback TCP --------------


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BrokerProcess:
    """A C{twistd -n twlog} child on a free loopback port, for benchmarks and tools."""

    def __init__(self, log_dir: str, *extra: str, timeout_s: float = 30.0) -> None:
        import subprocess

        self.log_dir = log_dir
        os.makedirs(log_dir, exist_ok=True)
        #: The broker's own log (twistd's output), next to its data.
        self.log_path = os.path.join(log_dir, "broker.out")
        argv = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n", "--pidfile=",
                "twlog", "--port", "0", "--log-dir", os.path.join(log_dir, "data"), *extra]
        self._output = open(self.log_path, "wb")
        self.process = subprocess.Popen(argv, stdout=self._output, stderr=subprocess.STDOUT)
        self.port = self._wait_for_port(timeout_s)

    def _wait_for_port(self, timeout_s: float) -> int:
        import re

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as f:
                output = f.read().decode(errors="replace")
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", output)
            if match:
                return int(match.group(1))
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the broker did not start; its output:\n{output}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float:
        """CPU time the broker has used so far."""
        return _cpu_seconds(self.pid)

    def stop(self) -> None:
        """SIGTERM, then wait for the clean shutdown (bounded)."""
        import signal
        import subprocess

        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._output.close()


@attrs.frozen
class BrokerRow:
    """One line of the broker benchmark's table."""

    test: str
    messages: int
    seconds: float
    payload_bytes: int
    broker_cpu_s: float

    @property
    def msg_s(self) -> float:
        return self.messages / self.seconds

    @property
    def mb_s(self) -> float:
        return self.payload_bytes / self.seconds / MB


async def _wait_for_end(reactor, consumer, topic: str, end: int, timeout_s: float = 120.0) -> None:
    """Poll OFFSETS until the broker has flushed up to C{end} (bounded)."""
    from twisted.internet.task import deferLater

    deadline = time.monotonic() + timeout_s
    while (await consumer.offsets(topic, 0))[0] < end:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the broker did not reach offset {end} of {topic} within {timeout_s:g} s")
        await deferLater(reactor, 0.002, lambda: None)


async def _broker_benchmark(reactor, broker: BrokerProcess, messages: int, size: int, batches: Sequence[int],
                            fetch_bytes: int, progress: TextIO | None) -> list[BrokerRow]:
    from twlog.consumer.simple import SimpleConsumer
    from twlog.producer import Producer

    rows = []
    consumer = SimpleConsumer("127.0.0.1", broker.port, reactor=reactor, max_bytes=fetch_bytes)
    try:
        for batch in batches:
            topic = f"bench-{batch}"
            count = messages // batch
            distinct = min(count, max(1, 100_000 // batch))
            payloads = _payloads(distinct * batch, size)
            sets = [payloads[i * batch : (i + 1) * batch] for i in range(distinct)]
            producer = Producer(f"127.0.0.1:{broker.port}", reactor=reactor, ack="none")
            await producer.partitions(topic)  # discovery is not part of the measurement
            if progress is not None:
                progress.write(f"  producing {count * batch:,} messages in batches of {batch}\n")
            cpu = broker.cpu_seconds()
            started = time.perf_counter()
            send = producer.send
            for i in range(count):
                await send(topic, sets[i % distinct], partition=0)
            await _wait_for_end(reactor, consumer, topic, count * batch * (size + 9))
            elapsed = time.perf_counter() - started
            rows.append(BrokerRow(f"produce, batch {batch}, fire-and-forget", count * batch, elapsed,
                                  count * batch * size, broker.cpu_seconds() - cpu))
            await producer.close()
        rows.append(await _consume_all(consumer, broker, f"bench-{batches[-1]}", fetch_bytes, size, "", progress))
    finally:
        await consumer.close()
    return rows


async def _consume_all(consumer, broker: BrokerProcess, topic: str, fetch_bytes: int, size: int, how: str,
                       progress: TextIO | None) -> BrokerRow:
    """Fetch C{topic} partition 0 from start to end, as one consumer does; a table row."""
    if progress is not None:
        progress.write(f"  consuming {topic} with {fetch_bytes // 1024} KB fetches{how}\n")
    (end,) = await consumer.offsets(topic, 0)
    offset = read = 0
    cpu = broker.cpu_seconds()
    started = time.perf_counter()
    while offset < end:
        fetched = await consumer.fetch(topic, 0, offset)
        read += len(fetched.messages)
        offset = fetched.next_offset
    elapsed = time.perf_counter() - started
    return BrokerRow(f"consume, {fetch_bytes // 1024} KB fetches{how}", read, elapsed, read * size,
                     broker.cpu_seconds() - cpu)


async def _consume_copying(reactor, root: str, topic: str, fetch_bytes: int, size: int,
                           progress: TextIO | None) -> BrokerRow:
    """The same consumption from a broker restarted on the same data with sendfile off."""
    from twlog.consumer.simple import SimpleConsumer

    broker = BrokerProcess(root, "--no-sendfile")
    consumer = SimpleConsumer("127.0.0.1", broker.port, reactor=reactor, max_bytes=fetch_bytes)
    try:
        return await _consume_all(consumer, broker, topic, fetch_bytes, size, ", no sendfile", progress)
    finally:
        await consumer.close()
        broker.stop()


def format_broker_table(rows: Sequence[BrokerRow], size: int, pid: int) -> str:
    """The broker benchmark's table."""
    lines = [
        f"twlog broker benchmark: one client process, broker process {pid}, loopback TCP, {size}-byte messages",
        f"{'test':<36} {'messages':>10} {'msg/s':>10} {'MB/s':>7} {'broker CPU s':>12} {'broker CPU s/GB':>15}",
    ]
    for r in rows:
        per_gb = r.broker_cpu_s / (r.messages * (size + 9) / 1e9)
        lines.append(f"{r.test:<36} {r.messages:>10,} {r.msg_s:>10,.0f} {r.mb_s:>7,.1f} {r.broker_cpu_s:>12.2f}"
                     f" {per_gb:>15.2f}")
    lines.append("(MB/s counts payload bytes; CPU s/GB counts log bytes, 9 bytes of overhead included; the last")
    lines.append(" row restarts the broker on the same data with --no-sendfile, copying log bytes through Python)")
    return "\n".join(lines)


def main_broker(args) -> int:
    """Entry point of C{twlog bench broker}."""
    from twisted.internet import task
    from twisted.internet.defer import Deferred

    root = args.dir or tempfile.mkdtemp(prefix="twlog-bench-broker-")
    print(f"starting a broker with its data under {root}", file=sys.stderr)
    broker = BrokerProcess(root, "--flush-interval-ms", "5", "--segment-bytes", str(512 * 1024 * 1024))
    result: list[BrokerRow] = []
    try:
        async def both(reactor) -> None:
            result.extend(await _broker_benchmark(reactor, broker, args.messages, args.size, args.batch,
                                                  args.fetch_bytes, sys.stderr))
            broker.stop()
            result.append(await _consume_copying(reactor, root, f"bench-{args.batch[-1]}", args.fetch_bytes,
                                                 args.size, sys.stderr))

        def run(reactor):
            return Deferred.fromCoroutine(both(reactor))

        try:
            task.react(run)
        except SystemExit as e:
            if e.code:
                return int(e.code)
    finally:
        broker.stop()
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    print(format_broker_table(result, args.size, broker.pid))
    return 0


def main_rebalance(args) -> int:
    """Entry point of C{twlog bench rebalance}: a local ZooKeeper, in-process brokers, N group consumers."""
    from statistics import median

    from twisted.internet import task
    from twisted.internet.defer import Deferred

    from twlog.consumer.admin import rebalance_benchmark
    from twlog.coord.zkserver import ZooKeeperServer

    root = tempfile.mkdtemp(prefix="twlog-bench-rebalance-")
    print(f"starting ZooKeeper under {root}", file=sys.stderr)
    zookeeper = ZooKeeperServer(os.path.join(root, "zookeeper")).start()
    rows: list[tuple[str, float, int]] = []
    try:
        async def run_all(reactor) -> None:
            for scenario in args.scenario:
                for run in range(args.runs):
                    seconds, retries = await rebalance_benchmark(
                        reactor, zookeeper.connect_string, args.consumers, args.partitions, brokers=args.brokers,
                        scenario=scenario, rebalance_backoff_ms=args.backoff_ms,
                        log_dir=os.path.join(root, f"{scenario}-{run}"),
                    )
                    print(f"  {scenario} run {run + 1}: {seconds:.2f} s, {retries} retries", file=sys.stderr)
                    rows.append((scenario, seconds, retries))

        try:
            task.react(lambda reactor: Deferred.fromCoroutine(run_all(reactor)))
        except SystemExit as e:
            if e.code:
                return int(e.code)
    finally:
        zookeeper.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"twlog rebalance benchmark: {args.consumers} consumers, {args.partitions} partitions on {args.brokers} "
          f"brokers, backoff {args.backoff_ms} ms, {args.runs} runs per scenario")
    print(f"{'scenario':<28} {'median s':>9} {'min s':>7} {'max s':>7} {'retries (per run)':>20}")
    names = {"start": "all join at once", "join": "one joins a stable group"}
    for scenario in args.scenario:
        times = [s for name, s, _ in rows if name == scenario]
        retries = [r for name, _, r in rows if name == scenario]
        print(f"{names[scenario]:<28} {median(times):>9.2f} {min(times):>7.2f} {max(times):>7.2f} "
              f"{','.join(map(str, retries)):>20}")
    return 0


def main_spark(args) -> int:
    """Entry point of C{twlog bench spark} (the work is in L{twlog.bench.spark})."""
    from twlog.bench import spark as spark_bench

    spark_bench.main(["--messages", str(args.messages), "--size", str(args.size),
                      "--fetch-size", str(args.fetch_size)])
    return 0
