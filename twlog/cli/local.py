# -*- test-case-name: tests.integration.test_local -*-
"""C{twlog local}: a whole cluster on this machine, for development: ZooKeeper and N brokers on loopback.

Everything lives under one directory (C{--data}): C{zookeeper/} for the
ZooKeeper server (its own process, stopped by pid) and C{broker-<id>/} for each
broker's partitions.  Each broker is a C{twlog broker} child process
(L{twlog.cli.local_brokers}), registered in ZooKeeper like any other broker,
so N brokers use N cores as N separate brokers do; their logs come out on
stderr, and one that dies is reported at once, with the C{twlog broker}
command that starts it again with the cluster's settings.  "Ready" (the
banner) comes once every broker has registered in ZooKeeper.  ZooKeeper is
watched too (L{ZooKeeperWatch}): if it dies it is said in one line and
started again on the same port and data (the brokers' sessions survive a
short outage), and its return is said in one more.  Ctrl-C (or SIGTERM) stops
the brokers cleanly (deregistration, flush, clean-shutdown marker), then ZooKeeper.

Each broker serves Prometheus metrics at C{http://127.0.0.1:<port>/metrics}
(from C{--metrics-port}, by default C{--port} + 100: 9192, 9193, ...), listed
in the banner.

It starts on the ports asked for (by default ZooKeeper on 2181, brokers from
9092, their metrics from 9192) or not at all: a port another process listens on, or a data directory
another C{twlog local} uses (C{<data>/.twlog-local.lock}), is one line naming
the option to change.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence

from twisted.internet.defer import Deferred, DeferredList, FirstError
from twisted.internet.task import LoopingCall
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)

from twlog.cli.foreground import no_reconnect_lines
from twlog.cli.local_brokers import (
    START_TIMEOUT_S,
    BrokerChild,
    LocalError,
    broker_argv,
    restart_command,
    stop_children,
    wait_registered,
)
from twlog.cli.local_console import start_console
from twlog.cli.local_secure import (
    ADMIN_MECHANISM,
    prepare_secure,
    provision,
    secure_broker_argv,
    secure_usage_lines,
    write_client_properties,
)
from twlog.coord.zk import ZooKeeper
from twlog.coord.zkserver import PortInUse, ZooKeeperServer, bind_error

__all__ = ["LocalError", "ZooKeeperWatch", "check_ports", "lock_data_directory", "metrics_port_of", "run_local",
           "usage_text"]

#: The lock file of C{--data}, held (flock) for the life of the C{twlog local} using it.
LOCK_FILE = ".twlog-local.lock"


def lock_data_directory(data: str) -> int:
    """Lock C{data} for this process (an exclusive C{flock} on L{LOCK_FILE}, released when the process ends).

    The brokers' own locks (C{broker-<id>/.lock}, taken by their log
    managers) are other files: the two never block each other.

    @return: the lock file's descriptor (close it to unlock).
    @raise LocalError: another C{twlog local} runs on C{data}.
    """
    os.makedirs(data, exist_ok=True)
    path = os.path.join(data, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        pid = f" (pid {holder})" if holder.isdigit() else ""
        raise LocalError(f"{data} is in use by another twlog local{pid}; stop it, or pick another directory "
                         "with --data") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def check_ports(zookeeper_port: int, first_broker_port: int, brokers: int,
                first_metrics_port: int | None = None) -> list[int]:
    """The brokers' ports (C{brokers} consecutive ones from C{first_broker_port}), once all ports are free.

    With C{first_metrics_port}, the brokers' metrics ports (as many, consecutive
    from it) are checked too.  Probed as the servers will bind them, so the
    connections of a C{twlog local} stopped a moment ago do not count; a port
    another process listens on is a L{LocalError} naming it and the option to change.
    """
    ports = list(range(first_broker_port, first_broker_port + brokers))
    if ports[-1] > 65535:
        raise LocalError(f"{brokers} broker ports from {first_broker_port} go past 65535; pick a lower --port")
    if zookeeper_port in ports:
        raise LocalError(f"port {zookeeper_port} is both ZooKeeper's (--zookeeper-port) and a broker's (--port)")
    error = bind_error(zookeeper_port)
    if error is not None:
        raise LocalError(f"cannot use port {zookeeper_port} for ZooKeeper ({error}); "
                         "pick another with --zookeeper-port")
    _refuse_taken(ports, "", "pick other ports with --port (broker N listens on --port + N)")
    if first_metrics_port is not None:
        _check_metrics_ports(zookeeper_port, ports, list(range(first_metrics_port, first_metrics_port + brokers)))
    return ports


def _check_metrics_ports(zookeeper_port: int, broker_ports: list[int], metrics_ports: list[int]) -> None:
    """Refuse metrics ports past 65535, shared with ZooKeeper or a broker, or taken."""
    if metrics_ports[-1] > 65535:
        raise LocalError(f"{len(metrics_ports)} metrics ports from {metrics_ports[0]} go past 65535; "
                         "pick a lower --metrics-port")
    for port in metrics_ports:
        if port == zookeeper_port or port in broker_ports:
            other = "ZooKeeper's (--zookeeper-port)" if port == zookeeper_port else "a broker's (--port)"
            raise LocalError(f"port {port} is both {other} and a broker's metrics port (--metrics-port); "
                             "pick another --metrics-port")
    _refuse_taken(metrics_ports, "'s metrics", "pick other ports with --metrics-port (broker N serves metrics on "
                  "--metrics-port + N), or --no-metrics")


def _refuse_taken(ports: list[int], what: str, hint: str) -> None:
    """Raise a L{LocalError} for the first of the brokers' C{ports} (broker N's at index N) that cannot be bound,
    naming broker N's C{what} (C{""}: the broker itself) and the C{hint} to pick others."""
    for broker_id, port in enumerate(ports):
        error = bind_error(port)
        if error is not None:
            raise LocalError(f"cannot use port {port} for broker {broker_id}{what} ({error}); {hint}")


