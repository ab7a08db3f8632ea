# -*- test-case-name: tests.coord.test_zk -*-
"""A local ZooKeeper server in its own process: for the test suite and C{twlog local}.

The server's jars come, in this order, from C{$TWLOG_ZOOKEEPER_CLASSPATH}, the
pyspark package (its wheel ships ZooKeeper 3.9 and its dependencies in
C{pyspark/jars}; twlog's C{local} extra installs it for that), or Debian's
C{zookeeper} package.  The server listens on 127.0.0.1 only, keeps its data
in its own directory, has its admin web server off, and is stopped by its
process id.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence

from twlog.errors import TwlogError

_DEBIAN_LIBS = ("/usr/share/zookeeper/lib", "/usr/share/java")


class ZooKeeperNotFound(TwlogError):
    """No ZooKeeper server jars or no Java on this machine."""


class PortInUse(TwlogError):
    """A server cannot listen on its port: another process listens there."""


def _pyspark_locations() -> list[str]:
    """Where the installed pyspark package lives (none if it is not installed)."""
    spec = importlib.util.find_spec("pyspark")
    return list(spec.submodule_search_locations or ()) if spec is not None else []


def find_classpath(pyspark_locations: Callable[[], list[str]] = _pyspark_locations,
                   debian_libs: Sequence[str] = _DEBIAN_LIBS) -> str:
    """The Java classpath of a ZooKeeper server, or L{ZooKeeperNotFound} saying how to get one.

    @param pyspark_locations: where to look for pyspark's jars (the installed package's directories).
    @param debian_libs: Debian's jar directories.
    """
    configured = os.environ.get("TWLOG_ZOOKEEPER_CLASSPATH")
    if configured:
        return configured
    for location in pyspark_locations():
        jars = os.path.join(location, "jars")
        if glob.glob(os.path.join(jars, "zookeeper-3*.jar")):
            return os.path.join(jars, "*")
    for directory in debian_libs:
        if glob.glob(os.path.join(directory, "zookeeper*.jar")):
            return os.path.join(directory, "*")
    raise ZooKeeperNotFound(
        "no ZooKeeper server found: install twlog's local extra (pip install 'twlog[local]', whose pyspark "
        "ships ZooKeeper; ./dev local does), or Debian's zookeeper package, or set TWLOG_ZOOKEEPER_CLASSPATH"
    )


#: The ports L{free_port} picks from: below Linux's ephemeral range (32768-60999, where the kernel picks the local
#: port of every outgoing connection), so that no client connection, of this process or another (a second test
#: worker), takes a chosen port between its choice and the server's bind.
PICK_RANGE = (20000, 32767)

_pick = random.SystemRandom()  # (not the global generator, which tests may seed alike in two workers)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, chosen at random in L{PICK_RANGE} (else any free one
    the kernel gives, when none is found there)."""
    for _ in range(200):
        port = _pick.randint(*PICK_RANGE)
        if bind_error(port) is None:
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bind_error(port: int, host: str = "127.0.0.1") -> str | None:
    """Why a server could not listen on C{host:port} now (C{"Address already in use"}), or None if it could.

    Probed as servers bind (Twisted and Java listeners set C{SO_REUSEADDR}), so
    the connections a server left behind when it stopped a moment ago
    (C{TIME_WAIT}, C{FIN_WAIT2}) do not count: only a live listener, or a
    socket bound without C{SO_REUSEADDR}, does.
    """
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e.strerror or errno.errorcode.get(e.errno, str(e))
    return None


def free_ports(count: int, attempts: int = 100) -> int:
    """The first of C{count} consecutive TCP ports on 127.0.0.1 that nothing listens on now."""
    for _ in range(attempts):
        first = free_port()
        if first + count - 1 <= 65535 and all(bind_error(first + i) is None for i in range(1, count)):
            return first
    raise OSError(f"no {count} consecutive free ports found")


def four_letter_word(port: int, word: bytes = b"ruok", timeout_s: float = 1.0) -> bytes:
    """Send a ZooKeeper four-letter command and return the answer (b"" if none)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(word)
            chunks = []
            while True:
                data = s.recv(4096)
                if not data:
                    return b"".join(chunks)
                chunks.append(data)
    except OSError:
        return b""


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGTERM the server if the process that started it dies
    (a killed test run or C{twlog local} must not leave a ZooKeeper behind)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class ZooKeeperServer:
    """One standalone ZooKeeper server on 127.0.0.1, with its data under C{directory}."""

    def __init__(self, directory: str, port: int = 0, tick_ms: int = 500) -> None:
        self.directory = os.path.abspath(directory)
        self._port_chosen = not port
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.process: subprocess.Popen | None = None
        self.log_path = os.path.join(self.directory, "zookeeper.out")

    @property
    def connect_string(self) -> str:
        """The connect string clients use: C{127.0.0.1:<port>}."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, timeout_s: float = 60.0, attempts: int = 3) -> ZooKeeperServer:
        """Start the server and wait until it serves requests.

        When the port was picked here and something else took it before the
        server bound it, try again on another free port; a port given by the
        caller that another process listens on is L{PortInUse}.
        """
        for attempt in range(attempts):
            try:
                return self._start_once(timeout_s)
            except PortInUse:
                if not self._port_chosen or attempt == attempts - 1:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _start_once(self, timeout_s: float) -> ZooKeeperServer:
        java = shutil.which("java")
        if java is None:
            raise ZooKeeperNotFound(
                "no 'java' on PATH: ZooKeeper needs Java 11 or newer (apt-get install openjdk-17-jre-headless)"
            )
        classpath = find_classpath()
        # Before the JVM starts: a server already on the port would answer the readiness probe below.
        error = bind_error(self.port)
        if error is not None:
            raise PortInUse(f"ZooKeeper cannot listen on 127.0.0.1:{self.port}: {error}")
        data_dir = os.path.join(self.directory, "data")
        os.makedirs(data_dir, exist_ok=True)
        config = os.path.join(self.directory, "zoo.cfg")
        with open(config, "w") as f:
            f.write(
                f"tickTime={self.tick_ms}\n"
                f"dataDir={data_dir}\n"
                f"clientPort={self.port}\n"
                "clientPortAddress=127.0.0.1\n"
                "maxClientCnxns=0\n"
                "admin.enableServer=false\n"
                "4lw.commands.whitelist=ruok,srvr,stat\n"
                f"minSessionTimeout={2 * self.tick_ms}\n"
            )
        argv = [
            java, "-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.admin.enableServer=false", "-Dlog4j2.level=WARN",
            "-Dlog4j2.statusLoggerLevel=OFF", "-cp", classpath, "org.apache.zookeeper.server.ZooKeeperServerMain",
            config,
        ]
        with open(self.log_path, "ab") as log:
            log_start = log.tell()  # this run's output, not an earlier run's
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            # "ruok" answers before the server serves; "srvr" says so only once it does.
            if four_letter_word(self.port, b"srvr").startswith(b"Zookeeper version"):
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        with open(self.log_path, "rb") as f:
            f.seek(log_start)
            tail = f.read()[-2000:].decode(errors="replace")
        if "Address already in use" in tail:
            raise PortInUse(f"ZooKeeper cannot listen on 127.0.0.1:{self.port}: Address already in use")
        raise ZooKeeperNotFound(f"ZooKeeper did not start on 127.0.0.1:{self.port}; its output ends:\n{tail}")

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the server by its process id (SIGTERM, then SIGKILL)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
