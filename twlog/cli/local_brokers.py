# -*- test-case-name: tests.cli.test_local_brokers -*-
"""C{twlog local}'s brokers: each a C{twlog broker} child process, supervised.

L{BrokerChild} is the Twisted process protocol of one child: it holds the
child's output until the broker has started (so a broker that cannot start
is one line of C{twlog local}'s, not its log), then relays it to stderr; a
child that ends while nobody stopped it is reported at once.  L{stop_children}
stops them all (SIGTERM: each leaves ZooKeeper, flushes, writes its
clean-shutdown marker), bounded in time, before the caller stops ZooKeeper.

A child runs L{broker_child}: it asks Linux to SIGTERM it when C{twlog local}
dies (so a killed C{twlog local} leaves no broker behind), leaves the
terminal's process group (Ctrl-C reaches C{twlog local} alone, which stops the
brokers before ZooKeeper), and runs C{twlog broker}.

A broker counts as started once it says it listens, and as ready once its
registration of this run is in ZooKeeper (L{wait_registered}: a registration
left by a previous run, whose session has not expired yet, does not count).
When one dies, the line that says so ends with the C{twlog broker} command
that starts it again with the cluster's settings (L{restart_command}).
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import signal
import sys
from collections.abc import Callable, Sequence

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.error import ProcessExitedAlready
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import deferLater
from twisted.python.failure import Failure

from twlog.cli.broker import main as broker_main
from twlog.coord.paths import broker_id_path
from twlog.coord.zk import IZooKeeper, KazooException
from twlog.errors import TwlogError

#: How long a broker may take to start (connect to ZooKeeper, register), and to stop cleanly.
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0
#: What twlog broker logs once it has started (its start-up log is held back until then).
_LISTENING = re.compile(rb"broker \d+ listening on ")
#: twlog broker's one line when it cannot start.
_CANNOT_START = re.compile(r"twlog broker: cannot start broker \d+ \([^)]*\): (.*)")
#: A registration's value, C{<host>-<ms>:<host>:<port>} (0.7's C{Broker.getZKString}; IPv6 hosts in brackets).
_REGISTRATION = re.compile(r"^(?:\[[^\]]*\]|[^:\[]*)-(\d+):.*:(\d+)$")


class LocalError(TwlogError):
    """C{twlog local} cannot start: said in one line, naming what to change."""


def broker_child() -> None:
    """A child's entry point: C{twlog broker} with the arguments after C{-c}, tied to its parent's life."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    if os.getppid() == 1:  # the parent died before prctl
        sys.exit(1)
    try:
        os.setsid()  # out of the terminal's process group: Ctrl-C goes to twlog local alone
    except OSError:
        pass
    sys.exit(broker_main(sys.argv[1:]))


def broker_argv(broker_id: int, port: int, log_dir: str, zookeeper: str, num_partitions: int,
                flush_interval_ms: int, flush_policy: str, metrics_port: int | None, replication_factor: int = 1,
                min_insync_replicas: int = 1, extra: Sequence[str] = ()) -> list[str]:
    """The command line of broker C{broker_id}'s child (C{extra}: more options, as C{--secure}'s)."""
    argv = [sys.executable, "-c", "from twlog.cli.local_brokers import broker_child; broker_child()",
            "--broker-id", str(broker_id), "--port", str(port), "--log-dir", log_dir, "--zookeeper", zookeeper,
            "--num-partitions", str(num_partitions), "--flush-interval-ms", str(flush_interval_ms),
            "--flush-policy", flush_policy]
    if metrics_port is not None:
        argv += ["--metrics-port", str(metrics_port)]
    if replication_factor > 1:
        argv += ["--default-replication-factor", str(replication_factor)]
    if min_insync_replicas > 1:
        argv += ["--min-insync-replicas", str(min_insync_replicas)]
    return argv + list(extra)


def restart_command(argv: Sequence[str]) -> str:
    """The C{twlog broker} command that runs the broker of the child command line C{argv} (L{broker_argv}) again
    with the same settings, quoted for a POSIX shell."""
    return "twlog broker " + shlex.join(argv[3:])


def registered_since(value: bytes, port: int, since_ms: int) -> bool:
    """Whether a C{/brokers/ids/<id>} value is the registration of a broker on C{port} started at C{since_ms} or
    later (its creator id dates from its start; a previous run's registration is older)."""
    match = _REGISTRATION.match(value.decode("utf-8", "replace"))
    return match is not None and int(match.group(2)) == port and int(match.group(1)) >= since_ms