def metrics_port_of(args) -> int | None:
    """The first broker's metrics port: C{--metrics-port}, by default C{--port} + 100; None with C{--no-metrics}."""
    if args.no_metrics:
        return None
    return args.metrics_port if args.metrics_port is not None else args.port + 100


class ZooKeeperWatch:
    """Notices that C{twlog local}'s ZooKeeper server has died, says so in one line, starts it again (same port,
    same data: the brokers' sessions survive an outage shorter than their session timeout), and says when it is back.

    @param server: the L{ZooKeeperServer} (its C{process} is polled).
    @param restart: starts the server again (blocking; raises if it cannot).
    @param failed: called with a L{LocalError} when it cannot be started again, or keeps dying
        (more than C{max_restarts} times in C{window_s}).
    """

    def __init__(self, server, clock, say: Callable[[str], object], restart: Callable[[], object],
                 failed: Callable[[LocalError], object], interval_s: float = 0.5, max_restarts: int = 3,
                 window_s: float = 60.0) -> None:
        self._server = server
        self._clock = clock
        self._say = say
        self._restart = restart
        self._failed = failed
        self._max_restarts = max_restarts
        self._window_s = window_s
        self._restarts: deque[float] = deque()
        self._loop = LoopingCall(self.check)
        self._loop.clock = clock
        self._interval_s = interval_s

    def start(self) -> None:
        self._loop.start(self._interval_s, now=False)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def check(self) -> None:
        process = self._server.process
        code = process.poll() if process is not None else None
        if code is None:
            return
        where = self._server.connect_string
        how = f"signal {-code}" if code < 0 else f"exit status {code}"
        now = self._clock.seconds()
        while self._restarts and self._restarts[0] <= now - self._window_s:
            self._restarts.popleft()
        if len(self._restarts) >= self._max_restarts:
            self.stop()
            self._failed(LocalError(f"ZooKeeper ({where}) died ({how}), {len(self._restarts) + 1} times within "
                                    f"{self._window_s:g} s; see {self._server.log_path}"))
            return
        self._restarts.append(now)
        self._say(f"twlog local: ZooKeeper ({where}, pid {process.pid}) died ({how}); starting it again on the "
                  "same port and data (the brokers keep serving what they hold, and reconnect)")
        self._server.process = None
        try:
            self._restart()
        except Exception as e:
            self.stop()
            self._failed(LocalError(f"ZooKeeper ({where}) died ({how}) and cannot be started again: {e}"))
            return
        self._say(f"twlog local: ZooKeeper is back on {where} (pid {self._server.pid})")


