"""Docs that run: the code blocks of README.md and docs/*.md, run as a reader would run them.

The convention (tests/docblocks.py): every ```sh and ```python block of the
documents is either run here, and listed in C{RUNS} below, or preceded by an
C{<!-- illustrative: why -->} comment, for commands that need root or a real
machine set-up, run for a long time, or need a terminal.  tests/test_docs.py
fails on a block that is neither, so a new command block fails until someone runs
or marks it.

The blocks are read from the documents at test time, not copied.  What the test
changes, and only that:
  - addresses: C{localhost:2181}, C{localhost:9092}, C{localhost:9093}, C{"localhost",
    9092}, C{127.0.0.1:9192} and C{127.0.0.1:9193} become the test cluster's ports, so a
    developer's own C{./dev local} is never touched (a documented port left over fails);
  - C{./dev local ARGS} runs C{twlog local ARGS --data TMP --port ... --zookeeper-port ...
    --metrics-port ...} (what C{./dev local} execs after its set-up), as a subprocess stopped
    by its pid; C{.venv/bin/} and C{$PWD/.venv/bin/} become this interpreter's bin directory,
    and C{twlog} is found there on the PATH, as after C{. .venv/bin/activate};
  - paths outside the repository (C{/tmp/clicks}, C{/var/lib/twlog}) move under the test's
    temporary directory; a C{--port} of C{twlog broker} becomes a free port;
  - a command whose comment says it runs until Ctrl-C gets SIGINT once its output is there,
    and a snippet that loops forever (the group consumer, the blocking stream) is stopped the
    same way once it printed what it should; the group consumer snippet, which only defines
    C{consume(reactor)}, gets the two lines that run it with C{react}; the Spark snippet, which
    uses a session named C{spark}, gets one built first (local[1]) and a C{count()} after;
  - the ETL block's first line is its command, the rest its sample output.
Each command has a bounded timeout, must exit 0, and its output is checked for
what the document says it does.  Data a check needs but no document produces
(JSON payloads for the ETL job, a stopped group C{etl} for the admin commands) is
made with the twlog command first.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from tests.docblocks import ROOT, find
from tests.integration.readme_avro import CLI as AVRO_CLI
from tests.integration.readme_avro import PYTHON as AVRO_PYTHON
from tests.integration.readme_avro import REGISTRY as AVRO_REGISTRY
from tests.integration.readme_avro import avro_registry
from tests.integration.readme_mirroring import FIRST as MIRRORING
from tests.integration.readme_mirroring import mirroring
from tests.integration.spark import spark_env
from twlog.coord.zkserver import free_port, free_ports

#: The blocks this module runs, by document and first line (tests/test_docs.py: every other one is marked).
RUNS: dict[tuple[str, str], str] = {
    ("README.md", "./dev local --brokers 2"): "the cluster the other README blocks run against",
    ("README.md", "twlog topics create --zookeeper localhost:2181 --topic clicks --partitions 4"):
        "the quickstart commands",
    ("README.md", "./dev local --brokers 3 --replication-factor 3 --min-insync-replicas 2"): "the replicated cluster",
    ("README.md", "seq 1 1000 | twlog produce --zookeeper localhost:2181 --topic orders --ack all"):
        "the replicated quickstart, then again after a broker's kill -9",
    ("README.md", "from twisted.internet.task import react"): "Twisted producer and consumer",
    ("README.md", "from twlog import GroupConsumer"): "group consumer, stopped once it printed new messages",
    ("README.md", "from twlog import BlockingConsumer"): "blocking stream, stopped once it printed the topic",
    ("README.md", "export PYSPARK_PYTHON=$PWD/.venv/bin/python"): "set before the Spark snippet, in one shell",
    ("README.md", "from twlog.spark.source import register"): "the Spark batch read, counted",
    ("README.md", "printf '{\"page\": \"/home\"}\\n{\"page\": \"/jobs\"}\\n{\"page\": \"/home\"}\\n' | twlog produce "
                  "--zookeeper localhost:2181 --topic clicks"): "JSON clicks, then the ETL job on the topic",
    ("README.md", "from twisted.internet.defer import Deferred"): "the storage engine",
    ("README.md", MIRRORING): "a second twlog local, twlog mirror into it, consume and audit there",
    ("README.md", AVRO_REGISTRY): "twlog registry on the cluster, stopped with Ctrl-C after the Avro blocks",
    ("README.md", AVRO_CLI): "Avro under two schema versions through the CLI, read back as JSON",
    ("README.md", AVRO_PYTHON): "the blocking facade with the Avro serializer and deserializer",
    ("docs/operations.md", ".venv/bin/twlog broker --port 9092 --log-dir /var/lib/twlog --broker-id 0"):
        "twlog broker and twistd twlog, started and stopped with Ctrl-C",
    ("docs/operations.md", "twlog topics --broker localhost:9092"): "the admin commands against a cluster",
}

README, OPERATIONS = "README.md", "docs/operations.md"
BIN = os.path.dirname(sys.executable)
# (Spark's sessions, the snippet's and the ETL job's, get test settings: tests/integration/spark.py's spark_env.)
ENV = spark_env({**os.environ, "PATH": BIN + os.pathsep + os.environ.get("PATH", ""), "PYTHONUNBUFFERED": "1",
                 "PYSPARK_PYTHON": sys.executable})
DOCUMENTED_PORTS = (2181, 9092, 9093, 9192, 9193)
ADDRESS = re.compile(r'(localhost:|127\.0\.0\.1:|"localhost", )(2181|9092|9093|9192|9193)\b')
SPARK_SESSION = 'from pyspark.sql import SparkSession\nspark = SparkSession.builder.master("local[1]").getOrCreate()\n'
RUN_GROUP = ("\nfrom twisted.internet.defer import ensureDeferred\nfrom twisted.internet.task import react\n"
             "react(lambda reactor: ensureDeferred(consume(reactor)))\n")


def _default_sigint() -> None:
    # A test run from a non-interactive shell's background job inherits SIGINT ignored; Ctrl-C must reach the child.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Cluster:
    """C{twlog local} started from a documented C{./dev local ...} line on free ports; documented ports -> real."""

    def __init__(self, testcase: SynchronousTestCase, dev_local: str, data: str) -> None:
        words = shlex.split(dev_local)
        testcase.assertEqual(words[:2], ["./dev", "local"], dev_local)
        first, metrics, zookeeper = free_ports(3), free_ports(3), free_port()
        self.ports = {2181: zookeeper, 9092: first, 9093: first + 1, 9192: metrics, 9193: metrics + 1}
        argv = [sys.executable, "-m", "twlog.cli", "local", *words[2:], "--data", data, "--port", str(first),
                "--zookeeper-port", str(zookeeper), "--metrics-port", str(metrics)]
        self.process = Running(testcase, argv, os.path.join(data + ".out"))
        self.banner = self.process.wait_for(lambda out: "Ctrl-C stops everything" in out, 60, "twlog local's banner")

    def rewrite(self, text: str) -> str:
        return ADDRESS.sub(lambda m: m.group(1) + str(self.ports[int(m.group(2))]), text)


class Running:
    """A process whose output (stdout and stderr together) goes to a file; killed at cleanup if still running."""

    def __init__(self, testcase: SynchronousTestCase, argv: list[str], output: str, cwd: str | Path = ROOT) -> None:
        self.testcase = testcase
        self.path = output
        with open(output, "wb") as out:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                            cwd=cwd, env=ENV, preexec_fn=_default_sigint)
        testcase.addCleanup(self.stop, signal.SIGINT, 20)

    def output(self) -> str:
        with open(self.path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_for(self, ready, timeout_s: float, what: str) -> str:
        """Poll the output until C{ready(output)}; fail naming C{what} after C{timeout_s} or if the process ends."""
        deadline = time.monotonic() + timeout_s
        while True:
            output = self.output()
            if ready(output):
                return output
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.testcase.fail(f"no {what} (exit {self.process.poll()}); output:\n{output[-3000:]}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGINT, timeout_s: float = 15) -> int:
        """Send C{sig} (by pid) and wait; SIGKILL after C{timeout_s}.  The exit status."""
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode


class DocsTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.tmp = Path(self.mktemp()).resolve()
        self.tmp.mkdir(parents=True)
        self.ran: set[tuple[str, str]] = set()

    def block(self, document: str, first: str):
        """The block of C{document} starting with C{first}, recorded as run; it must not be marked illustrative."""
        self.assertIn((document, first), RUNS)
        block = find(document, first)
        self.assertIsNone(block.illustrative, f"{document}:{block.line} is marked illustrative but listed in RUNS")
        self.ran.add(block.key)
        return block

    def ran_every_block_of(self, document: str, ignore=frozenset()) -> None:
        """Every block of C{document} listed in RUNS ran (but those another test runs, C{ignore})."""
        self.assertEqual(self.ran, {key for key in RUNS if key[0] == document} - set(ignore))

    def local_paths(self, text: str) -> str:
        text = re.sub(r"(?<![\w./])\.venv/bin/", "\0", text.replace("$PWD/.venv/bin/", "\0")).replace("\0", BIN + "/")
        return text.replace("/tmp/clicks", str(self.tmp / "clicks")).replace("/var/lib/twlog", str(self.tmp / "log"))

    def command(self, cluster: Cluster | None, line: str) -> str:
        """A documented line made local (addresses, paths); no documented port may be left in it."""
        line = self.local_paths(line if cluster is None else cluster.rewrite(line))
        left = [p for p in DOCUMENTED_PORTS if re.search(rf"\b{p}\b", line)]
        self.assertEqual(left, [], f"a documented port is left in {line!r}: teach the rewriting its form")
        return line

    def sh(self, line: str, timeout_s: float = 30, cwd: str | Path = ROOT) -> tuple[str, str]:
        """Run one shell line; it must exit 0 within C{timeout_s}.  (stdout, stderr)."""
        done = subprocess.run(["bash", "-c", line], capture_output=True, timeout=timeout_s, cwd=cwd, env=ENV,
                              preexec_fn=_default_sigint)
        out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        self.assertEqual(done.returncode, 0, f"{line}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}")
        return out, err

    def python(self, name: str, source: str, timeout_s: float = 30, cwd: str | Path | None = None) -> str:
        """Run a snippet with this interpreter; it must exit 0 within C{timeout_s}.  Its stdout."""
        script = self.tmp / f"snippet_{name}.py"
        script.write_text(source)
        return self.sh(shlex.join([sys.executable, str(script)]), timeout_s, cwd or self.tmp)[0]

    def start_python(self, name: str, source: str) -> Running:
        script = self.tmp / f"snippet_{name}.py"
        script.write_text(source)
        return Running(self, [sys.executable, str(script)], str(self.tmp / f"{name}.out"), cwd=self.tmp)

    def whole_topic(self, cluster: Cluster) -> list[dict]:
        """Every message of clicks as twlog consume --json gives it (a check's reference, not a documented step)."""
        out, _ = self.sh(f"twlog consume --broker localhost:{cluster.ports[9092]} --topic clicks --json")
        return [json.loads(line) for line in out.splitlines()]


class ReadmeTests(DocsTestCase):
    """README.md from top to bottom against one C{twlog local --brokers 2}."""

    def test_readme(self) -> None:
        """Every README block not marked illustrative runs and does what the README says."""
        dev_local = self.block(README, "./dev local --brokers 2").commands()[0]
        cluster = Cluster(self, dev_local, str(self.tmp / "local"))
        self.assertIn("2 broker(s) at", cluster.banner)
        self.metrics(cluster)
        self.quickstart(cluster)
        self.twisted_snippets(cluster)
        self.spark(cluster)
        mirroring(self, cluster, ENV)
        avro_registry(self, cluster, ENV)
        self.storage_engine()
        self.ran_every_block_of("README.md", ignore={k for k in RUNS if "replicat" in RUNS[k]})

    def test_readme_replicated(self) -> None:
        """The replicated cluster's blocks run, and do what the README says, before and after a broker's kill -9."""
        dev_local = self.block(README, "./dev local --brokers 3 --replication-factor 3 --min-insync-replicas 2")
        cluster = Cluster(self, dev_local.commands()[0], str(self.tmp / "replicated"))
        self.assertIn("3 broker(s) at", cluster.banner)
        self.assertIn("new topics are replicated on 3 brokers (min.insync.replicas 2)", cluster.banner)
        block = self.block(README, "seq 1 1000 | twlog produce --zookeeper localhost:2181 --topic orders --ack all")
        produce, describe, consume = [self.command(cluster, line) for line in block.commands()]
        numbers = sorted(str(i) for i in range(1, 1001))
        self.assertIn("sent 1,000 messages to orders", self.sh(produce)[1])
        out = self.sh(describe)[0]
        self.assertIn("orders: 12 partitions, replication factor 3", out)
        rows = re.findall(r"^(\d+) +(\d) +0 +([0-2],[0-2],[0-2]) +([0-2],[0-2],[0-2]) +(\d+) +"
                          r"([0-2]:\d+,[0-2]:\d+,[0-2]:\d+) *$", out, re.M)
        self.assertEqual(sorted(int(r[0]) for r in rows), list(range(12)), out)
        # each leader's high watermark, and its own end (in the replica ends) at least that: 1,000 numbers stored
        self.assertGreater(sum(int(r[4]) for r in rows), 0, out)
        for r in rows:
            ends = dict(e.split(":") for e in r[5].split(","))
            self.assertGreaterEqual(int(ends[r[1]]), int(r[4]), out)
        self.assertEqual(sorted(self.sh(consume)[0].split()), numbers)
        # Kill -9 a broker: once its session timed out, its partitions are led by others; nothing is lost.
        children = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(cluster.process.process.pid)],
                                  capture_output=True, text=True).stdout.splitlines()
        (victim,) = [int(line.split()[0]) for line in children if "--broker-id 1 " in line]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:
            described = self.sh(describe)[0]
            if not re.search(r"^\d+ +1 ", described, re.M) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.assertNotRegex(described, r"(?m)^\d+ +1 ", "broker 1 still leads partitions 30 s after its kill")
        self.assertEqual(sorted(self.sh(consume)[0].split()), numbers)
        self.assertIn("sent 1,000 messages to orders", self.sh(produce)[1])
        self.assertEqual(len(self.sh(consume)[0].split()), 2000)

    def metrics(self, cluster: Cluster) -> None:
        """The metrics URL the README shows answers (with the test's port) in Prometheus text format."""
        urls = re.findall(r"`(http://127\.0\.0\.1:\d+/metrics)`", (ROOT / "README.md").read_text())
        self.assertTrue(urls)
        for url in urls:
            with urllib.request.urlopen(cluster.rewrite(url), timeout=10) as response:
                self.assertIn(b'twlog_broker_info{broker_id="0"} 1.0', response.read())

    def quickstart(self, cluster: Cluster) -> None:
        block = self.block(README, "twlog topics create --zookeeper localhost:2181 --topic clicks --partitions 4")
        numbers = sorted(str(i) for i in range(1, 1001))
        for raw in block.text.splitlines():
            documented = raw.split("  #")[0].strip()
            if not documented:
                continue
            line = self.command(cluster, documented)
            if "Ctrl-C" in raw:  # runs until Ctrl-C: interrupt it once all 1,000 messages are out
                running = Running(self, ["bash", "-c", "exec " + line], str(self.tmp / "group.out"))
                out = running.wait_for(lambda out: len(re.findall(r"^\d+$", out, re.M)) >= 1000, 30,
                                       "1,000 messages from the group consume")
                self.assertEqual(running.stop(signal.SIGINT, 5), 0, out)
                self.assertEqual(sorted(re.findall(r"^\d+$", out, re.M)), numbers)
                continue
            out, err = self.sh(line)
            if " produce " in line:
                self.assertIn("sent 1,000 messages to clicks", err)
                # Created first, the topic has every partition registered: the random batches reach all 8.
                reached = {m["partition"] for m in self.whole_topic(cluster)}
                self.assertEqual(reached, {f"{b}-{p}" for b in (0, 1) for p in range(4)})
            elif line.startswith("twlog groups"):
                self.assertIn("group demo:", out)
                for broker in sorted({m["partition"][0] for m in self.whole_topic(cluster)}):
                    self.assertRegex(out, rf"clicks +{broker}-0 ")  # brokers the random batches reached
            elif line.startswith("twlog topics"):  # every broker that holds messages of the topic
                for broker in sorted({m["partition"][0] for m in self.whole_topic(cluster)}):
                    self.assertRegex(out, rf"clicks +{broker} \(127\.0\.0\.1:\d+\) +4 +{broker}-0 \.\. {broker}-3")
            elif line.startswith("twlog consume") and "--json" in line:
                # Index 0: the first partition ordered by broker and partition (partition 0 of the lowest
                # broker the random batches reached; a broker creates the topic on its first write).
                first = f"{min(int(m['partition'].split('-')[0]) for m in self.whole_topic(cluster))}-0"
                wanted = [m for m in self.whole_topic(cluster) if m["partition"] == first]
                got = [json.loads(line) for line in out.splitlines()]
                self.assertTrue(got)
                self.assertEqual(got, wanted)
                self.assertEqual({(m["topic"], m["partition"]) for m in got}, {("clicks", first)})
            elif line.startswith("twlog consume"):
                self.assertEqual(sorted(out.split()), numbers)
            elif line.startswith("twlog offsets"):
                brokers = sorted({m["partition"][0] for m in self.whole_topic(cluster)})
                names = [f"{b}-{p}" for b in brokers for p in range(4)]
                self.assertEqual(re.findall(r"^([01]-[0-3]) ", out, re.M), names)
            else:
                self.assertTrue(out or err, f"{line} printed nothing")

    def twisted_snippets(self, cluster: Cluster) -> None:
        snippet = self.block(README, "from twisted.internet.task import react").text
        out = self.python("twisted", cluster.rewrite(snippet))
        self.assertRegex(out, r"(?m)^\d+ b'page=/home'\n\d+ b'page=/jobs'$")

        # The group consumer reads what is produced while it runs (group demo's offsets are at the end of the topic).
        snippet = self.block(README, "from twlog import GroupConsumer").text
        group = self.start_python("group", cluster.rewrite(snippet) + RUN_GROUP)
        self.sh(f"printf 'group-a\\ngroup-b\\n' | twlog produce --zookeeper localhost:{cluster.ports[2181]} -t clicks")
        out = group.wait_for(lambda out: "b'group-a'" in out and "b'group-b'" in out, 30, "the new messages")
        self.assertRegex(out, r"(?m)^clicks:[01]-[0-3] \d+ b'group-a'$")
        group.stop()

        snippet = self.block(README, "from twlog import BlockingConsumer").text
        blocking = self.start_python("blocking", cluster.rewrite(snippet))
        out = blocking.wait_for(lambda out: "b'page=/jobs'" in out, 30, "partition 0's messages")
        self.assertIn("b'page=/home'\nb'page=/jobs'\n", out)
        blocking.stop()

    def spark(self, cluster: Cluster) -> None:
        expected = len(self.whole_topic(cluster))
        export = self.block(README, "export PYSPARK_PYTHON=$PWD/.venv/bin/python").commands()[0]
        export = self.command(cluster, export)
        snippet = self.block(README, "from twlog.spark.source import register").text
        script = self.tmp / "spark.py"
        script.write_text(SPARK_SESSION + cluster.rewrite(snippet) + 'print("rows", df.count())\n')
        out, _ = self.sh(f"{export}\n{shlex.quote(sys.executable)} {shlex.quote(str(script))}", 120)
        self.assertIn(f"rows {expected}\n", out)

        # The ETL job: the README's JSON clicks among the non-JSON payloads already there.
        etl = self.block(README, "printf '{\"page\": \"/home\"}\\n{\"page\": \"/jobs\"}\\n{\"page\": \"/home\"}\\n' | "
                                 "twlog produce --zookeeper localhost:2181 --topic clicks")
        produce_json, run_etl = etl.commands()[:2]
        self.sh(self.command(cluster, produce_json))
        out, _ = self.sh(f"{export}\n{self.command(cluster, run_etl)}", 120)
        self.assertIn(f"wrote 3 rows to {self.tmp / 'clicks'}, partitioned by page\n", out)
        self.assertIn(f"{expected} payloads were not JSON objects: left out\n", out)
        stored = json.loads(re.search(r"^offsets stored: (.*)$", out, re.M).group(1))
        brokers = sorted({m["partition"][0] for m in self.whole_topic(cluster)})
        self.assertEqual(sorted(stored["clicks"]), [f"{b}-{p}" for b in brokers for p in range(4)])
        self.assertTrue(any(p.name.startswith("page=") for p in (self.tmp / "clicks").iterdir()))

    def storage_engine(self) -> None:
        (self.tmp / "storage").mkdir()
        out = self.python("storage", self.block(README, "from twisted.internet.defer import Deferred").text,
                          cwd=self.tmp / "storage")
        self.assertEqual(out, "0 b'page=/home'\n19 b'page=/jobs'\n")  # what the snippet's comments say
        self.assertTrue((self.tmp / "storage" / "data" / "clicks-0" / "00000000000000000000.log").exists())


