"""A plain install of twlog's wheel, not the editable install the suite runs from, holds every module and runs.

The wheel is built from a copy of the project (offline, with this venv's setuptools) and installed with its
dependencies (from the package index, through pip's cache) into a fresh venv that sees nothing of this checkout.
From that installed copy: every C{twlog} subcommand's C{--help} (enumerated from the argument parser, so a new
command is covered without a line here), the module each one runs, C{twistd twlog --help}, and a broker started by
C{twistd twlog} that takes a produce and hands it back to a consume.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile

from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredSemaphore, gatherResults
from twisted.internet.error import ProcessExitedAlready
from twisted.internet.protocol import ProcessProtocol
from twisted.trial.unittest import SkipTest, TestCase

from twlog.cli.main import RUNNER, build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: What a checkout holds that is not the project: left out of the copy the wheel is built from.
NOT_PROJECT = ("__pycache__", "*.pyc", "dropin.cache", ".*", "_trial_temp*", "build", "dist", "*.egg-info",
               "twlog-data", "twlog-local")


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """Every subcommand of C{parser}, nested ones too, as (argv prefix, the C{module:function} it runs or None)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub.get_default("run")
                yield from commands(sub, (*prefix, name))


def clean_env() -> dict[str, str]:
    """This environment without what would put this checkout (or this venv) on the installed copy's path."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def source_modules() -> set[str]:
    """The .py files a wheel must hold: all of twlog/ and pyspark_twlog/, and twisted/plugins/ (not twisted/)."""
    found = set()
    for top in ("twlog", "pyspark_twlog", os.path.join("twisted", "plugins")):
        for directory, subdirectories, files in os.walk(os.path.join(ROOT, top)):
            subdirectories[:] = [d for d in subdirectories if d != "__pycache__"]
            found.update(os.path.relpath(os.path.join(directory, f), ROOT).replace(os.sep, "/")
                         for f in files if f.endswith(".py"))
    return found


#: Run by the installed copy's Python: where twlog comes from, and each command's module imported. A module
#: missing is fine only when it belongs to an extra (pyspark for `bench spark`), never when it is twlog's own.
_IMPORT_TARGETS = """
import importlib, importlib.metadata, json, re, sys
import twlog
extras = {re.split(r"[ ;<>=!~\\[(]", r, maxsplit=1)[0].lower().replace("-", "_")
          for r in importlib.metadata.requires("twlog") or () if "extra ==" in r}
results = {"twlog": twlog.__file__, "extras": sorted(extras), "targets": {}}
for target in json.loads(sys.argv[1]):
    module, name = target.split(":")
    try:
        getattr(importlib.import_module(module), name)
        results["targets"][target] = None
    except ModuleNotFoundError as e:
        results["targets"][target] = ["missing", e.name or ""]
    except Exception as e:
        results["targets"][target] = ["error", repr(e)]
print(json.dumps(results))
"""


class _Process(ProcessProtocol):
    """A child's stdout and stderr, the port it says it listens on, and how it ended: C{ended} fires with
    (exit status or "SIGTERM", stdout, stderr)."""

    def __init__(self, stdin: bytes = b"") -> None:
        self.stdin = stdin
        self.out = b""
        self.err = b""
        self.port: Deferred = Deferred()
        self.ended: Deferred = Deferred()

    def connectionMade(self) -> None:
        self.transport.write(self.stdin)
        self.transport.closeStdin()

    def outReceived(self, data: bytes) -> None:
        self.out += data
        self._listening()

    def errReceived(self, data: bytes) -> None:
        self.err += data
        self._listening()

    def _listening(self) -> None:
        match = re.search(rb"listening on 127\.0\.0\.1:(\d+)", self.out + self.err)
        if match and not self.port.called:
            self.port.callback(int(match.group(1)))

    def processEnded(self, reason) -> None:
        if not self.port.called:
            self.port.errback(AssertionError(f"ended before listening:\n{(self.out + self.err).decode()}"))
        status = reason.value
        self.ended.callback(("SIGTERM" if status.signal == signal.SIGTERM else status.exitCode, self.out, self.err))


class _Installed:
    """The wheel, built once for the module, and the venv it is installed in (under trial's _trial_temp)."""

    def __init__(self, work: str) -> None:
        self.work = work
        if os.path.exists(work):
            shutil.rmtree(work)
        os.makedirs(work)
        self.wheel = self._build_wheel()
        self.venv = self._install(self.wheel)

    def _build_wheel(self) -> str:
        """The wheel built from a copy of the project (so the build leaves nothing in the checkout)."""
        project = os.path.join(self.work, "project")
        shutil.copytree(ROOT, project, ignore=shutil.ignore_patterns(*NOT_PROJECT))
        try:
            import setuptools  # noqa: F401  (the build backend, used from this venv: no download)
        except ImportError:
            raise SkipTest("cannot build the wheel: this venv has no setuptools (./dev setup installs it)") from None
        wheels = os.path.join(self.work, "wheels")
        build = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
             "--disable-pip-version-check", "--wheel-dir", wheels, project],
            capture_output=True, text=True, timeout=120, cwd=self.work, env=clean_env(),
        )
        if build.returncode != 0:
            raise AssertionError(f"building the wheel failed:\n{build.stdout}{build.stderr}")
        (wheel,) = os.listdir(wheels)
        return os.path.join(wheels, wheel)

    def _install(self, wheel: str) -> str:
        """A fresh venv (no system site-packages, no .pth to this checkout) with the wheel and its dependencies."""
        venv = os.path.join(self.work, "venv")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True, timeout=120,
                       env=clean_env())
        install = subprocess.run(
            [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
             wheel],
            capture_output=True, text=True, timeout=300, cwd=self.work, env=clean_env(),
        )
        if install.returncode != 0:
            raise AssertionError(f"installing the wheel failed:\n{install.stdout}{install.stderr}")
        return venv