def usage_text(zookeeper: str, ports: list[int], data: str, metrics_urls: Sequence[str] = (),
               replication: tuple[int, int] = (1, 1), secure: Sequence[str] = (), console: str | None = None) -> str:
    """What to tell the user once the cluster is up (C{replication}: the replication factor and min.insync.replicas
    of new topics; C{secure}: how to use a secured cluster, in place of the plain commands)."""
    brokers = ",".join(f"localhost:{p}" for p in ports)
    factor, minimum = replication
    return "\n".join([
        f"twlog local: ZooKeeper at {zookeeper}, {len(ports)} broker(s) at {brokers}; data under {data}",
        *([f"new topics are replicated on {factor} brokers (min.insync.replicas {minimum}); "
           f"see one with: twlog topics describe --zookeeper {zookeeper} --topic clicks"] if factor > 1 else []),
        *(secure or [
            "",
            "produce:  seq 1 100 | twlog produce --zookeeper " + zookeeper + " --topic clicks",
            "consume:  twlog consume --zookeeper " + zookeeper + " --group demo --topic clicks",
            "inspect:  twlog topics --broker " + brokers + "   |   twlog groups --zookeeper " + zookeeper,
        ]),
        *(["metrics:  " + "  ".join(metrics_urls)] if metrics_urls else []),
        *([f"console:  {console}"] if console else []),
        "",
        "Ctrl-C stops everything cleanly.",
    ])


async def run_local(reactor, args) -> None:
    """Start ZooKeeper and the brokers, print how to use them, and run until the reactor stops."""
    factor, minimum = getattr(args, "replication_factor", 1), getattr(args, "min_insync_replicas", 1)
    if factor > args.brokers:
        raise LocalError(f"--replication-factor {factor} needs at least {factor} brokers, not --brokers {args.brokers}")
    if minimum > factor:
        raise LocalError(f"--min-insync-replicas {minimum} is more than --replication-factor {factor}: no ack=all "
                         "produce could ever be acknowledged")
    data = os.path.abspath(args.data)
    lock = lock_data_directory(data)
    try:
        await _run_cluster(reactor, args, data)
    finally:
        os.close(lock)


