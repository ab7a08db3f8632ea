# -*- test-case-name: tests.integration.test_fault_loop -*-
"""A replicated cluster to break: a ZooKeeper server of its own and broker processes, each broker's ZooKeeper
link through a L{FaultProxy}, so that a broker can be killed (SIGKILL), stopped (SIGTERM), paused (SIGSTOP),
restarted on the same log directory and port, or cut off from ZooKeeper (L{FaultCluster}).

Each broker also has a proxy in front of its port, whose address it registers (C{--advertised-port}): its
followers reach it through that proxy, so that a leader can be cut off from its followers, one way or both
(L{FaultCluster.cut_peers}).  The run's own clients go straight to the brokers
(L{FaultCluster.client_connections} maps each registered address to the broker's own port), so a cut between
brokers leaves them connected.

Brokers are C{twlog broker} children (L{twlog.cli.local_brokers.broker_argv}: they die with this process),
each with its output in C{<root>/broker-<id>.out}.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.logger import Logger

from twlog.bench.faultproxy import BOTH, DROP, FROM_TARGET, TO_TARGET, FaultProxy
from twlog.client.connection import BrokerConnection
from twlog.client.options import ClientOptions
from twlog.coord import paths
from twlog.coord.replication.store import read_state
from twlog.coord.replication.values import ControllerRecord, PartitionState
from twlog.coord.zk import NoNodeError, ZooKeeper
from twlog.coord.zkserver import ZooKeeperServer, free_port

__all__ = ["FaultCluster"]

CHROOT = "/faults"
#: Small segments, so that a run rolls several and the checker compares their boundaries across replicas.
SEGMENT_BYTES = 64 * 1024
#: How many times a broker that exits while starting is started again.
START_ATTEMPTS = 3


class _ExitedStarting(RuntimeError):
    """A broker process exited before it registered."""


class FaultCluster:
    """C{brokers} broker processes (ids 1..N) and a ZooKeeper server under C{root}.

    @param session_timeout_s: the brokers' ZooKeeper session timeout.
    @param lag_time_ms: the brokers' C{--replica-lag-time-ms}.
    """

    _log = Logger()

    def __init__(self, root: str, reactor, *, brokers: int = 3, session_timeout_s: float = 4.0,
                 lag_time_ms: int = 2000, min_insync_replicas: int = 2) -> None:
        self.root, self._reactor = os.path.abspath(root), reactor
        self.ids = tuple(range(1, brokers + 1))
        self.session_timeout_s, self.lag_time_ms, self.min_isr = session_timeout_s, lag_time_ms, min_insync_replicas
        self.server = ZooKeeperServer(os.path.join(self.root, "zookeeper"))
        self.proxies: dict[int, FaultProxy] = {}
        #: The proxy in front of each broker's port, whose address the broker registers (its followers' way in).
        self.peer_proxies: dict[int, FaultProxy] = {}
        self.ports = {b: free_port() for b in self.ids}
        self.processes: dict[int, subprocess.Popen] = {}
        self.paused: set[int] = set()
        self.zk: ZooKeeper | None = None
        self._events = None

    def event(self, line: str) -> None:
        """Note what the run did, with the time, in C{<root>/events.log} (beside the brokers' output)."""
        if self._events is None:
            self._events = open(os.path.join(self.root, "events.log"), "a", encoding="utf-8")  # noqa: SIM115
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}"
        self._events.write(f"{stamp} {line}\n")
        self._events.flush()

    @property
    def zookeeper(self) -> str:
        """The connect string (chroot included) clients use, straight to the server."""
        return self.server.connect_string + CHROOT

    def log_dir(self, broker: int) -> str:
        return os.path.join(self.root, f"broker-{broker}")

    def address(self, broker: int) -> tuple[str, int]:
        return "127.0.0.1", self.ports[broker]

    def advertised_port(self, broker: int) -> int:
        """The port broker C{broker} registers: its peer proxy's."""
        return self.peer_proxies[broker].port

    def client_connections(self, options: ClientOptions | None = None) -> Callable[[str, int], BrokerConnection]:
        """A C{connection_factory} for the run's producers: a registered (proxy) address goes to its broker's own
        port, past the proxy, so that cuts between brokers leave clients connected."""
        own = {self.peer_proxies[b].port: self.ports[b] for b in self.ids}

        def connect(host: str, port: int) -> BrokerConnection:
            return BrokerConnection(host, own.get(port, port), reactor=self._reactor, options=options)

        return connect

    async def start(self) -> None:
        """Start ZooKeeper, a proxy per broker, every broker; fire once all are registered."""
        os.makedirs(self.root, exist_ok=True)
        await deferToThread(self.server.start)
        for b in self.ids:
            proxy = self.proxies[b] = FaultProxy("127.0.0.1", self.server.port, reactor=self._reactor)
            await proxy.start()
            peers = self.peer_proxies[b] = FaultProxy("127.0.0.1", self.ports[b], reactor=self._reactor)
            await peers.start()
        self.zk = ZooKeeper(self.zookeeper, reactor=self._reactor, create_chroot=True)
        await self.zk.start()
        for b in self.ids:
            self._spawn(b)
        for b in self.ids:
            await self.wait_registered(b)

    def _spawn(self, broker: int) -> None:
        # (as twlog local's children: they die with this process, twlog.cli.local_brokers.broker_child)
        argv = [sys.executable, "-c", "from twlog.cli.local_brokers import broker_child; broker_child()",
                "--broker-id", str(broker), "--port", str(self.ports[broker]), "--log-dir", self.log_dir(broker),
                "--advertised-port", str(self.advertised_port(broker)),
                "--zookeeper", self.proxies[broker].address + CHROOT, "--num-partitions", "1",
                "--flush-interval-ms", "50", "--min-insync-replicas", str(self.min_isr),
                "--segment-bytes", str(SEGMENT_BYTES)]
        argv += ["--zookeeper-session-timeout-s", f"{self.session_timeout_s:g}",
                 "--replica-lag-time-ms", str(self.lag_time_ms), "--controlled-shutdown-timeout-s", "3"]
        out = open(os.path.join(self.root, f"broker-{broker}.out"), "ab")  # noqa: SIM115 (the child keeps it)
        try:
            self.processes[broker] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        finally:
            out.close()
        self._spawned_ms = getattr(self, "_spawned_ms", {})
        self._spawned_ms[broker] = int(time.time() * 1000) - 1000

    async def wait_registered(self, broker: int, timeout_s: float = 60.0) -> None:
        """Fire once broker C{broker}'s process (as last started) is registered."""
        deadline = self._reactor.seconds() + timeout_s
        path = paths.broker_id_path(broker)
        while True:
            process = self.processes[broker]
            if process.poll() is not None:
                raise _ExitedStarting(f"broker {broker} exited with {process.returncode} while starting: see "
                                      f"{self.root}/broker-{broker}.out")
            try:
                value, stat = await self.zk.get(path)
                if value.endswith(b":%d" % self.advertised_port(broker)) and stat.ctime >= self._spawned_ms[broker]:
                    return  # (registered by the process last started: a killed one's node is older)
            except NoNodeError:
                pass
            if self._reactor.seconds() > deadline:
                raise RuntimeError(f"broker {broker} did not register within {timeout_s:g} s")
            await deferLater(self._reactor, 0.1, lambda: None)

    # -- faults --------------------------------------------------------------------

    def running(self, broker: int) -> bool:
        process = self.processes.get(broker)
        return process is not None and process.poll() is None

    def kill(self, broker: int, sig: int = signal.SIGKILL) -> None:
        """Send C{sig} to broker C{broker}'s process (SIGKILL: it dies at once; SIGSTOP: it freezes)."""
        process = self.processes[broker]
        self.event(f"broker {broker}: {signal.Signals(sig).name}")
        if process.poll() is None:
            if broker in self.paused and sig in (signal.SIGKILL, signal.SIGTERM):
                os.kill(process.pid, signal.SIGCONT)
                self.paused.discard(broker)
            os.kill(process.pid, sig)
        if sig == signal.SIGSTOP:
            self.paused.add(broker)
        elif sig == signal.SIGCONT:
            self.paused.discard(broker)

    async def stop(self, broker: int, timeout_s: float = 30.0) -> int:
        """SIGTERM (its controlled shutdown) and wait for the exit; its exit status."""
        self.kill(broker, signal.SIGTERM)
        return await self.wait_exit(broker, timeout_s)

    async def wait_exit(self, broker: int, timeout_s: float = 30.0) -> int:
        process = self.processes[broker]
        deadline = self._reactor.seconds() + timeout_s
        while process.poll() is None:
            if self._reactor.seconds() > deadline:
                process.kill()
                raise RuntimeError(f"broker {broker} did not exit within {timeout_s:g} s")
            await deferLater(self._reactor, 0.05, lambda: None)
        self.event(f"broker {broker}: exited with {process.returncode}")
        return process.returncode

    async def restart(self, broker: int) -> None:
        """Start broker C{broker} again (after it exited or was killed) on its log directory and port."""
        if self.running(broker):
            raise RuntimeError(f"broker {broker} is still running")
        for attempt in range(1, START_ATTEMPTS + 1):
            self.event(f"broker {broker}: restarting")
            self._spawn(broker)
            try:
                await self.wait_registered(broker)
            except _ExitedStarting as e:  # (ZooKeeper, through a busy proxy, answered too late: its one line)
                self.event(f"broker {broker}: {e}")
                if attempt == START_ATTEMPTS:
                    raise
                await deferLater(self._reactor, 1.0, lambda: None)
            else:
                self.event(f"broker {broker}: registered")
                return

    def cut_zookeeper(self, broker: int, direction: str = BOTH) -> None:
        self.event(f"broker {broker}: ZooKeeper link cut ({direction})")
        self.proxies[broker].cut(direction)

    def heal_zookeeper(self, broker: int) -> None:
        if any(self.proxies[broker].cut_mode(d) is not None for d in (TO_TARGET, FROM_TARGET)):
            self.event(f"broker {broker}: ZooKeeper link healed")
        self.proxies[broker].heal()

    def cut_peers(self, broker: int, direction: str = BOTH, mode: str = DROP) -> None:
        """Cut broker C{broker} off from the brokers that connect to it (its followers), C{direction}
        (L{TO_TARGET}: their requests; L{FROM_TARGET}: its answers) in C{mode}; clients stay connected."""
        self.event(f"broker {broker}: link from its followers cut ({direction}, {mode})")
        self.peer_proxies[broker].cut(direction, mode)

    def heal_peers(self, broker: int) -> None:
        if any(self.peer_proxies[broker].cut_mode(d) is not None for d in (TO_TARGET, FROM_TARGET)):
            self.event(f"broker {broker}: link from its followers healed")
        self.peer_proxies[broker].heal()

    # -- what ZooKeeper says ----------------------------------------------------------

    async def state(self, topic: str, partition: int) -> PartitionState | None:
        try:
            state, _ = await read_state(self.zk, topic, partition)
        except NoNodeError:
            return None
        return state

    async def controller(self) -> int | None:
        try:
            value, _ = await self.zk.get(paths.CONTROLLER)
        except NoNodeError:
            return None
        return ControllerRecord.decode(value, paths.CONTROLLER).broker_id

    async def wait_isr(self, topic: str, partitions: Sequence[int], replicas: int | None = None,
                       timeout_s: float = 60.0) -> None:
        """Fire once every partition has a live leader and C{replicas} (all) in-sync replicas."""
        want = replicas if replicas is not None else len(self.ids)
        deadline = self._reactor.seconds() + timeout_s
        while True:
            states = [await self.state(topic, p) for p in partitions]
            if all(s is not None and s.online and len(s.isr) >= want and self.running(s.leader) for s in states):
                return
            if self._reactor.seconds() > deadline:
                raise RuntimeError(f"{topic}: the ISRs did not fill within {timeout_s:g} s: {states}")
            await deferLater(self._reactor, 0.2, lambda: None)

    async def close(self) -> None:
        """Stop every broker (SIGKILL: the run is over), the proxies, the session and the server."""
        for b in self.ids:
            if self.running(b):
                self.kill(b)
                await self.wait_exit(b)
        for proxy in [*self.proxies.values(), *self.peer_proxies.values()]:
            await proxy.stop()
        if self.zk is not None:
            await self.zk.stop()
        await deferToThread(self.server.stop)
        if self._events is not None:
            self._events.close()