class OperationsTests(DocsTestCase):
    """docs/operations.md: starting a broker, and administering a cluster."""

    def test_operations(self) -> None:
        """Both ways of starting a broker serve and stop cleanly on Ctrl-C; the admin commands do what they say."""
        self.brokers()
        self.admin()
        self.ran_every_block_of("docs/operations.md")

    def brokers(self) -> None:
        block = self.block(OPERATIONS, ".venv/bin/twlog broker --port 9092 --log-dir /var/lib/twlog "
                                       "--broker-id 0")
        for number, documented in enumerate(block.commands()):
            port = free_port()
            line = self.command(None, documented.replace("--port 9092", f"--port {port}"))
            cwd = self.tmp / f"cwd-{number}"
            cwd.mkdir()
            broker = Running(self, shlex.split(line), str(self.tmp / f"broker-{number}.out"), cwd=cwd)
            broker.wait_for(lambda out: f"listening on 127.0.0.1:{port}" in out, 30, f"a broker on port {port}")
            out, _ = self.sh(f"twlog topics --broker 127.0.0.1:{port} --json")
            self.assertEqual(json.loads(out), [])
            status = broker.stop(signal.SIGINT, 15)
            self.assertIn("broker 0 stopped cleanly", broker.output())
            # twlog broker exits 0; twistd, stopped cleanly, ends by the signal it received (this page says so).
            self.assertIn(status, (0,) if "twistd" not in line else (0, -signal.SIGINT), broker.output())
            self.assertTrue((self.tmp / "log" / ".twlog-clean-shutdown").exists())
            self.assertEqual(os.listdir(cwd), [])  # --pidfile=: no twistd.pid

    def admin(self) -> None:
        cluster = Cluster(self, "./dev local --brokers 2", str(self.tmp / "local"))
        zookeeper = f"localhost:{cluster.ports[2181]}"
        block = self.block(OPERATIONS, "twlog topics --broker localhost:9092")
        prepared = False
        for documented in block.commands():
            if not documented.startswith("twlog topics") and not prepared:
                # What the offsets and groups lines need: messages on both brokers, and a stopped group etl.
                self.sh(f"seq 1 100 | twlog produce --zookeeper {zookeeper} --topic clicks --batch-size 1")
                self.sh(f"twlog consume --zookeeper {zookeeper} --group etl --topic clicks -n 10")
                prepared = True
            if documented.startswith("twlog offsets") and "--time" in documented:
                # Nothing was written before that time: no offsets, one line saying so, exit 1.
                done = subprocess.run(["bash", "-c", self.command(cluster, documented)], capture_output=True,
                                      timeout=30, cwd=ROOT, env=ENV)
                self.assertEqual((done.returncode, done.stdout), (1, b""), done.stderr)
                self.assertIn(b"no segment of partition 1-0 of 'clicks' was last modified before 2024-05-01T12:00:00 "
                              b"UTC, so no offset is that old; its earliest offset is 0", done.stderr)
                continue
            out, err = self.sh(self.command(cluster, documented))
            if documented.startswith("twlog topics create"):
                listed, _ = self.sh(f"twlog topics --broker localhost:{cluster.ports[9093]}")
                self.assertRegex(listed, r"clicks +0 \(127\.0\.0\.1:\d+\) +2 +0-0 \.\. 0-1")
                self.assertRegex(listed, r"clicks +1 \(127\.0\.0\.1:\d+\) +2 +1-0 \.\. 1-1")
            elif documented.startswith("twlog topics delete"):
                self.assertEqual(out, "deleted clicks on 2 brokers (0, 1); and the committed offsets of group etl\n")
            elif documented.startswith("twlog topics"):
                self.assertTrue(out or err, f"{documented} printed nothing")
            elif documented.startswith("twlog offsets"):
                self.assertIn("1-0", re.findall(r"^(\d+-\d+) ", out, re.M))
            elif documented.startswith("twlog groups reset"):
                self.assertRegex(out + err, r"reset \d+ partition\(s\) of clicks for group etl")
                after, _ = self.sh(f"twlog groups --zookeeper {zookeeper} --group etl --json")
                self.assertEqual({p["offset"] for p in json.loads(after)[0]["partitions"]}, {0})
            elif documented.startswith("twlog groups"):
                self.assertIn("group etl:", out)
            else:
                self.assertTrue(out or err, f"{documented} printed nothing")


