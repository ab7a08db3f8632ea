"""A real cluster (C{twlog local}: ZooKeeper and brokers) and real consoles (C{twlog console}), each a process of
its own, and headless Chromium driven by Selenium, for the browser tests and the screenshots.

Selenium's calls block, so nothing here runs in the test's reactor: the cluster and the consoles are child
processes (stopped by pid when the run ends, and by Linux's parent-death signal if it is killed), and every wait
is a bounded poll.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from twlog.coord.zkserver import free_port, free_ports

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

#: How long the cluster and a console may take to start, and the longest wait for a page.
START_TIMEOUT_S = 90.0
WAIT_S = 15.0


def missing() -> str | None:
    """Why the browser tests cannot run here (None: they can): what to install."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (it is in setup.cfg's tests extra: ./dev setup)"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} is missing (Debian: apt-get install {package}; ./dev setup installs it)"
    return None


def wait_for(what: str, predicate: Callable[[], object], timeout_s: float = WAIT_S, step_s: float = 0.1):
    """Poll C{predicate} until it returns something true (returned), for at most C{timeout_s}.

    @raise AssertionError: naming C{what} and the last exception the predicate raised, if any.
    """
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # (the thing is not ready yet: the predicate says so by raising)
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s" + (f" (last: {last})" if last else ""))
        time.sleep(step_s)


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


