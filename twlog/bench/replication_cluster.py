# -*- test-case-name: tests.integration.test_bench_replication -*-
"""The cluster of C{twlog bench replication}: a ZooKeeper server and C{twlog broker} processes on loopback.

L{ReplicationCluster} starts a local ZooKeeper (L{twlog.coord.zkserver}) and N brokers, each a real
C{twlog broker --zookeeper ...} process with its own log directory under the bench's directory, and
observes them as an operator would: through ZooKeeper (a partition's leader, epoch and ISR, the
controller) and through the replicas' segment files on disk (a replica's end, as
L{twlog.bench.replica_logs} reads it).  A broker is stopped with SIGTERM (controlled shutdown) or
SIGKILL, and started again with the same settings.  Every child is asked by Linux to die with the bench
(C{PR_SET_PDEATHSIG}), and L{ReplicationCluster.stop} ends them all by their process ids, bounded in time.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from twisted.internet.task import deferLater

from twlog.bench.common import stop_process
from twlog.bench.replica_logs import segment_files
from twlog.client.topics import create_replicated
from twlog.coord import paths
from twlog.coord.replication.store import read_state
from twlog.coord.replication.values import PartitionState
from twlog.coord.zk import NoNodeError, ZooKeeper
from twlog.coord.zkserver import ZooKeeperServer, free_ports
from twlog.storage.directory import partition_directory

#: How long a broker may take to start and register, a partition to get its leader and full ISR, a stop.
START_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
#: How often ZooKeeper and the disk are looked at while waiting.
POLL_S = 0.01


class ClusterError(RuntimeError):
    """The cluster did not do what the bench waits for, in time: said in one line."""


def _die_with_parent() -> None:
    """In a child before exec: SIGTERM it if the bench dies (no broker left behind)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def replica_end(log_dir: str, topic: str, partition: int) -> int:
    """Where a replica's log ends (the byte offset after its last segment's bytes; 0 without segments)."""
    files = segment_files(os.path.join(log_dir, partition_directory(topic, partition)))
    if not files:
        return 0
    base, path = files[-1]
    try:
        return base + os.path.getsize(path)
    except FileNotFoundError:  # rolled or truncated meanwhile: the next look sees it
        return base