class CommandTableTests(DocsTestCase):
    """README's command table: every command it lists has --help, and every option the row shows."""

    def test_command_table(self) -> None:
        """Each row's command answers --help with exit 0 and names each option the row shows."""
        rows = re.findall(r"^\| `(twlog [^`]+)` \|", (ROOT / "README.md").read_text(), re.M)
        self.assertGreater(len(rows), 10)
        checks: dict[tuple[str, ...], set[str]] = {}
        for row in rows:
            synopsis = row.replace("\\|", "|")
            head = synopsis.split()[1]
            words = [w for w in synopsis.split()[2:3] if re.fullmatch(r"[a-z][a-z-]*", w)]
            options = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", synopsis))
            for command in head.split("|"):
                checks.setdefault((command, *words), set()).update(options)
        running = {
            words: subprocess.Popen([sys.executable, "-m", "twlog.cli", *words, "--help"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=ENV, cwd=self.tmp)
            for words in checks
        }
        for words, process in running.items():
            out, err = process.communicate(timeout=60)
            self.assertEqual(process.returncode, 0, f"twlog {' '.join(words)} --help: {err.decode()}")
            missing = sorted(o for o in checks[words] if not re.search(rf"(?<![\w-]){re.escape(o)}\b", out.decode()))
            self.assertEqual(missing, [], f"twlog {' '.join(words)} --help does not list {missing}")
