# -*- test-case-name: tests.integration.test_cli -*-
"""C{twlog bench broker}: a broker process, the Twisted client, loopback TCP.

After the produce rows, one consumer reads the last topic at each fetch size
given (C{--fetch-bytes 65536,262144,...}) through two brokers running at once
on copies of the same data, one sending log bytes with sendfile and one
copying them (C{--no-sendfile}), taking turns measurement by measurement so
that machine noise falls on both alike; each is read through the per-message
API (C{fetch}), the batch API (C{fetch_batch}) and the pipelined batch reader
(C{batches}).  The table puts sendfile and copying side by side.

L{BrokerProcess} (a C{twistd -n twlog} child on a free loopback port) also
serves the Spark benchmark.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from statistics import median

import attrs
from twisted.internet.task import deferLater

from twlog.bench.common import MB, BenchProgress, BenchTable, Column, payloads, react_with_progress, stop_process
from twlog.client.options import ClientOptions
from twlog.consumer.simple import SimpleConsumer
from twlog.producer.producer import Producer
from twlog.storage.batch import decode_batch
from twlog.storage.message import CODEC_NAMES, encode_message_set, scan_messages


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BrokerProcess:
    """A C{twistd -n twlog} child on a free loopback port, for benchmarks and tools."""

    def __init__(self, log_dir: str, *extra: str, timeout_s: float = 30.0, source: str | None = None) -> None:
        """Start the broker with its data under C{log_dir}, C{extra} arguments added.

        @param source: a twlog source tree (a checkout) to run the broker from, put first on its
            C{PYTHONPATH}: to compare two versions with the same client.
        """
        self.log_dir = log_dir
        os.makedirs(log_dir, exist_ok=True)
        #: The broker's own log (twistd's output), next to its data.
        self.log_path = os.path.join(log_dir, "broker.out")
        argv = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n", "--pidfile=",
                "twlog", "--port", "0", "--log-dir", os.path.join(log_dir, "data"), *extra]
        self._output = open(self.log_path, "wb")
        env = cwd = None
        if source is not None:  # run from there too: sys.path starts with the working directory
            cwd = os.path.abspath(source)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([cwd, *filter(None, [os.environ.get("PYTHONPATH")])]))
            argv[argv.index("--log-dir") + 1] = os.path.abspath(argv[argv.index("--log-dir") + 1])
        self.process = subprocess.Popen(argv, stdout=self._output, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        self.port = self._wait_for_port(timeout_s)

    def _wait_for_port(self, timeout_s: float) -> int:
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
        stop_process(self.process, signal.SIGTERM, 60)
        self._output.close()


@attrs.frozen
class BrokerRow:
    """One line of the broker benchmark's table."""

    test: str
    messages: int
    seconds: float
    payload_bytes: int
    broker_cpu_s: float
    #: The CPU time this (the client's) process spent sending, when measured (the produce rows).
    client_cpu_s: float | None = None

    @property
    def msg_s(self) -> float:
        return self.messages / self.seconds

    @property
    def mb_s(self) -> float:
        return self.payload_bytes / self.seconds / MB


async def _wait_for_end(reactor, consumer, topic: str, end: int, timeout_s: float = 120.0) -> None:
    """Poll OFFSETS until the broker has flushed up to C{end} (bounded)."""
    deadline = time.monotonic() + timeout_s
    while (await consumer.offsets(topic, 0))[0] < end:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the broker did not reach offset {end} of {topic} within {timeout_s:g} s")
        await deferLater(reactor, 0.002, lambda: None)


