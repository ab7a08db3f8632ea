# -*- test-case-name: tests.bench.test_local -*-
"""C{twlog bench local}: aggregate produce throughput of producer processes against C{twlog local --brokers N}.

For each cluster size (C{--brokers 1,2} by default, run in that order C{--runs}
times, so the sizes alternate), a real C{twlog local} is started (its own
process, ZooKeeper and N broker children, on free ports, under a temporary
directory) and C{--producers} producer processes (default 2) send batch-C{--batch}
fire-and-forget PRODUCE requests, as fast as they can, C{--messages} each:
producer k to broker k mod N, partition k div N (a log of its own).  They
connect first and start together; the run ends once every broker has flushed
everything sent (OFFSETS), and the aggregate is the messages of all producers
over that time.  The brokers' CPU (from C{/proc}, summed over the broker
children; an older C{twlog local} that runs its brokers in its own process
counts that process) shows whether they ran in parallel.

Every loop is bounded in count and time; everything is on 127.0.0.1.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

import attrs

from twlog.bench.common import BenchProgress, BenchTable, Column, payloads, stop_process
from twlog.client.sync import SyncConnection
from twlog.coord.zkserver import free_port, free_ports
from twlog.protocol import codec
from twlog.protocol.codec import LATEST, ProduceRequest
from twlog.storage.message import encode_message_set

_SIZE = struct.Struct(">i")
TOPIC = "bench-local"
#: How long C{twlog local} may take to start, and the brokers to flush after the producers end.
START_TIMEOUT_S = 90.0
FLUSH_TIMEOUT_S = 120.0
#: Distinct message sets a producer cycles through.
DISTINCT_SETS = 200


def producer_frames(partition: int, batch: int, size: int) -> list[bytes]:
    """The size-prefixed PRODUCE frames a producer cycles through (distinct payloads, encoded once)."""
    data = payloads(DISTINCT_SETS * batch, size)
    frames = []
    for i in range(DISTINCT_SETS):
        messages = encode_message_set(data[i * batch:(i + 1) * batch])
        frame = codec.encode_request(ProduceRequest(TOPIC, partition, messages))
        frames.append(_SIZE.pack(len(frame)) + frame)
    return frames


def produce_child() -> None:
    """A producer process: C{PORT PARTITION MESSAGES BATCH SIZE}.  Connects, says C{ready}, waits for a line on
    stdin, sends, then prints the log bytes it sent (where the partition's log ends once all is flushed)."""
    port, partition, messages, batch, size = map(int, sys.argv[1:6])
    frames = producer_frames(partition, batch, size)
    header = len(frames[0]) - len(encode_message_set(payloads(batch, size)))  # frame bytes around the set
    with socket.create_connection(("127.0.0.1", port)) as sock:
        print("ready", flush=True)
        sys.stdin.readline()
        sent = log_bytes = 0
        i = 0
        while sent < messages:
            frame = frames[i % DISTINCT_SETS]
            sock.sendall(frame)
            log_bytes += len(frame) - header
            sent += batch
            i += 1
        print(sent, log_bytes, flush=True)


@attrs.frozen
class LocalRow:
    """One run: a cluster size, what was produced, how long until it was all flushed, the brokers' CPU."""

    brokers: int
    producers: int
    messages: int
    seconds: float
    broker_cpu_s: float
    load: float
    #: Which twlog local ran: this checkout's, or another source tree's (C{--local-source}).
    source: str = "this checkout"

    @property
    def msg_s(self) -> float:
        return self.messages / self.seconds


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_pids(local_pid: int) -> list[int]:
    """The broker children of a C{twlog local} (their command lines name a --broker-id)."""
    try:
        with open(f"/proc/{local_pid}/task/{local_pid}/children") as f:
            children = [int(p) for p in f.read().split()]
    except OSError:
        return []
    pids = []
    for pid in children:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"--broker-id" in f.read():
                    pids.append(pid)
        except OSError:
            pass
    return pids


class LocalCluster:
    """C{twlog local --brokers N} in its own process, on free ports, under C{directory}."""

    def __init__(self, directory: str, brokers: int, partitions: int, source: str | None = None) -> None:
        self.brokers = brokers
        port = free_ports(brokers)
        self.ports = list(range(port, port + brokers))
        argv = [sys.executable, "-m", "twlog.cli", "local", "--brokers", str(brokers), "--data", directory,
                "--port", str(port), "--zookeeper-port", str(free_port()), "--no-metrics",
                "--num-partitions", str(partitions)]
        self._log = open(os.path.join(os.path.dirname(directory), f"local-{brokers}.err"), "wb")
        env = cwd = None
        if source is not None:  # another checkout's twlog local (first on its path), to compare versions
            cwd = os.path.abspath(source)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([cwd, *filter(None, [os.environ.get("PYTHONPATH")])]))
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL,
                                        env=env, cwd=cwd)
        deadline = time.monotonic() + START_TIMEOUT_S
        banner = b""
        while b"Ctrl-C stops everything" not in banner:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                banner += chunk
                if chunk:
                    continue
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                with open(self._log.name, "rb") as f:
                    raise RuntimeError("twlog local did not start: " + f.read().decode(errors="replace")[-2000:])

    def stop(self) -> None:
        """Ctrl-C (SIGINT), as a user stops it; bounded, then killed."""
        stop_process(self.process, signal.SIGINT, 90)
        if self.process.stdout:
            self.process.stdout.close()
        self._log.close()


