"""`twlog mirror` between two real clusters (two `twlog local`, each with its own ZooKeeper, ports and data),
run as a user runs it: kill -9 and restart, a topic created meanwhile, a blacklist, a mirror stopped for good,
the refusals."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections import Counter

from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from tests.integration.mirroring import (
    audit_json,
    local_cluster,
    produce,
    start_mirror,
    topic_values,
    until,
)
from tests.integration.test_cli import one_line, twlog
from tests.integration.test_local import LocalProcess, banner_ports, child_pids, command_line, start_local
from twlog.coord.zkserver import free_port, free_ports
from twlog.envelope import open_envelope


def per_window(values: list[bytes], window_ms: int) -> dict[int, set[tuple[int, int]]]:
    """The distinct (instance, sequence) of enveloped C{values}, per window of their creation time."""
    windows: dict[int, set[tuple[int, int]]] = {}
    for value in values:
        envelope = open_envelope(value)
        if envelope is not None:
            start = envelope.created_ms - envelope.created_ms % window_ms
            windows.setdefault(start, set()).add((envelope.instance, envelope.sequence))
    return windows


class MirrorTests(TestCase):
    timeout = 300

    async def setUp(self) -> None:
        self.a = await local_cluster(self, "a")
        self.b = await local_cluster(self, "b")

    async def test_kill_restart_new_topic_blacklist(self) -> None:
        """Messages produced with --audit into A reach B through a mirror killed with kill -9 mid-stream and
        restarted: the audit of B finds every window complete and counts the copies made twice; a topic created
        in A while the mirror runs arrives in B, a blacklisted one does not; an un-instrumented topic's audit
        says so in one line."""
        lines = [b"event %d" % i for i in range(3000)]
        await produce(self.a, "events", lines, "--audit", "--audit-window-s", "1", "--audit-origin", "web-1",
                      "--batch-size", "100")
        await produce(self.a, "secret", [b"s %d" % i for i in range(50)])
        args = ("--from", self.a, "--to", self.b, "--blacklist", "secret", "--batch-size", "10",
                "--max-in-flight", "20", "--status-interval", "0.2")
        first = start_mirror(self, *args)
        await first.said(r"copying topic events from")
        await first.said(r"mirror status: .*events (\d{3}|\d{1,3}(,\d{3})+) \(")  # 100 copied or more
        await first.kill("KILL")
        stored = len(await topic_values(self.b, "events"))
        self.assertLess(stored, len(lines), "the mirror was killed after copying everything: not mid-stream")

        second = start_mirror(self, *args)
        await second.said(r"copying topic events from")
        await produce(self.a, "fresh", [b"new %d" % i for i in range(20)])  # created while the mirror runs
        await second.said(r"copying topic fresh from")

        async def complete():
            """the audit of B exits 0 with every message of events received"""
            status, windows, _ = await audit_json(self.b, "events", "--grace-s", "0")
            if status == 0 and windows and sum(w["received"] for w in windows) == len(lines):
                return windows
            return None

        windows = await until(complete)
        self.assertTrue(all(w["status"] == "complete" and w["missing"] == 0 for w in windows), windows)
        self.assertEqual({w["origin"] for w in windows}, {"web-1"})
        self.assertEqual(sum(w["expected"] for w in windows), len(lines))
        copies = await topic_values(self.b, "events")
        # Every copy made twice (what was in flight at the kill) is counted as duplicated.
        self.assertEqual(sum(w["duplicated"] for w in windows), len(copies) - len(lines))
        self.assertEqual(Counter(open_envelope(v).payload for v in copies).keys(), set(lines))

        async def fresh_arrived():
            """the topic created during the mirroring is in B"""
            return len(await topic_values(self.b, "fresh")) == 20

        await until(fresh_arrived)
        status, topics, _ = await twlog("topics", "--zookeeper", self.b)
        self.assertNotIn(b"secret", topics)

        status, out, err = await twlog("audit", "--zookeeper", self.b, "--topic", "fresh")
        self.assertEqual(status, 1)
        one_line(self, err)
        self.assertIn(b"not instrumented", err)

        await second.kill("TERM")  # a clean stop: says so, exits 0
        self.assertIn(b"mirror: stopped", second.output)
        self.assertEqual(second.ended.result, 0)

    async def test_stopped_for_good_reports_missing(self) -> None:
        """A mirror stopped for good halfway through a topic: the audit of B exits 1 and reports, per window,
        exactly the messages B does not have."""
        # Enough that the mirror (10 messages in flight, each batch acknowledged after a flush of about a
        # millisecond) is still copying when it is killed: 2,000 were all copied before the kill at times.
        lines = [b"order %d" % i for i in range(20000)]
        await produce(self.a, "orders", lines, "--audit", "--audit-window-s", "1", "--batch-size", "50")
        events = start_mirror(self, "--from", self.a, "--to", self.b, "--whitelist", "twlog-audit",
                              "--group", "events-only", "--status-interval", "0.2")
        await events.said(r"twlog-audit \d")
        halfway = start_mirror(self, "--from", self.a, "--to", self.b, "--whitelist", "orders", "--batch-size", "10",
                               "--max-in-flight", "10", "--status-interval", "0.2")
        await halfway.said(r"mirror status: .*orders (\d{3}|\d{1,3}(,\d{3})+) \(")
        await halfway.kill("KILL")
        await events.kill("TERM")

        status, source, _ = await audit_json(self.a, "orders", "--grace-s", "0")
        self.assertEqual(status, 0, source)
        status, target, err = await audit_json(self.b, "orders", "--grace-s", "0")
        self.assertEqual(status, 1, err)
        received = per_window(await topic_values(self.b, "orders"), 1000)
        self.assertLess(sum(len(seen) for seen in received.values()), len(lines))
        expected = {w["window_start_ms"]: w["expected"] for w in source}
        self.assertEqual(
            {w["window_start_ms"]: w["missing"] for w in target},
            {start: n - len(received.get(start, ())) for start, n in expected.items()},
        )
        self.assertTrue(any(w["status"] == "missing" for w in target))


class RefusalTests(TestCase):
    timeout = 120

    async def test_refusals(self) -> None:
        """Same cluster, an unreachable cluster, a bad regular expression: one line each and a non-zero exit."""
        a = await local_cluster(self, "a")
        status, _, err = await twlog("mirror", "--from", a, "--to", a)
        self.assertEqual(status, 1)
        one_line(self, err)
        self.assertIn(b"the same cluster", err)
        port = a.rsplit(":", 1)[1]
        status, _, err = await twlog("mirror", "--from", f"localhost:{port}", "--to", f"127.0.0.1:{port}")
        self.assertEqual(status, 1)
        self.assertIn(b"the same cluster", err)
        nobody = f"127.0.0.1:{free_port()}"
        status, _, err = await twlog("mirror", "--from", a, "--to", nobody)
        self.assertEqual(status, 1)
        one_line(self, err)
        self.assertIn(nobody.encode(), err)
        status, _, err = await twlog("mirror", "--from", a, "--to", nobody, "--whitelist", "clicks(")
        self.assertEqual(status, 2)
        one_line(self, err)
        self.assertIn(b"'clicks(' is not a regular expression", err)


class SharedMirrorTests(TestCase):
    timeout = 300

    async def test_two_mirrors_share_and_the_target_goes_away(self) -> None:
        """Two mirrors with one group share the partitions (owners from both processes); when the target stops,
        they say so once each and hold the messages; when it is back, they resume and B's audit is complete."""
        a = await local_cluster(self, "a")
        target: list = []
        b = await local_cluster(self, "b", target)
        args = ("--from", a, "--to", b, "--group", "shared", "--whitelist", "shared|twlog-audit",
                "--status-interval", "0.5", "--debug")
        mirrors = [start_mirror(self, *args), start_mirror(self, *args)]
        await produce(a, "shared", [b"one %d" % i for i in range(1000)], "--audit", "--audit-window-s", "1")
        for mirror in mirrors:
            await mirror.said(r"copying topic shared from")

        async def shared_by_both():
            """both mirror processes own partitions of the topic"""
            _, out, _ = await twlog("groups", "--zookeeper", a, "--group", "shared", "--json")
            owners = {p["owner"].rsplit("-", 2)[0] for g in json.loads(out or b"[]") for p in g["partitions"]
                      if p["topic"] == "shared" and p["owner"]}
            return len(owners) == 2

        await until(shared_by_both)

        async def received(n: int):
            status, windows, _ = await audit_json(b, "shared", "--grace-s", "0")
            return status == 0 and sum(w["received"] for w in windows) == n

        await until(lambda: received(1000))

        local, transport, local_args = target[0]
        transport.signalProcess("INT")  # the target goes away
        await local.ended
        await produce(a, "shared", [b"two %d" % i for i in range(500)], "--audit", "--audit-window-s", "1",
                      "--batch-size", "10")  # (batches go to random partitions: some to each mirror)
        for mirror in mirrors:
            await mirror.said(r"the target cannot take", timeout_s=120)
        again = LocalProcess()
        self.addCleanup(lambda: again.ended.called or again_transport.signalProcess("KILL") or again.ended)
        again_transport = reactor.spawnProcess(again, sys.executable,
                                               [sys.executable, "-m", "twlog.cli", "local", *local_args],
                                               env=os.environ.copy())
        await again.ready
        await until(lambda: received(1500))
        for mirror in mirrors:
            self.assertEqual(mirror.output.count(b"the target cannot take"), 1, mirror.output)
            await mirror.said(r"acknowledges again")


