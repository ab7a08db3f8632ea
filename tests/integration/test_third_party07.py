"""Real third-party Kafka 0.7 clients against a real `twlog local` cluster.

samsa 0.3.11 (ZooKeeper-aware producer and balanced consumer groups) and
brod 0.4.3 (a blocking single-broker client) were written for Kafka 0.7 and
run only on Python 2.7.  `./dev setup` installs them into .venv/py27-clients
when a Python 2.7 is present; these tests run them unmodified in a Python 2.7
subprocess (tests/integration/py27/clients07.py) and skip, saying why, when
there is none.  node-kafka 0.2.3 (npm "kafka"), a 0.7 client in JavaScript,
is installed into .venv/node-clients when node and npm are, and runs through
tests/integration/node/clients07.js.  What they read and write is checked from
our side with the twlog command and a ZooKeeper client.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

from kazoo.exceptions import NoNodeError
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import SkipTest, TestCase

from tests.integration.kafka07 import Connection
from tests.integration.test_kafka07 import Cluster, latest, start_local, wait_for, zk_client

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parent / "py27" / "clients07.py"
LIBRARIES = ROOT / ".venv" / "py27-clients"


NODE_SCRIPT = Path(__file__).resolve().parent / "node" / "clients07.js"
NODE_LIBRARIES = ROOT / ".venv" / "node-clients"


def node() -> str:
    """The node that runs node-kafka (SkipTest if `./dev setup` did not install it)."""
    found = shutil.which("node")
    if found is None or not (NODE_LIBRARIES / ".installed").is_file():
        raise SkipTest("no node with node-kafka 0.2.3: ./dev setup installs it when node and npm are present")
    return found


def run_node(*args: str) -> dict:
    """Run one clients07.js command; its last stdout line, parsed."""
    done = subprocess.run([node(), str(NODE_SCRIPT), str(NODE_LIBRARIES), *args], capture_output=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"clients07.js {' '.join(args)} exited {done.returncode}:\n"
                             + (done.stdout + done.stderr).decode(errors="replace")[-3000:])
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def python27() -> str:
    """The Python 2.7 that `./dev setup` installed the clients for (SkipTest if none)."""
    stamp = LIBRARIES / ".installed"
    if not stamp.is_file():
        raise SkipTest("no Python 2.7 with samsa and brod: ./dev setup installs them when python2.7 is present")
    return stamp.read_text().strip()


def run27(*args: str, timeout_s: float = 60) -> dict:
    """Run one clients07.py command under Python 2.7; its last stdout line, parsed."""
    done = subprocess.run([python27(), str(SCRIPT), str(LIBRARIES), *args], capture_output=True,
                          timeout=timeout_s, env={**os.environ, "PYTHONPATH": ""})
    if done.returncode != 0:
        raise AssertionError(f"clients07.py {' '.join(args)} exited {done.returncode}:\n"
                             + done.stderr.decode(errors="replace")[-3000:])
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def twlog_json(cluster: Cluster, topic: str, *extra: str) -> list[dict]:
    """Every message of C{topic} as `twlog consume --json` prints it (every partition, to the end)."""
    brokers = ",".join(f"127.0.0.1:{port}" for port in cluster.ports.values())
    done = subprocess.run([sys.executable, "-m", "twlog.cli", "consume", "--broker", brokers, "--topic", topic,
                           "--json", *extra], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


class Samsa07Tests(TestCase):
    timeout = 240

    def setUp(self) -> None:
        python27()

    async def test_samsa_producer_through_zookeeper(self) -> None:
        """samsa finds both brokers in ZooKeeper and publishes lists of messages; each list lands whole and
        in order in one partition, and twlog reads every message back."""
        cluster = await start_local(self)
        result = await deferToThread(run27, "samsa-produce", cluster.zookeeper, "samsa-in", "30", "10")
        self.assertEqual((result["brokers"], result["published"]), ([0, 1], 300))
        read = await deferToThread(wait_for, lambda: (lambda m: len(m) >= 300 and m)(twlog_json(cluster, "samsa-in")),
                                   20, "samsa's 300 messages to be visible")
        values = [m["value"] for m in read]
        self.assertEqual(sorted(values), sorted(f"samsa-in-{n}-{i}" for n in range(30) for i in range(10)))
        where = defaultdict(list)
        for m in read:
            where[m["value"].rsplit("-", 1)[0]].append((m["partition"], m["offset"], int(m["value"].rsplit("-", 1)[1])))
        for name, placed in where.items():
            self.assertEqual(len({p for p, _, _ in placed}), 1, f"{name} split over partitions: {placed}")
            self.assertEqual([i for _, _, i in sorted(placed)], list(range(10)), name)

    async def test_samsa_group_reads_twlog_produce(self) -> None:
        """Two samsa consumers in one group split the partitions twlog's producer filled (0.7's range
        assignment over twlog's ZooKeeper registry), read every message, and commit offsets at the end of
        every partition, in 0.7's paths, where `twlog groups` finds them."""
        cluster = await start_local(self)
        lines = "".join(f"line-{i}\n" for i in range(400)).encode()
        done = await deferToThread(subprocess.run, [sys.executable, "-m", "twlog.cli", "produce", "--zookeeper",
                                                    cluster.zookeeper, "--topic", "to-samsa", "--batch-size", "10"],
                                   input=lines, capture_output=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        zk = zk_client(cluster)
        self.addCleanup(zk.stop)
        registered = sorted(f"{b}-{p}" for b in zk.get_children("/brokers/topics/to-samsa")
                            for p in range(int(zk.get(f"/brokers/topics/to-samsa/{b}")[0])))
        consume = ("samsa-consume", cluster.zookeeper, "to-samsa", "samsa-group", "2", "8", "90")
        first, second, owners = await deferToThread(self.both, consume, zk, "/consumers/samsa-group/owners/to-samsa",
                                                    registered)
        read = Counter(first["messages"] + second["messages"])
        self.assertEqual(set(read), {f"line-{i}" for i in range(400)})  # nothing lost (a rebalance may repeat)
        # Once the group settled, ZooKeeper's owner registry held every partition, half for each member.
        self.assertEqual(sorted(owners), registered)
        self.assertEqual(sorted(Counter(owners.values()).values()), [len(registered) // 2] * 2)
        for name in registered:
            broker, partition = map(int, name.split("-"))
            committed = int(zk.get(f"/consumers/samsa-group/offsets/to-samsa/{name}")[0])
            with Connection("127.0.0.1", cluster.ports[broker]) as connection:
                self.assertEqual(committed, latest(connection, "to-samsa", partition), name)
        groups = await deferToThread(subprocess.run, [sys.executable, "-m", "twlog.cli", "groups", "--zookeeper",
                                                      cluster.zookeeper, "--group", "samsa-group"],
                                     capture_output=True, timeout=60)
        self.assertEqual(groups.returncode, 0, groups.stderr)
        self.assertIn(b"group samsa-group:", groups.stdout)
        self.assertIn(b"total lag 0 bytes", groups.stdout)

    @staticmethod
    def both(command: tuple[str, ...], zk, owners_path: str, partitions: list[str]) -> tuple[dict, dict, dict]:
        """Run two group members at once (each waits for the other to join before reading); while they
        read, wait until the group's owner registry (0.7's /consumers/<group>/owners/<topic>/<b-p>)
        has every partition owned by one of two members, half each (samsa rebalances asynchronously,
        retrying a claim after 1, 4 and 9 s); then their reports and that registry."""
        processes = [subprocess.Popen([python27(), str(SCRIPT), str(LIBRARIES), *command], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": ""})
                     for _ in range(2)]

        def settled() -> dict | None:
            try:
                owners = {name: zk.get(f"{owners_path}/{name}")[0].decode() for name in zk.get_children(owners_path)}
            except NoNodeError:
                return None
            balanced = sorted(Counter(owners.values()).values()) == [len(partitions) // 2] * 2
            return owners if sorted(owners) == partitions and balanced else None

        try:
            owners = wait_for(settled, 30, "the two samsa members to own half the partitions each")
            results = []
            for process in processes:
                out, err = process.communicate(timeout=120)
                if process.returncode != 0:
                    raise AssertionError(f"a samsa member exited {process.returncode}:\n{err.decode()[-3000:]}")
                results.append(json.loads(out.decode().strip().splitlines()[-1]))
        finally:
            for process in processes:
                process.kill()
        return results[0], results[1], owners


class Brod07Tests(TestCase):
    timeout = 120

    def setUp(self) -> None:
        python27()

    async def test_brod_blocking_client(self) -> None:
        """brod produces to two partitions of one broker, reads the offsets of 0.7's OFFSETS and the messages
        back at 0.7's byte offsets; twlog reads brod's messages, and brod reads twlog's."""
        cluster = await start_local(self)
        port = str(cluster.ports[0])
        result = await deferToThread(run27, "brod", "127.0.0.1", port, "brod")
        entry = lambda payload: 4 + 1 + 4 + len(payload)  # noqa: E731  [int32 size][magic 0][crc32][payload]
        offsets = [0, entry("brod-0"), entry("brod-0") + entry("brod-1")]
        self.assertEqual(result["partition0"],
                         [[offsets[0], "brod-0"], [offsets[1], "brod-1"], [offsets[2], "x" * 1000]])
        self.assertEqual(result["partition1"], [[0, "brod-p1"]])
        end0 = offsets[2] + entry("x" * 1000)
        self.assertEqual(result["latest"], [[end0, 0], [entry("brod-p1"), 0]])
        self.assertEqual(result["earliest"], [[0], [0]])
        ours = await deferToThread(twlog_json, cluster, "brod", "--partition", "0-0")
        self.assertEqual([(m["offset"], m["value"]) for m in ours], [tuple(pair) for pair in result["partition0"]])

        done = await deferToThread(subprocess.run, [sys.executable, "-m", "twlog.cli", "produce", "--broker",
                                                    f"127.0.0.1:{port}", "--topic", "brod", "--partition", "0-0"],
                                   input=b"from-twlog\n", capture_output=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        fetched = await deferToThread(run27, "brod-fetch", "127.0.0.1", port, "brod", "0", str(end0))
        self.assertEqual(fetched["messages"], [[end0, "from-twlog"]])


class NodeKafka07Tests(TestCase):
    timeout = 120

    def setUp(self) -> None:
        node()

    async def test_node_kafka_producer_and_consumer(self) -> None:
        """node-kafka's producer writes lists of messages that twlog reads back at the offsets its consumer
        reports, and its polling consumer reads what `twlog produce` wrote, with 0.7's next offsets and no
        error."""
        cluster = await start_local(self, brokers=1)
        port = str(cluster.ports[0])
        self.assertEqual(await deferToThread(run_node, "produce", "127.0.0.1", port, "from-node", "5", "4"),
                         {"published": 20})
        names = [f"from-node-{n}-{i}" for n in range(5) for i in range(4)]
        read = await deferToThread(wait_for, lambda: (lambda m: len(m) >= 20 and m)(
            twlog_json(cluster, "from-node", "--partition", "0-0")), 20, "node-kafka's 20 messages to be visible")
        self.assertEqual([m["value"] for m in read], names)
        consumed = await deferToThread(run_node, "consume", "127.0.0.1", port, "from-node", "20")
        self.assertEqual(consumed["errors"], [])
        ends = [m["offset"] + 4 + 1 + 4 + len(m["value"]) for m in read]  # [int32 size][magic 0][crc32][payload]
        self.assertEqual(consumed["messages"], [[m["value"], end] for m, end in zip(read, ends)])

        lines = "".join(f"line-{i}\n" for i in range(50)).encode()
        done = await deferToThread(subprocess.run, [sys.executable, "-m", "twlog.cli", "produce", "--broker",
                                                    f"127.0.0.1:{port}", "--topic", "to-node", "--partition", "0-0",
                                                    "--batch-size", "7"], input=lines, capture_output=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        consumed = await deferToThread(run_node, "consume", "127.0.0.1", port, "to-node", "50")
        self.assertEqual(consumed["errors"], [])
        self.assertEqual([value for value, _ in consumed["messages"]], [f"line-{i}" for i in range(50)])
        ends = [end for _, end in consumed["messages"]]
        self.assertEqual(ends, [sum(9 + len(f"line-{j}") for j in range(i + 1)) for i in range(50)])