class ReplicationCluster:
    """A ZooKeeper and C{brokers} broker processes (ids 1..N) under C{directory}.

    Start it from the reactor's thread (a child's death signal follows the thread that forked it).

    @param session_timeout_s: the brokers' C{--zookeeper-session-timeout-s}.
    @param broker_options: more C{twlog broker} options for every broker.
    """

    def __init__(self, reactor, directory: str, brokers: int, session_timeout_s: float,
                 broker_options: Sequence[str] = ()) -> None:
        self.reactor = reactor
        self.directory = directory
        self.ids = list(range(1, brokers + 1))
        self.session_timeout_s = session_timeout_s
        self.broker_options = list(broker_options)
        self.zookeeper = ZooKeeperServer(os.path.join(directory, "zookeeper"))
        first = free_ports(brokers)
        self.ports = {b: first + i for i, b in enumerate(self.ids)}
        self.log_dirs = {b: os.path.join(directory, f"broker-{b}") for b in self.ids}
        self.processes: dict[int, subprocess.Popen] = {}
        self._logs: dict[int, object] = {}
        self.zk: ZooKeeper | None = None

    @property
    def hosts(self) -> str:
        return self.zookeeper.connect_string

    def argv(self, broker: int) -> list[str]:
        return [sys.executable, "-m", "twlog.cli", "broker", "--broker-id", str(broker),
                "--port", str(self.ports[broker]), "--log-dir", self.log_dirs[broker], "--zookeeper", self.hosts,
                "--zookeeper-session-timeout-s", f"{self.session_timeout_s:g}", *self.broker_options]

    async def start(self) -> None:
        """ZooKeeper, then every broker; fires once all are registered."""
        os.makedirs(self.directory, exist_ok=True)
        self.zookeeper.start()
        self.zk = ZooKeeper(self.hosts, reactor=self.reactor)
        await self.zk.start()
        for broker in self.ids:
            self.spawn(broker)
        for broker in self.ids:
            await self.wait_registered(broker)

    def spawn(self, broker: int) -> float:
        """Start broker C{broker}'s process (again); the wall-clock time it was started at."""
        log = self._logs.get(broker)
        if log is None:
            log = self._logs[broker] = open(os.path.join(self.directory, f"broker-{broker}.log"), "ab")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
             *filter(None, [os.environ.get("PYTHONPATH")])]))
        started = time.time()
        self.processes[broker] = subprocess.Popen(
            self.argv(broker), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True, preexec_fn=_die_with_parent)
        return started

    async def wait_registered(self, broker: int, since: float | None = None) -> None:
        """Wait until broker C{broker} has registered itself (a registration made after C{since}, wall clock)."""
        since_ms = 1000 * (since if since is not None else 0.0)
        deadline = self.reactor.seconds() + START_TIMEOUT_S
        while True:
            process = self.processes[broker]
            if process.poll() is not None:
                raise ClusterError(f"broker {broker} ended (status {process.returncode}) before it registered; "
                                   f"see {self.directory}/broker-{broker}.log")
            try:
                _, stat = await self.zk.get(paths.broker_id_path(broker))
                if stat.ctime >= since_ms - 1000:  # (ZooKeeper's clock is this machine's)
                    return
            except NoNodeError:
                pass
            if self.reactor.seconds() > deadline:
                raise ClusterError(f"broker {broker} did not register in ZooKeeper within {START_TIMEOUT_S:g} s")
            await deferLater(self.reactor, POLL_S * 10, lambda: None)

    async def create_topic(self, topic: str, partitions: int, replication_factor: int,
                           min_insync_replicas: int) -> None:
        """Create a replicated topic and wait until every partition has a leader and its whole ISR."""
        await create_replicated(self.zk, topic, partitions, replication_factor, clock=self.reactor,
                                min_insync_replicas=min_insync_replicas)
        for partition in range(partitions):
            await self.wait_state(topic, partition, lambda s: s.online and len(s.isr) == replication_factor,
                                  f"{topic} partition {partition} has a leader and {replication_factor} in-sync "
                                  "replicas")

    async def state(self, topic: str, partition: int) -> PartitionState | None:
        try:
            state, _ = await read_state(self.zk, topic, partition)
        except NoNodeError:
            return None
        return state

    async def wait_state(self, topic: str, partition: int, predicate, what: str,
                         timeout_s: float = SETTLE_TIMEOUT_S) -> PartitionState:
        """Poll the partition's state until C{predicate(state)}; the state (L{ClusterError} naming C{what})."""
        deadline = self.reactor.seconds() + timeout_s
        while True:
            state = await self.state(topic, partition)
            if state is not None and predicate(state):
                return state
            if self.reactor.seconds() > deadline:
                raise ClusterError(f"not within {timeout_s:g} s: {what} (state: {state})")
            await deferLater(self.reactor, POLL_S, lambda: None)

    async def controller(self) -> int | None:
        """The active controller's broker id, or None while there is none."""
        try:
            value, _ = await self.zk.get(paths.CONTROLLER)
        except NoNodeError:
            return None
        return int(json.loads(value)["brokerid"])

    def end(self, broker: int, topic: str, partition: int) -> int:
        """Where broker C{broker}'s replica of the partition ends, on disk."""
        return replica_end(self.log_dirs[broker], topic, partition)

    def signal(self, broker: int, sig: int) -> None:
        """Send C{sig} to broker C{broker}'s process."""
        self.processes[broker].send_signal(sig)

    def kill(self, broker: int) -> None:
        """SIGKILL broker C{broker}, and reap it (it is gone when this returns)."""
        process = self.processes[broker]
        process.kill()
        process.wait()

    async def wait_ended(self, broker: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Wait for broker C{broker}'s process to end (killed after C{timeout_s})."""
        process = self.processes[broker]
        deadline = self.reactor.seconds() + timeout_s
        while process.poll() is None:
            if self.reactor.seconds() > deadline:
                self.kill(broker)
                raise ClusterError(f"broker {broker} did not stop within {timeout_s:g} s of SIGTERM; killed")
            await deferLater(self.reactor, POLL_S, lambda: None)

    async def stop(self) -> None:
        """Stop every broker (SIGTERM, bounded, then SIGKILL), the ZooKeeper session and the server."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            stop_process(process, signal.SIGTERM, STOP_TIMEOUT_S)
        for log in self._logs.values():
            log.close()
        if self.zk is not None:
            try:
                await self.zk.stop()
            finally:
                self.zookeeper.stop()
        else:
            self.zookeeper.stop()