class DeadSourceBrokerTests(TestCase):
    """A source broker killed under a running mirror: its partitions are never left out in silence (issue 20)."""

    timeout = 240

    async def test_mirror_names_the_dead_broker_and_copies_the_rest(self) -> None:
        """Once the killed broker's session has expired, the mirror says once per rebalance that no member can
        read its partitions, naming it, and each status line's lag says what it leaves out; the live broker's
        messages, old and new, are copied."""
        data = os.path.abspath(self.mktemp())
        local, transport = start_local(self, "--brokers", "2", "--data", data, "--port", str(free_ports(2)),
                                       "--zookeeper-port", str(free_port()), "--no-metrics", "--flush-interval-ms",
                                       "50")
        zk_port, _ = banner_ports(await local.ready)
        source = f"127.0.0.1:{zk_port}"
        target = await local_cluster(self, "target")
        status, _, err = await twlog("topics", "create", "-z", source, "-t", "clicks", "-n", "2")
        self.assertEqual(status, 0, err)
        for partition in ("0-0", "1-0"):
            await produce(source, "clicks", [b"%s %d" % (partition.encode(), i) for i in range(20)], "-p", partition)
        mirror = start_mirror(self, "--from", source, "--to", target, "--whitelist", "clicks",
                              "--status-interval", "0.5")

        async def copied(count: int) -> bool:
            return len(await topic_values(target, "clicks")) == count

        await until(lambda: copied(40))
        brokers = {int(command_line(p)[command_line(p).index("--broker-id") + 1]): p
                   for p in child_pids(transport.pid) if "--broker-id" in command_line(p)}
        os.kill(brokers[1], signal.SIGKILL)
        down = "broker 1, which holds clicks:1-0..1-1, is not registered: down?"
        await mirror.said(re.escape(f"cannot be read by any member: {down}"), timeout_s=60)
        await mirror.said(re.escape(f"(leaves out clicks:1-0..1-1: {down})"), timeout_s=30)
        await produce(source, "clicks", [b"0-1 %d" % i for i in range(10)], "-p", "0-1")
        await until(lambda: copied(50))
        self.assertNotIn(b"Traceback", mirror.output)
