"""`twistd -n twlog` as an operator runs it: a real process, options, SIGTERM, restart."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.error import ProcessExitedAlready
from twisted.internet.protocol import ProcessProtocol
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.integration.broker import RawClient
from tests.integration.test_registration import node_until
from tests.integration.zookeeper import connect
from twlog.coord import paths
from twlog.protocol import codec
from twlog.protocol.codec import ACK_FLUSHED, AckProduceRequest, FetchRequest, OffsetsRequest, ProduceRequest
from twlog.storage.manager import CLEAN_SHUTDOWN_MARKER
from twlog.storage.message import encode_message_set, iter_messages


class Twistd(ProcessProtocol):
    """A twistd child: its output, its listening port once it says so, and its exit."""

    def __init__(self) -> None:
        self.output = b""
        self.port: Deferred = Deferred()
        self.ended: Deferred = Deferred()

    def outReceived(self, data: bytes) -> None:
        self.output += data
        match = re.search(rb"listening on 127\.0\.0\.1:(\d+)", self.output)
        if match and not self.port.called:
            self.port.callback(int(match.group(1)))

    errReceived = outReceived

    def processEnded(self, reason) -> None:
        if not self.port.called:
            self.port.errback(AssertionError(f"twistd ended before listening:\n{self.output.decode()}"))
        # twistd stopped by SIGTERM re-raises it once shut down, as daemons should: "ended by SIGTERM".
        status = reason.value
        self.ended.callback("SIGTERM" if status.signal == signal.SIGTERM else status.exitCode)


def start_twistd(testcase, *args: str) -> Twistd:
    """Run C{twistd -n twlog ARGS} in its own process, killed at the end of the test if still running."""
    process = Twistd()
    argv = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n", "--pidfile=", "twlog", *args]
    transport = reactor.spawnProcess(process, sys.executable, argv, env=os.environ.copy(), path=os.getcwd())

    def cleanup():
        if not process.ended.called:
            try:
                transport.signalProcess("KILL")
            except ProcessExitedAlready:
                pass
            return process.ended

    testcase.addCleanup(cleanup)
    process.transport = transport
    return process


class TwistdTests(TestCase):
    timeout = 60

    async def test_serve_stop_and_restart(self) -> None:
        """A broker started by twistd serves, stops cleanly on SIGTERM, and restarts at the right offsets."""
        log_dir = os.path.abspath(self.mktemp())
        args = ("--port", "0", "--log-dir", log_dir, "--num-partitions", "2", "--broker-id", "7")
        process = start_twistd(self, *args)
        port = await process.port
        client = await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), RawClient())
        client.send(AckProduceRequest(ACK_FLUSHED, 5000, (ProduceRequest("clicks", 1, encode_message_set([b"a"])),)))
        (response,) = await client.responses(1)
        self.assertEqual(codec.decode_ack_produce_response(response).results[0].next_offset, 10)
        client.send(ProduceRequest("clicks", 1, encode_message_set([b"unflushed-but-kept"])))
        client.send(OffsetsRequest("clicks", 1, -1, 1))  # answered in order: the produce was handled first
        await client.responses(2)
        client.transport.loseConnection()
        await client.closed
        process.transport.signalProcess(signal.SIGTERM)
        self.assertEqual(await process.ended, "SIGTERM", process.output.decode())
        self.assertTrue(os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER)))
        self.assertIn(b"stopped cleanly", process.output)

        again = start_twistd(self, *args)
        port = await again.port
        client = await connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", port), RawClient())
        client.send(FetchRequest("clicks", 1, 0, 1000))
        (response,) = await client.responses(1)
        messages = list(iter_messages(codec.decode_fetch_response(response).messages, 0))
        self.assertEqual([m.payload for m in messages], [b"a", b"unflushed-but-kept"])
        client.transport.loseConnection()
        await client.closed
        again.transport.signalProcess(signal.SIGTERM)
        self.assertEqual(await again.ended, "SIGTERM")

    async def test_bad_option_is_one_line(self) -> None:
        """A bad option value ends twistd with a usage error naming the option."""
        process = start_twistd(self, "--num-partitions", "zero")
        process.port.addErrback(lambda f: None)
        self.assertNotEqual(await process.ended, 0)
        self.assertIn(b"--num-partitions must be a whole number", process.output)
        self.assertNotIn(b"Traceback", process.output)

    async def test_log_dir_in_use(self) -> None:
        """A second broker on the same log directory refuses to start, saying why."""
        log_dir = os.path.abspath(self.mktemp())
        first = start_twistd(self, "--port", "0", "--log-dir", log_dir)
        await first.port
        second = start_twistd(self, "--port", "0", "--log-dir", log_dir)
        second.port.addErrback(lambda f: None)
        await second.ended
        self.assertIn(b"is in use by another twlog broker", second.output)
        first.transport.signalProcess(signal.SIGTERM)
        await first.ended

    async def test_cannot_start_exits_non_zero(self) -> None:
        """A port in use, or a --log-dir that is a file: one critical line naming the option, exit status 1
        (twistd alone would exit 0: a service manager would think the broker ran and stopped)."""
        taken = socket.socket()
        self.addCleanup(taken.close)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        a_file = os.path.abspath(self.mktemp())
        with open(a_file, "w") as f:
            f.write("not a directory")
        cases = [
            (("--port", str(port), "--log-dir", os.path.abspath(self.mktemp())),
             b"port %d is in use (another broker?): choose another with --port" % port),
            (("--port", "0", "--log-dir", a_file), b"--log-dir %s is a file, not a directory" % a_file.encode()),
        ]
        for argv, expected in cases:
            process = start_twistd(self, *argv)
            process.port.addErrback(lambda f: None)
            self.assertEqual(await process.ended, 1, process.output.decode())
            (line,) = [line for line in process.output.splitlines() if b"#critical]" in line]
            self.assertTrue(line.endswith(b"cannot start the broker: " + expected), line)
            self.assertNotIn(b"Traceback", process.output)


class TwistdZooKeeperTests(TestCase):
    timeout = 60

    async def test_registers_and_refuses_a_taken_id(self) -> None:
        """twistd --zookeeper registers the broker, a second one with its id exits saying why, SIGTERM deregisters."""
        zk = await connect(self)
        args = ("--port", "0", "--zookeeper", zk.hosts, "--broker-id", "3")
        first = start_twistd(self, *args, "--log-dir", os.path.abspath(self.mktemp()))
        port = await first.port
        await node_until(zk, paths.broker_id_path(3), lambda stat: stat is not None)
        value = (await zk.get(paths.broker_id_path(3)))[0]
        self.assertEqual(value.split(b":")[1:], [b"127.0.0.1", b"%d" % port])  # Kafka 0.7's <host>-<ms>:<host>:<port>

        second = start_twistd(self, *args, "--log-dir", os.path.abspath(self.mktemp()))
        await second.port
        await second.ended
        self.assertIn(b"broker id 3 is already registered by a live broker at 127.0.0.1:%d" % port, second.output)
        self.assertNotIn(b"Traceback", second.output)

        first.transport.signalProcess(signal.SIGTERM)
        self.assertEqual(await first.ended, "SIGTERM", first.output.decode())
        self.assertIsNone(await zk.exists(paths.broker_id_path(3)))


_PLUGIN_CHECK = """
import pkgutil, site, sys
site.addsitedir(sys.argv[1])          # the install under test: its .pth files are read
from twisted.application.service import IServiceMaker
from twisted.plugin import getPlugins
makers = {m.tapname: m for m in getPlugins(IServiceMaker)}
print("twistd plugin:", makers["twlog"].module if "twlog" in makers else None)
print("pyspark hook:", any(m.name == "pyspark_twlog" for m in pkgutil.iter_modules()))
"""


class EditableInstallTests(SynchronousTestCase):
    def test_plain_editable_install_finds_the_plugin(self) -> None:
        """After a plain `pip install -e .` (setuptools' default mode, no compat), Twisted's plugin scan finds
        `twistd twlog` and PySpark's scan finds pyspark_twlog: the install is a .pth to the project directory.

        The project is copied (so the build leaves nothing in the tree), renamed (so this venv's twlog is
        left alone), installed offline with this venv's setuptools into a prefix, and checked by a Python
        that sees this venv's packages but none of its .pth files (so not the checkout this suite runs from).
        """
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        project = os.path.abspath(self.mktemp())
        os.makedirs(project)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(os.path.join(root, name), project)
        with open(os.path.join(root, "setup.cfg")) as f:
            config = f.read()
        # Another distribution name, and --ignore-installed: pip must not uninstall this venv's twlog.
        with open(os.path.join(project, "setup.cfg"), "w") as f:
            f.write(config.replace("\nname = twlog\n", "\nname = twlog-editable-check\n", 1))
        for name in ("twlog", "twisted", "pyspark_twlog"):
            shutil.copytree(os.path.join(root, name), os.path.join(project, name),
                            ignore=shutil.ignore_patterns("__pycache__", "dropin.cache"))
        prefix = os.path.abspath(self.mktemp())
        install = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
             "--ignore-installed", "--disable-pip-version-check", "--prefix", prefix, "-e", project],
            capture_output=True, text=True, timeout=120, cwd=project,
        )
        self.assertEqual(install.returncode, 0, install.stderr)
        installed = sysconfig.get_path("purelib", vars={"base": prefix, "platbase": prefix})
        here = sysconfig.get_path("purelib")  # this venv's packages (Twisted, pyspark), without their .pth files
        check = subprocess.run(
            [sys.executable, "-S", "-c", f"import sys; sys.path.append({here!r}); " + _PLUGIN_CHECK, installed],
            capture_output=True, text=True, timeout=60, cwd=prefix,
        )
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertIn("twistd plugin: twlog.broker.tap\n", check.stdout)
        self.assertIn("pyspark hook: True\n", check.stdout)