class Processes:
    """Child processes started with their output in a directory, stopped by pid (SIGTERM, then SIGKILL)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.children: list[subprocess.Popen] = []

    def start(self, name: str, *argv: str) -> tuple[subprocess.Popen, str]:
        output = os.path.join(self.directory, f"{name}.out")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(output, "wb") as out:
            process = subprocess.Popen([sys.executable, "-m", "twlog.cli", *argv], stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent, env=env)
        self.children.append(process)
        return process, output

    def stop(self) -> None:
        for process in reversed(self.children):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.children):
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.children.clear()


def twlog(*argv: str, stdin: str | None = None, timeout_s: float = 60.0) -> str:
    """Run C{twlog ARGV} (this tree's) to the end; its stdout.  @raise AssertionError: it failed, with its stderr."""
    [out] = twlog_all([argv], stdin=stdin, timeout_s=timeout_s)
    return out


def twlog_all(argvs: list, stdin: str | None = None, timeout_s: float = 60.0) -> list[str]:
    """Run several C{twlog} commands at once, each to its end; their stdouts.  @raise AssertionError: one failed."""
    processes = [subprocess.Popen([sys.executable, "-m", "twlog.cli", *argv], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for argv in argvs]
    outputs = []
    for argv, process in zip(argvs, processes):
        try:
            out, err = process.communicate(stdin, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            err += f" (killed after {timeout_s:g} s)"
        if process.returncode != 0:
            raise AssertionError(f"twlog {' '.join(argv)} exited {process.returncode}: {err.strip()[-2000:]}")
        outputs.append(out)
    return outputs


class Cluster:
    """C{twlog local --brokers N} on free ports (metrics on), and the consoles started over it."""

    def __init__(self, brokers: int = 2) -> None:
        self.directory = tempfile.mkdtemp(prefix="twlog-browser-")
        self.processes = Processes(self.directory)
        self.zk_port = free_port()
        self.port = free_ports(brokers)
        self.brokers = brokers
        self.zookeeper = f"127.0.0.1:{self.zk_port}"
        self.broker_list = ",".join(f"127.0.0.1:{self.port + n}" for n in range(brokers))

    def start(self, attempts: int = 3) -> Cluster:
        """Start the cluster; on free ports another process took first, again on others (at most C{attempts})."""
        for attempt in range(attempts):
            if attempt:
                self.zk_port, self.port = free_port(), free_ports(self.brokers)
                self.zookeeper = f"127.0.0.1:{self.zk_port}"
                self.broker_list = ",".join(f"127.0.0.1:{self.port + n}" for n in range(self.brokers))
            process, output = self.processes.start(
                f"local-{attempt}", "local", "--brokers", str(self.brokers),
                "--data", os.path.join(self.directory, f"local-{attempt}"), "--port", str(self.port),
                "--zookeeper-port", str(self.zk_port), "--metrics-port", str(free_ports(self.brokers)))

            def ready(process=process, output=output):
                if process.poll() is not None:
                    raise AssertionError(f"twlog local exited {process.returncode}: {_tail(output)}")
                return "Ctrl-C stops everything" in _tail(output)

            try:
                wait_for("twlog local ready", ready, START_TIMEOUT_S)
                return self
            except AssertionError as e:
                if "is in use" not in str(e) or attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def console(self, *options: str, zookeeper: str | None = None) -> str:
        """Start C{twlog console} over this cluster (or C{zookeeper}) with C{options}; its base URL once it answers."""
        return self.start_console(*options, zookeeper=zookeeper)()

    def start_console(self, *options: str, zookeeper: str | None = None) -> Callable[[], str]:
        """Start C{twlog console} as L{console} does, without waiting: a function that waits until it answers and
        returns its base URL (so the console starts while the caller does something else)."""
        port = free_port()
        process, output = self.processes.start(
            f"console-{port}", "console", "--zookeeper", zookeeper or self.zookeeper, "--port", str(port),
            "--interface", "127.0.0.1", "--sample-interval", "1", "--timeout", "5", *options)
        base = f"http://127.0.0.1:{port}"

        def answers():
            if process.poll() is not None:
                raise AssertionError(f"twlog console exited {process.returncode}: {_tail(output)}")
            with urllib.request.urlopen(f"{base}/api/session", timeout=2) as response:
                return response.status == 200

        def ready() -> str:
            wait_for(f"twlog console at {base}", answers, START_TIMEOUT_S)
            return base

        return ready

    def registry(self) -> str:
        """Start C{twlog registry} over this cluster; its base URL once it answers."""
        return self.start_registry()()

    def start_registry(self) -> Callable[[], str]:
        """Start C{twlog registry} without waiting: a function that waits until it answers; its base URL."""
        port = free_port()
        process, output = self.processes.start(f"registry-{port}", "registry", "--zookeeper", self.zookeeper,
                                               "--port", str(port))
        base = f"http://127.0.0.1:{port}"

        def answers():
            if process.poll() is not None:
                raise AssertionError(f"twlog registry exited {process.returncode}: {_tail(output)}")
            with urllib.request.urlopen(f"{base}/subjects", timeout=2) as response:
                return response.status == 200

        def ready() -> str:
            wait_for(f"twlog registry at {base}", answers, START_TIMEOUT_S)
            return base

        return ready

    def stop(self) -> None:
        self.processes.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- data ---------------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int, replication_factor: int | None = None) -> None:
        extra = ["--replication-factor", str(replication_factor)] if replication_factor else []
        twlog("topics", "create", "--zookeeper", self.zookeeper, "--topic", topic, "--partitions", str(partitions),
              *extra)

    def produce(self, topic: str, lines: list[str], partition: str | None = None,
                avro: tuple[str, str] | None = None) -> None:
        """Send C{lines} to C{topic} (one message a line), in Avro with C{avro} (schema file, registry URL)."""
        extra = ["--partition", partition] if partition is not None else []
        if avro is not None:
            extra += ["--avro-schema", avro[0], "--registry", avro[1]]
        twlog("produce", "--zookeeper", self.zookeeper, "--topic", topic, *extra,
              stdin="".join(f"{x}\n" for x in lines))

    def consume_group(self, group: str, topic: str, count: int) -> list[str]:
        """Read C{count} messages of C{topic} as a member of C{group}, which commits its offsets as it leaves."""
        [lines] = self.consume_groups([(group, topic, count)])
        return lines

    def consume_groups(self, reads: list[tuple[str, str, int]]) -> list[list[str]]:
        """L{consume_group} for each (group, topic, count), all at once."""
        outs = twlog_all([("consume", "--zookeeper", self.zookeeper, "--group", group, "--topic", topic,
                           "--max-messages", str(count)) for group, topic, count in reads])
        return [out.splitlines() for out in outs]

    def group_json(self, group: str) -> dict:
        """The group as C{twlog groups --json} prints it."""
        [described] = json.loads(twlog("groups", "--zookeeper", self.zookeeper, "--group", group, "--json"))
        return described


def api(base: str, path: str, method: str = "GET", body: object = None, headers: dict | None = None,
        prefix: str = "/api/"):
    """(status, JSON answer) of the console's API (or, with C{prefix}, another JSON service's)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{base}{prefix}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def browser(width: int = 1280, height: int = 900):
    """Headless Chromium (Debian's, through its chromedriver), closed by the caller (C{quit})."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={width},{height}", "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def open_page(driver, url: str) -> None:
    """Load C{url} and wait until the console has drawn its page (main's data-state)."""
    driver.get(url)
    wait_page(driver)


def wait_page(driver, timeout_s: float = WAIT_S) -> None:
    wait_for(f"the page at {driver.current_url} drawn",
             lambda: driver.execute_script("return document.getElementById('main').dataset.state") == "ready",
             timeout_s)


def banner(driver) -> str:
    """The banner's text ('' when hidden)."""
    return driver.execute_script("const b = document.getElementById('banner'); return b.hidden ? '' : b.innerText")


def _tail(path: str, size: int = 4000) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - size))
        return f.read().decode(errors="replace")


_shared: dict[str, Cluster] = {}


def shared_cluster(brokers: int = 2) -> Cluster:
    """The run's cluster for the browser tests, started on first use and stopped when the run ends."""
    if "cluster" not in _shared:
        cluster = Cluster(brokers)
        atexit.register(cluster.stop)
        _shared["cluster"] = cluster.start()
    return _shared["cluster"]