async def wait_registered(zk: IZooKeeper, children: Sequence[BrokerChild], clock, timeout_s: float = START_TIMEOUT_S,
                          poll_s: float = 0.1) -> None:
    """Wait until every child's broker has registered itself in ZooKeeper (this run's registration, see
    L{registered_since}).

    @raise LocalError: one ended, or did not register within C{timeout_s}, named with its port.
    """
    waiting = list(children)
    deadline = clock.seconds() + timeout_s
    while True:
        for child in list(waiting):
            if child.ended.called:
                raise LocalError(f"{child.describe()} ended before it registered in ZooKeeper")
            try:
                value, _ = await zk.get(broker_id_path(child.broker_id))
            except KazooException:  # not registered yet (NoNodeError), or ZooKeeper unreachable for a moment
                continue
            if registered_since(value, child.port, child.spawned_ms):
                waiting.remove(child)
        if not waiting:
            return
        if clock.seconds() >= deadline:
            names = ", ".join(child.describe() for child in waiting)
            raise LocalError(f"{names} did not register in ZooKeeper within {timeout_s:g} s")
        await deferLater(clock, poll_s, lambda: None)


class BrokerChild(ProcessProtocol):
    """One broker's child process: started, relayed, reported if it dies, stopped on request.

    @param write: where the child's output goes once it has started (stderr).
    @param report: one line for the user when the child ends unasked.
    @param restart: the command that starts this broker again with the same settings (L{restart_command}), given
        in that line.
    @param spawned_ms: when the child was started (ms since the epoch): its registration dates from then or later.
    """

    def __init__(self, broker_id: int, port: int, metrics_port: int | None,
                 write: Callable[[bytes], object], report: Callable[[str], object], restart: str | None = None,
                 spawned_ms: int = 0) -> None:
        self.broker_id = broker_id
        self.port = port
        self.metrics_port = metrics_port
        self.restart = restart
        self.spawned_ms = spawned_ms
        self._write = write
        self._report = report
        #: Fires with this child once the broker has started; fails with a L{LocalError} if it cannot.
        self.started: Deferred[BrokerChild] = Deferred()
        #: Fires with the exit status (None when killed by a signal) once the process has ended.
        self.ended: Deferred[int | None] = Deferred()
        self.stopping = False
        self._held = b""

    def describe(self) -> str:
        metrics = f", metrics port {self.metrics_port}" if self.metrics_port is not None else ""
        return f"broker {self.broker_id} (port {self.port}{metrics})"

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        if self.started.called:
            self._write(data)
            return
        self._held += data
        if _LISTENING.search(self._held):
            held, self._held = self._held, b""
            self._write(held)
            self.started.callback(self)

    def start_timed_out(self) -> None:
        """The broker did not start in time: kill it and say so."""
        if not self.started.called:
            self.started.errback(LocalError(f"{self.describe()} did not start within {START_TIMEOUT_S:g} s"))
            self.kill()

    def processEnded(self, reason: Failure) -> None:
        code = getattr(reason.value, "exitCode", None)
        signal_number = getattr(reason.value, "signal", None)
        how = f"exit status {code}" if code is not None else f"signal {signal_number}"
        if not self.started.called:
            lines = [line for line in self._held.decode(errors="replace").splitlines() if line.strip()]
            match = _CANNOT_START.search(lines[-1]) if lines else None
            why = match.group(1) if match else (lines[-1] if lines else f"it ended ({how})")
            self.started.errback(LocalError(f"{self.describe()} cannot start: {why}"))
        elif not self.stopping:
            again = (f"; to start it again with the cluster's settings, run in another terminal: {self.restart}"
                     if self.restart else "")
            self._report(f"twlog local: {self.describe()} died ({how}); the other brokers and ZooKeeper keep "
                         f"running{again}")
        self.ended.callback(code)

    def stop(self) -> Deferred[int | None]:
        """SIGTERM the child (a clean stop); fires once it has ended."""
        self.stopping = True
        self._signal("TERM")
        return self.ended

    def kill(self) -> None:
        self.stopping = True
        self._signal("KILL")

    def _signal(self, name: str) -> None:
        if self.ended.called or self.transport is None:
            return
        try:
            self.transport.signalProcess(name)
        except ProcessExitedAlready:
            pass


def stop_children(clock, children: Sequence[BrokerChild], timeout_s: float = STOP_TIMEOUT_S) -> Deferred:
    """Stop every child at once; those still running after C{timeout_s} are killed.  Fires once all have ended."""
    ended = DeferredList([child.stop() for child in children], consumeErrors=True)
    timer = clock.callLater(timeout_s, lambda: [child.kill() for child in children])

    def done(result: object) -> object:
        if timer.active():
            timer.cancel()
        return result

    return ended.addBoth(done)