def _write_stderr(data: bytes) -> None:
    sys.stderr.buffer.write(data)
    sys.stderr.flush()


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def _run_cluster(reactor, args, data: str) -> None:
    first_metrics_port = metrics_port_of(args)
    ports = check_ports(args.zookeeper_port, args.port, args.brokers, first_metrics_port)
    secure = prepare_secure(data) if getattr(args, "secure", False) else None
    tls_ports = [port + args.brokers for port in ports] if secure is not None else []  # (1 broker: 9093, as Kafka)
    _refuse_taken(tls_ports, "'s TLS port", "pick other ports with --port (with --secure, broker N's TLS port is "
                  "--port + --brokers + N)")
    console_port = args.console_port if getattr(args, "console", False) else None
    if console_port is not None and bind_error(console_port) is not None:
        raise LocalError(f"cannot use port {console_port} for the console ({bind_error(console_port)}); pick another "
                         "with --console-port")
    # Our own log lines (and any Twisted reports) go to stderr, beside the brokers' relayed logs.
    globalLogBeginner.beginLoggingTo(
        [FilteringLogObserver(textFileLogObserver(sys.stderr),
                              [LogLevelFilterPredicate(LogLevel.info), no_reconnect_lines])],
        redirectStandardIO=False,
    )
    print(f"starting ZooKeeper under {os.path.join(data, 'zookeeper')} ...", file=sys.stderr)
    zookeeper = ZooKeeperServer(os.path.join(data, "zookeeper"), port=args.zookeeper_port)
    try:
        zookeeper.start()
    except PortInUse as e:  # taken since check_ports
        raise LocalError(f"{e}; pick another port with --zookeeper-port") from None
    children: list[BrokerChild] = []
    consoles: list = []  # (the console, once started)
    stopped: Deferred = Deferred()
    stopping: list[bool] = []  # set once a stop has begun (Ctrl-C, SIGTERM, or a broker that cannot start)
    errors: list[LocalError] = []  # why the cluster stopped by itself (ZooKeeper cannot be started again)

    def zookeeper_failed(error: LocalError) -> None:
        errors.append(error)
        _say(f"twlog local: {error}; stopping the brokers")
        shutdown(say=False)

    watch = ZooKeeperWatch(zookeeper, reactor, _say, lambda: zookeeper.start(attempts=1), zookeeper_failed)
    watch.start()

    def shutdown(say: bool = True) -> Deferred | None:
        if stopping:
            return None
        stopping.append(True)
        watch.stop()
        d = DeferredList([c.stopService() for c in consoles], consumeErrors=True)
        d.addBoth(lambda _: stop_children(reactor, children))

        def zookeeper_down(_: object) -> None:
            zookeeper.stop()  # last: the brokers left it as they stopped
            if say:
                print("twlog local: stopped", file=sys.stderr)
            if not stopped.called:
                stopped.callback(None)

        return d.addBoth(zookeeper_down)

    # From now on, Ctrl-C stops whatever has started (even while the brokers are still starting).
    reactor.addSystemEventTrigger("before", "shutdown", shutdown)
    try:
        if secure is not None:
            await provision(reactor, zookeeper.connect_string, secure)
        for broker_id, port in enumerate(ports):
            metrics_port = None if first_metrics_port is None else first_metrics_port + broker_id
            argv = broker_argv(broker_id, port, os.path.join(data, f"broker-{broker_id}"), zookeeper.connect_string,
                               args.num_partitions, args.flush_interval_ms, getattr(args, "flush_policy", "group"),
                               metrics_port, getattr(args, "replication_factor", 1),
                               getattr(args, "min_insync_replicas", 1),
                               secure_broker_argv(secure, tls_ports[broker_id], metrics_port is not None)
                               if secure is not None else ())
            child = BrokerChild(broker_id, port, metrics_port, _write_stderr, _say, restart=restart_command(argv),
                                spawned_ms=int(time.time() * 1000))
            reactor.spawnProcess(child, sys.executable, argv, env=os.environ.copy(),
                                 childFDs={0: "w", 1: "r", 2: "r"})
            children.append(child)
            timeout = reactor.callLater(START_TIMEOUT_S, child.start_timed_out)
            child.started.addBoth(lambda result, t=timeout: (t.active() and t.cancel(), result)[1])
        try:
            await DeferredList([c.started for c in children], fireOnOneErrback=True, consumeErrors=True)
        except FirstError as e:
            raise e.subFailure.value from None
        await _registered(reactor, zookeeper.connect_string, children)
        if secure is not None:
            write_client_properties(os.path.join(data, "client.properties"), secure,
                                    [f"127.0.0.1:{port}" for port in tls_ports], ADMIN_MECHANISM)
        if console_port is not None:  # (with --secure, as the admin of client.properties)
            consoles.append(await start_console(reactor, zookeeper.connect_string, console_port, data, secure))
    except BaseException:
        if stopping:  # stopped by the user while starting: not an error
            await stopped
            return
        await shutdown(say=False)
        raise

    scheme = "https" if secure is not None else "http"
    metrics_urls = [f"{scheme}://127.0.0.1:{c.metrics_port}/metrics" for c in children if c.metrics_port is not None]
    secure_lines: list[str] = []
    if secure is not None:
        tls_addresses = [f"127.0.0.1:{port}" for port in tls_ports]
        secure_lines = secure_usage_lines(zookeeper.connect_string, args.data, secure, tls_addresses)
    print(usage_text(zookeeper.connect_string, ports, data, metrics_urls,
                     (getattr(args, "replication_factor", 1), getattr(args, "min_insync_replicas", 1)), secure_lines,
                     consoles[0].url if consoles else None))
    sys.stdout.flush()
    await stopped
    if errors:
        raise errors[0]


async def _registered(reactor, hosts: str, children: Sequence[BrokerChild]) -> None:
    """Wait until every broker has registered in ZooKeeper (a broker listens before it has)."""
    zk = ZooKeeper(hosts, reactor=reactor, connect_timeout_s=10.0)
    await zk.start()
    try:
        await wait_registered(zk, children, reactor)
    finally:
        await zk.stop()