#: The module's one install (trial has no setUpClass): an _Installed, or the exception that said why not.
_installed: list = []


class InstalledWheelTests(TestCase):
    """The installed copy, built and installed by the first test to run (most of this module's time)."""

    timeout = 300

    def setUp(self) -> None:
        if not _installed:
            try:
                _installed.append(_Installed(os.path.abspath("packaging")))
            except (SkipTest, AssertionError, subprocess.SubprocessError) as e:
                _installed.append(e)  # said once, and again by every test (not built again)
        installed = _installed[0]
        if isinstance(installed, Exception):
            raise installed
        self.work, self.wheel, self.venv = installed.work, installed.wheel, installed.venv

    def run_installed(self, program: str, *args: str, stdin: bytes = b"") -> _Process:
        """Run C{program} (a script of the installed venv) from a directory outside the checkout."""
        process = _Process(stdin)
        path = os.path.join(self.venv, "bin", program)
        cwd = os.path.join(self.work, "cwd")
        os.makedirs(cwd, exist_ok=True)
        transport = reactor.spawnProcess(process, path, [path, *args], env=clean_env(), path=cwd)
        process.port.addErrback(lambda f: None)

        def cleanup():
            if not process.ended.called:
                try:
                    transport.signalProcess("KILL")
                except ProcessExitedAlready:
                    pass
                return process.ended

        self.addCleanup(cleanup)
        process.transport = transport
        return process

    def test_wheel_holds_every_module(self) -> None:
        """Every module of twlog/, pyspark_twlog/ and twisted/plugins/ is in the wheel; nothing else of the
        checkout is (no tests, no twisted/__init__.py, no plugin cache)."""
        with zipfile.ZipFile(self.wheel) as wheel:
            names = set(wheel.namelist())
        modules = {name for name in names if name.endswith(".py")}
        self.assertEqual(source_modules() - modules, set(), "missing from the wheel")
        self.assertEqual(modules - source_modules(), set(), "in the wheel but not in twlog's packages")
        self.assertFalse([name for name in names if name.endswith("dropin.cache")])
        self.assertIn("twisted/plugins/twlog_plugin.py", modules)
        self.assertIn("pyspark_twlog/__init__.py", modules)

    async def test_every_command(self) -> None:
        """Every subcommand's --help exits 0 with its usage, and the module each runs imports, from the
        installed copy (a missing module may only be an extra's dependency)."""
        found = list(commands(build_parser()))
        self.assertIn((("audit",), "twlog.cli.audit:audit"), found)  # the enumeration finds nested commands too:
        self.assertIn((("bench", "broker"), "twlog.bench.broker_tls:main"), found)

        targets = sorted({run for _, run in found if run} | {RUNNER})
        process = self.run_installed("python", "-c", _IMPORT_TARGETS, json.dumps(targets))
        status, output, err = await process.ended
        self.assertEqual(status, 0, err.decode())
        result = json.loads(output)
        self.assertTrue(result["twlog"].startswith(self.venv + os.sep), result["twlog"])
        for target, problem in result["targets"].items():
            if problem is not None:
                kind, what = problem
                self.assertEqual(kind, "missing", f"{target}: {what}")
                self.assertIn(what.split(".")[0].lower(), result["extras"], f"{target} needs {what}, no extra's")

        semaphore = DeferredSemaphore(4)

        async def help_of(argv: tuple[str, ...]) -> tuple[tuple[str, ...], int, bytes]:
            status, output, err = await self.run_installed("twlog", *argv, "--help").ended
            return argv, status, output + err

        argvs = [()] + [argv for argv, _ in found]
        results = await gatherResults([semaphore.run(lambda a=a: Deferred.fromCoroutine(help_of(a))) for a in argvs])
        for argv, status, output in results:
            self.assertEqual(status, 0, (argv, output.decode()))
            usage = b"Usage: twlog " if argv[:1] in (("broker",), ("registry",), ("console",)) else b"usage: twlog "
            self.assertIn(usage + " ".join(argv).encode(), output, argv)
            self.assertNotIn(b"Traceback", output, argv)

    async def test_compiled_kernel(self) -> None:
        """The wheel holds the compiled message walk (Cython and gcc are in the build's venv), and the installed
        twlog --version says it runs it."""
        try:
            import Cython  # noqa: F401  (the wheel is built with --no-build-isolation, from this venv's Cython)
        except ImportError:
            raise SkipTest("this venv has no Cython (the tests extra installs it): the wheel has no compiled kernel")
        with zipfile.ZipFile(self.wheel) as wheel:
            names = wheel.namelist()
        self.assertTrue([n for n in names if n.startswith("twlog/storage/_kernel.") and n.endswith(".so")], names)
        status, output, err = await self.run_installed("twlog", "--version").ended
        self.assertEqual(status, 0, err.decode())
        self.assertEqual(output.strip(), b"twlog 0.1.0 (kernel: compiled)")

    async def test_twistd_plugins(self) -> None:
        """twistd finds the three plugins in the installed copy's twisted/plugins/."""
        for plugin, option in (("twlog", b"--log-dir"), ("twlog-registry", b"--port"),
                               ("twlog-console", b"--read-only")):
            status, output, err = await self.run_installed("twistd", plugin, "--help").ended
            self.assertEqual(status, 0, err.decode())
            self.assertIn(b"Usage: twistd [options] %s [options]" % plugin.encode(), output)
            self.assertIn(option, output)

    async def test_console_files(self) -> None:
        """The console's pages, scripts, styles and bundled chart library are in the installed package."""
        status, output, err = await self.run_installed(
            "python", "-c", "import os, twlog.console.app as a; print(sorted(os.listdir(a.STATIC_DIR)), "
            "sorted(os.listdir(a.STATIC_DIR / 'vendor')), sorted(os.listdir(a.STATIC_DIR / 'pages')))").ended
        self.assertEqual(status, 0, err.decode())
        for name in (b"'index.html'", b"'app.js'", b"'console.css'", b"'uPlot.iife.min.js'", b"'overview.js'",
                     b"'messages.js'", b"'group.js'"):
            self.assertIn(name, output)

    async def test_round_trip(self) -> None:
        """A broker run by the installed twistd takes lines from the installed twlog produce and gives them back
        to twlog consume; SIGTERM stops it cleanly."""
        log_dir = os.path.join(self.work, "data-" + self.id().rsplit(".", 1)[-1])
        broker = self.run_installed("twistd", "-n", "--pidfile=", "twlog", "--port", "0", "--log-dir", log_dir,
                                    "--flush-interval-ms", "20")
        port = await broker.port
        address = f"127.0.0.1:{port}"
        lines = b"".join(b"message %d\n" % i for i in range(100))
        status, _, err = await self.run_installed("twlog", "produce", "-b", address, "-t", "clicks",
                                                  stdin=lines).ended
        self.assertEqual(status, 0, err.decode())
        self.assertIn(b"sent 100 messages to clicks", err)
        status, output, err = await self.run_installed("twlog", "consume", "-b", address, "-t", "clicks").ended
        self.assertEqual((status, output), (0, lines), err.decode())
        broker.transport.signalProcess("TERM")
        status, output, err = await broker.ended
        self.assertEqual(status, "SIGTERM", (output + err).decode())
        self.assertIn(b"stopped cleanly", output + err)
