# -*- test-case-name: tests.integration.test_cli -*-
"""C{twlog bench broker}: a broker process, the Twisted client, loopback TCP.

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
from typing import TextIO

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from twlog.bench.common import MB, payloads, react_status
from twlog.client.connection import BrokerConnection
from twlog.consumer.simple import SimpleConsumer
from twlog.protocol.codec import ProduceRequest
from twlog.storage.message import CODEC_NAMES, encode_message_set


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
    deadline = time.monotonic() + timeout_s
    while (await consumer.offsets(topic, 0))[0] < end:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the broker did not reach offset {end} of {topic} within {timeout_s:g} s")
        await deferLater(reactor, 0.002, lambda: None)


async def _broker_benchmark(reactor, broker: BrokerProcess, messages: int, size: int, batches: Sequence[int],
                            fetch_bytes: int, progress: TextIO | None, codec: str = "none") -> list[BrokerRow]:
    rows = []
    consumer = SimpleConsumer("127.0.0.1", broker.port, reactor=reactor, max_bytes=fetch_bytes)
    try:
        for batch in batches:
            topic = f"bench-{batch}"
            count = messages // batch
            distinct = min(count, max(1, 100_000 // batch))
            data = payloads(distinct * batch, size)
            sets = [data[i * batch : (i + 1) * batch] for i in range(distinct)]
            # Where the log ends once every set is in: each set's size as the producer encodes it.
            set_bytes = [len(encode_message_set(s, CODEC_NAMES[codec])) for s in sets]
            end = sum(set_bytes) * (count // distinct) + sum(set_bytes[: count % distinct])
            # The producer's hot path (encode and compress each set, write it fire-and-forget) on one
            # connection, without its routing: PRODUCE (a 0.7 type) works with any version of the broker.
            connection = BrokerConnection("127.0.0.1", broker.port, reactor=reactor)
            protocol = await connection.connected()
            number = CODEC_NAMES[codec]
            if progress is not None:
                progress.write(f"  producing {count * batch:,} messages in batches of {batch}"
                               f"{'' if codec == 'none' else ', ' + codec}\n")
            cpu = broker.cpu_seconds()
            started = time.perf_counter()
            send = protocol.send
            for i in range(count):
                await send(ProduceRequest(topic, 0, encode_message_set(sets[i % distinct], number)))
            await _wait_for_end(reactor, consumer, topic, end)
            elapsed = time.perf_counter() - started
            how = "fire-and-forget" if codec == "none" else codec
            rows.append(BrokerRow(f"produce, batch {batch}, {how}", count * batch, elapsed,
                                  count * batch * size, broker.cpu_seconds() - cpu))
            await connection.close()
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
                           progress: TextIO | None, source: str | None = None) -> BrokerRow:
    """The same consumption from a broker restarted on the same data with sendfile off."""
    broker = BrokerProcess(root, "--no-sendfile", source=source)
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
    lines.append(" row restarts the broker on the same data with --no-sendfile, copying log bytes through Python;")
    lines.append(" with --codec, each batch is one compressed wrapper, which the broker opens to validate)")
    return "\n".join(lines)


def _produce_per_policy(args, root: str, policies: Sequence[str]) -> int:
    """C{--flush-policy P,Q,...}: the produce rows against one broker per policy (each with the broker's default
    --flush-messages and --flush-interval-ms), in the order given, so repeating them interleaves A/B."""
    result: list[BrokerRow] = []

    async def each(reactor) -> None:
        for i, policy in enumerate(policies):
            broker = BrokerProcess(os.path.join(root, f"{i}-{policy}"), "--flush-policy", policy,
                                   "--segment-bytes", str(512 * 1024 * 1024))
            try:
                rows = await _broker_benchmark(reactor, broker, args.messages, args.size, args.batch, args.fetch_bytes,
                                               sys.stderr, getattr(args, "codec", "none"))
            finally:
                broker.stop()
            result.extend(attrs.evolve(r, test=f"{policy}: {r.test}") for r in rows if r.test.startswith("produce"))

    try:
        status = react_status(lambda reactor: Deferred.fromCoroutine(each(reactor)))
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    if not status:
        print(format_broker_table(result, args.size, 0).replace(", broker process 0", ", a broker process per policy"))
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
    try:
        async def both(reactor) -> None:
            result.extend(await _broker_benchmark(reactor, broker, args.messages, args.size, args.batch,
                                                  args.fetch_bytes, sys.stderr, getattr(args, "codec", "none")))
            broker.stop()
            if getattr(args, "produce_only", False):
                return
            result.append(await _consume_copying(reactor, root, f"bench-{args.batch[-1]}", args.fetch_bytes,
                                                 args.size, sys.stderr, source))

        status = react_status(lambda reactor: Deferred.fromCoroutine(both(reactor)))
        if status:
            return status
    finally:
        broker.stop()
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    print(format_broker_table(result, args.size, broker.pid))
    return 0