async def _broker_benchmark(reactor, broker: BrokerProcess, messages: int, size: int, batches: Sequence[int],
                            fetch_bytes: object, progress: BenchProgress | None,
                            codec: str = "none", *, port: int | None = None, options: ClientOptions | None = None,
                            topic_prefix: str = "bench") -> list[BrokerRow]:
    """The produce rows, one per batch size (C{fetch_bytes} is unused: the consumption is L{_consume_sweep}), to
    topics C{<topic_prefix>-<batch>} through C{port} (default: the broker's) with C{options} (e.g. TLS)."""
    rows = []
    port = broker.port if port is None else port
    consumer = SimpleConsumer("127.0.0.1", port, reactor=reactor, options=options)
    try:
        for batch in batches:
            topic = f"{topic_prefix}-{batch}"
            count = messages // batch
            distinct = min(count, max(1, 100_000 // batch))
            data = payloads(distinct * batch, size)
            sets = [data[i * batch : (i + 1) * batch] for i in range(distinct)]
            # Where the log ends once every set is in: each set's size as the producer encodes it.
            set_bytes = [len(encode_message_set(s, CODEC_NAMES[codec])) for s in sets]
            end = sum(set_bytes) * (count // distinct) + sum(set_bytes[: count % distinct])
            # The public producer's fire-and-forget sends (twlog.producer.fast), each batch to partition 0 by index;
            # PRODUCE (a 0.7 type) works with any version of the broker.
            producer = Producer([("127.0.0.1", port)], reactor=reactor, ack="none", codec=codec, options=options)
            await producer.partitions(topic)
            if progress is not None:
                progress.step(f"producing in batches of {batch}{'' if codec == 'none' else ', ' + codec}",
                              total=count * batch, unit="msg")
            cpu = broker.cpu_seconds()
            started = time.perf_counter()
            client_cpu = time.process_time()
            send = producer.send
            every = max(1, 1000 // batch)
            for i in range(count):
                await send(topic, sets[i % distinct], partition_index=0)
                if progress is not None and i % every == every - 1:
                    progress.update((i + 1) * batch)
            await producer.flush()
            client_cpu = time.process_time() - client_cpu
            if progress is not None:
                progress.update(count * batch, description=f"batch {batch}: waiting for the broker to flush")
            await _wait_for_end(reactor, consumer, topic, end)
            elapsed = time.perf_counter() - started
            how = "fire-and-forget" if codec == "none" else codec
            rows.append(BrokerRow(f"produce, batch {batch}, {how}", count * batch, elapsed,
                                  count * batch * size, broker.cpu_seconds() - cpu, client_cpu))
            await producer.close()
    finally:
        await consumer.close()
    return rows


#: The consumer APIs the sweep reads through: name, and how (L{_read_all}).
APIS = ("per message", "batch", "batch, pipelined")


@attrs.frozen
class SweepCell:
    """One consumption: a fetch size, an API, sendfile or copying, and what it took."""

    fetch_bytes: int
    api: str
    sendfile: bool
    row: BrokerRow


async def _read_all(consumer: SimpleConsumer, topic: str, end: int, api: str) -> int:
    """Read C{topic} partition 0 from 0 to C{end} through C{api}; how many messages."""
    offset = read = 0
    if api == "batch, pipelined":
        reader = consumer.batches(topic, 0, 0, end=end)
        try:
            async for batch in reader:
                read += len(batch)
        finally:
            await reader.close()
        return read
    fetch = consumer.fetch if api == "per message" else consumer.fetch_batch
    while offset < end:
        fetched = await fetch(topic, 0, offset)
        read += len(fetched)
        offset = fetched.next_offset
    return read


async def _consume_sweep(reactor, root: str, topic: str, fetch_sizes: Sequence[int], size: int, rounds: int,
                         progress, source: str | None = None) -> list[SweepCell]:
    """Read C{topic} at every fetch size through every API, from a sendfile broker and a copying broker
    (on a copy of the data) in turns; every measurement C{rounds} times."""
    copy_root = os.path.join(root, "copy")
    shutil.rmtree(copy_root, ignore_errors=True)
    shutil.copytree(os.path.join(root, "data"), os.path.join(copy_root, "data"),
                    ignore=shutil.ignore_patterns("*.lock", ".lock"))
    brokers = {True: BrokerProcess(root, source=source),
               False: BrokerProcess(copy_root, "--no-sendfile", source=source)}
    cells: list[SweepCell] = []
    reads = len(fetch_sizes) * rounds * len(APIS) * len(brokers)
    progress.step(f"consuming {topic}", total=reads, unit="reads")
    try:
        for fetch_bytes in fetch_sizes:
            consumers = {mode: SimpleConsumer("127.0.0.1", b.port, reactor=reactor, max_bytes=fetch_bytes,
                                             batch_max_bytes=fetch_bytes)
                         for mode, b in brokers.items()}
            try:
                (end,) = await consumers[True].offsets(topic, 0)
                for i in range(rounds):
                    for api in APIS:
                        # Alternate which goes first, so that neither always follows the other.
                        for mode in ((True, False) if i % 2 == 0 else (False, True)):
                            broker = brokers[mode]
                            progress.update(len(cells), f"consuming {topic}, round {i + 1}/{rounds}, read "
                                            f"{len(cells) + 1}/{reads}: {_kb(fetch_bytes)} fetches, {api}, "
                                            f"{'sendfile' if mode else 'copying'}")
                            cpu = broker.cpu_seconds()
                            started = time.perf_counter()
                            read = await _read_all(consumers[mode], topic, end, api)
                            elapsed = time.perf_counter() - started
                            row = BrokerRow(f"consume, {fetch_bytes // 1024} KB fetches, {api}"
                                            f"{'' if mode else ', no sendfile'}", read, elapsed, read * size,
                                            broker.cpu_seconds() - cpu)
                            cells.append(SweepCell(fetch_bytes, api, mode, row))
                            progress.update(len(cells))
            finally:
                for consumer in consumers.values():
                    await consumer.close()
    finally:
        for broker in brokers.values():
            broker.stop()
        shutil.rmtree(copy_root, ignore_errors=True)
    return cells


def _cpu_per_gb(table: BenchTable, cpu_s: float) -> str:
    """A CPU s/GB cell: a 0 measured in whole clock ticks is below the resolution, not free."""
    if cpu_s > 0:
        return f"{cpu_s:.2f}"
    return table.missing(f"under one clock tick ({1 / os.sysconf('SC_CLK_TCK'):g} s) of broker CPU in every round: "
                         "too few messages to measure; give more --messages")


def format_sweep_table(cells: Sequence[SweepCell], size: int) -> BenchTable:
    """Sendfile beside copying, per fetch size and API (medians over the rounds)."""
    table = BenchTable(
        "consumption: one consumer, sendfile and copying brokers in turns (medians over the rounds)",
        [Column("fetch", "KiB"), Column.label("API"), Column("sendfile", "msg/s"),
         Column("copying", "msg/s"), Column("sendfile / copying", "ratio"), Column("sendfile broker CPU", "s/GB"),
         Column("copying broker CPU", "s/GB")])
    keys = list(dict.fromkeys((c.fetch_bytes, c.api) for c in cells))
    for fetch_bytes, api in keys:
        rate, per_gb = {}, {}
        for mode in (True, False):
            rows = [c.row for c in cells if (c.fetch_bytes, c.api, c.sendfile) == (fetch_bytes, api, mode)]
            rate[mode] = median([r.msg_s for r in rows])
            per_gb[mode] = median([r.broker_cpu_s / (r.messages * (size + 9) / 1e9) for r in rows])
        table.add_row(f"{fetch_bytes // 1024:,}", api, f"{rate[True]:,.0f}", f"{rate[False]:,.0f}",
                      f"{rate[True] / rate[False]:.2f}", _cpu_per_gb(table, per_gb[True]),
                      _cpu_per_gb(table, per_gb[False]))
    table.note("(ratio: sendfile msg/s over copying msg/s; CPU s/GB: the broker's CPU seconds per GB (10^9 bytes) "
               "of log bytes sent, 9 bytes of overhead a message included)")
    return table


def _kb(n: int) -> str:
    return f"{n // (1024 * 1024)} MB" if n % (1024 * 1024) == 0 else f"{n // 1024} KB"


def decode_rates(size: int, fetch_bytes: int = 1024 * 1024, rounds: int = 5, seconds: float = 0.1
                 ) -> tuple[float, float]:
    """Messages per CPU second parsed and CRC-checked in this process, no network: the batch API
    (L{decode_batch}) and the per-message path (L{scan_messages}), on fetch-sized buffers of C{size}-byte
    messages; the two take turns C{rounds} times (CPU time, so other processes' load counts less)."""
    count = max(1, fetch_bytes // (size + 9))
    buf = encode_message_set(payloads(count, size))
    decoders = (lambda: len(decode_batch(buf, 0)), lambda: sum(1 for _ in scan_messages(buf, 0)))
    done, spent = [0, 0], [0.0, 0.0]
    for _ in range(rounds):
        for i, decode in enumerate(decoders):
            started = time.process_time()
            while time.process_time() - started < seconds:
                done[i] += decode()
            spent[i] += time.process_time() - started
    return done[0] / spent[0], done[1] / spent[1]


def format_broker_table(rows: Sequence[BrokerRow], size: int, pid: int) -> BenchTable:
    """The broker benchmark's table."""
    table = BenchTable(
        f"twlog broker benchmark: one client process, broker process {pid}, loopback TCP, {size}-byte messages",
        [Column.label("test"), Column("messages", "msg"), Column("throughput", "msg/s"),
         Column("throughput", "MB/s"), Column("broker CPU", "s"), Column("broker CPU", "s/GB"),
         Column("client CPU", "s"), Column("client CPU", "µs/msg")])
    for r in rows:
        per_gb = r.broker_cpu_s / (r.messages * (size + 9) / 1e9)
        client = ((f"{r.client_cpu_s:.2f}", f"{r.client_cpu_s / r.messages * 1e6:.2f}") if r.client_cpu_s is not None
                  else (table.missing("not measured"),) * 2)
        table.add_row(r.test, f"{r.messages:,}", f"{r.msg_s:,.0f}", f"{r.mb_s:,.1f}", f"{r.broker_cpu_s:.2f}",
                      _cpu_per_gb(table, per_gb), *client)
    table.note("(MB/s counts payload bytes, MB = 10^6 bytes; CPU s/GB counts log bytes, 9 bytes of overhead "
               "included; with --codec, each batch is one compressed wrapper, which the broker opens to validate; "
               "client CPU: this process's CPU time sending through the public Producer, ack=\"none\")")
    return table


def _produce_per_policy(args, root: str, policies: Sequence[str]) -> int:
    """C{--flush-policy P,Q,...}: the produce rows against one broker per policy (each with the broker's default
    --flush-messages and --flush-interval-ms), in the order given, so repeating them interleaves A/B."""
    result: list[BrokerRow] = []

    async def each(reactor, progress: BenchProgress) -> None:
        for i, policy in enumerate(policies):
            broker = BrokerProcess(os.path.join(root, f"{i}-{policy}"), "--flush-policy", policy,
                                   "--segment-bytes", str(512 * 1024 * 1024))
            try:
                rows = await _broker_benchmark(reactor, broker, args.messages, args.size, args.batch, args.fetch_bytes,
                                               progress, getattr(args, "codec", "none"))
            finally:
                broker.stop()
            result.extend(attrs.evolve(r, test=f"{policy}: {r.test}") for r in rows if r.test.startswith("produce"))

    try:
        status = react_with_progress(each)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    if not status:
        table = format_broker_table(result, args.size, 0)
        table.title = table.title.replace(", broker process 0", ", a broker process per policy")
        table.print()
    return status


def main_broker(args) -> int:
    """Entry point of C{twlog bench broker}."""
    root = args.dir or tempfile.mkdtemp(prefix="twlog-bench-broker-")
    if getattr(args, "flush_policy", None):
        return _produce_per_policy(args, root, args.flush_policy)
    print(f"starting a broker with its data under {root}", file=sys.stderr)
    source = getattr(args, "broker_source", None)
    broker = BrokerProcess(root, "--flush-interval-ms", "5", "--segment-bytes", str(512 * 1024 * 1024),
                           source=source)
    result: list[BrokerRow] = []
    sweep: list[SweepCell] = []
    try:
        async def both(reactor, progress: BenchProgress) -> None:
            result.extend(await _broker_benchmark(reactor, broker, args.messages, args.size, args.batch,
                                                  args.fetch_bytes, progress, getattr(args, "codec", "none")))
            broker.stop()
            if getattr(args, "produce_only", False):
                return
            sweep.extend(await _consume_sweep(reactor, root, f"bench-{args.batch[-1]}", _fetch_sizes(args),
                                              args.size, getattr(args, "rounds", 1), progress, source))

        status = react_with_progress(both)
        if status:
            return status
    finally:
        broker.stop()
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    format_broker_table(result, args.size, broker.pid).print()
    if sweep:
        batch_rate, message_rate = decode_rates(args.size)
        print()
        format_sweep_table(sweep, args.size).print()
        print(f"decoding alone (in process, 1 MB buffers of {args.size}-byte messages, every CRC checked, per CPU "
              f"second): batch API {batch_rate:,.0f} msg/s, per message {message_rate:,.0f} msg/s")
    return 0


def _fetch_sizes(args) -> list[int]:
    """C{--fetch-bytes} as a list (the parser gives one; a caller may give an int)."""
    return [args.fetch_bytes] if isinstance(args.fetch_bytes, int) else list(args.fetch_bytes)