def run_once(root: str, brokers: int, producers: int, messages: int, batch: int, size: int,
             source: str | None = None) -> LocalRow:
    """One run against a fresh C{twlog local --brokers N} (from the checkout C{source}, if given)."""
    directory = os.path.join(root, f"run-{len(os.listdir(root))}", "data")
    os.makedirs(os.path.dirname(directory))
    cluster = LocalCluster(directory, brokers, partitions=max(1, -(-producers // brokers)), source=source)
    children: list[subprocess.Popen] = []
    try:
        targets = [(cluster.ports[k % brokers], k // brokers) for k in range(producers)]
        for port, partition in targets:
            argv = [sys.executable, "-c", "from twlog.bench.local import produce_child; produce_child()",
                    str(port), str(partition), str(messages), str(batch), str(size)]
            children.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        for child in children:
            if child.stdout.readline().strip() != b"ready":
                raise RuntimeError("a producer could not connect")
        pids = broker_pids(cluster.process.pid) or [cluster.process.pid]  # an older twlog local runs them inside
        cpu = sum(map(_cpu_seconds, pids))
        started = time.monotonic()
        for child in children:
            child.stdin.write(b"go\n")
            child.stdin.flush()
        ends = []
        for child in children:
            sent, log_bytes = map(int, child.stdout.readline().split())
            ends.append(log_bytes)
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        for (port, partition), end in zip(targets, ends):
            with SyncConnection("127.0.0.1", port) as connection:
                while connection.offset(TOPIC, partition, LATEST) < end:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"broker at port {port} did not flush partition {partition} in time")
                    time.sleep(0.002)
        elapsed = time.monotonic() - started
        cpu = sum(map(_cpu_seconds, pids)) - cpu
        return LocalRow(brokers, producers, messages * producers, elapsed, cpu, os.getloadavg()[0],
                        "this checkout" if source is None else source)
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.wait()
            for stream in (child.stdin, child.stdout):
                if stream:
                    stream.close()
        cluster.stop()


def local_table(rows: Sequence[LocalRow], title: str) -> BenchTable:
    table = BenchTable(title, [
        Column.label("twlog local"), Column.label("source"), Column("producers", "processes"),
        Column("messages", "msg"), Column("time", "s"), Column("throughput", "msg/s"),
        Column("brokers' CPU", "% of a core"), Column("load", "1-min average")])
    for r in rows:
        table.add_row(f"--brokers {r.brokers}", r.source, str(r.producers), f"{r.messages:,}", f"{r.seconds:.2f}",
                      f"{r.msg_s:,.0f}", f"{100 * r.broker_cpu_s / r.seconds:.0f}", f"{r.load:.2f}")
    return table


def main_local(args) -> int:
    """Entry point of C{twlog bench local}."""
    root = args.dir or tempfile.mkdtemp(prefix="twlog-bench-local-")
    os.makedirs(root, exist_ok=True)
    rows: list[LocalRow] = []
    try:
        with BenchProgress() as progress:
            sources = [None, *([args.local_source] if getattr(args, "local_source", None) else [])]
            total = args.runs * len(args.brokers) * len(sources)
            progress.step("clusters", total=total, unit="runs")
            for run in range(args.runs):
                for brokers in args.brokers:
                    for source in sources:
                        where = "" if source is None else " from " + source
                        progress.update(len(rows), f"run {len(rows) + 1}/{total} (round {run + 1}/{args.runs}): "
                                        f"twlog local --brokers {brokers}{where}, "
                                        f"{args.producers} producer processes x {args.messages:,} messages")
                        rows.append(run_once(root, brokers, args.producers, args.messages, args.batch, args.size,
                                             source))
                        progress.update(len(rows))
    except RuntimeError as e:
        print(f"twlog bench local: {e}", file=sys.stderr)
        return 1
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    table = local_table(rows, "twlog local: aggregate produce throughput")
    table.note(f"(batch-{args.batch} fire-and-forget PRODUCE of {args.size}-byte messages, timed until all is flushed; "
               f"producer k sends to broker k mod N; the brokers' CPU is summed over the broker processes; "
               f"{os.cpu_count()} CPUs)")
    table.print()
    return 0
