"""`twlog produce --audit`, `twlog audit`, `twlog consume --audit` and the Spark source's envelope option on a real
`twlog local` cluster: the same counting from the command and from a DataFrame."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import SkipTest, TestCase

from tests.integration.mirroring import audit_json, produce, shared_local_cluster, topic_values
from tests.integration.spark import spark_call, spark_session
from tests.integration.test_cli import one_line, twlog
from twlog.audit import audit_dataframe
from twlog.envelope import AUDIT_TOPIC, decode_event, open_envelope


class AuditCommandTests(TestCase):
    timeout = 240

    async def setUp(self) -> None:
        # One cluster for the module (its start is seconds of JVM and Python): each test has topics of its own, and
        # what each reads of the shared twlog-audit topic is its topics' events.
        self.zk = await shared_local_cluster("audit")

    async def test_audit_of_an_instrumented_topic(self) -> None:
        """Every message of an instrumented producer is in an envelope, the monitoring events count them per window,
        and the audit finds every closed window complete (exit 0); consume --audit prints the original lines."""
        lines = [b"payment %d" % i for i in range(500)]
        await produce(self.zk, "payments", lines, "--audit", "--audit-window-s", "1", "--audit-origin", "shop",
                      "--batch-size", "20")
        stored = await topic_values(self.zk, "payments")
        envelopes = [open_envelope(v) for v in stored]
        self.assertEqual(sorted(e.payload for e in envelopes), sorted(lines))
        self.assertEqual({e.origin for e in envelopes}, {"shop"})
        self.assertEqual(sorted(e.sequence for e in envelopes), list(range(500)))
        events = [decode_event(v) for v in await topic_values(self.zk, AUDIT_TOPIC)]
        self.assertEqual(sum(e.count for e in events if e.topic == "payments"), 500)

        status, windows, err = await audit_json(self.zk, "payments", "--grace-s", "0")
        self.assertEqual(status, 0, err)
        self.assertEqual(sum(w["received"] for w in windows), 500)
        self.assertTrue(all(w["status"] == "complete" and w["missing"] == 0 and w["duplicated"] == 0
                            for w in windows), windows)
        self.assertTrue(all(set(w["age_at_audit_ms"]) == {"p50", "p90", "p99"} for w in windows))
        # Read after they arrived: their delivery delay is not known, and not passed off as the age.
        self.assertTrue(all(w["delivery_delay_ms"] is None and w["delivered"] == 0 for w in windows), windows)

        # A long grace: the same windows are pending, not missing; still exit 0.
        status, windows, _ = await audit_json(self.zk, "payments", "--grace-s", "3600")
        self.assertEqual(status, 0)
        self.assertEqual({w["status"] for w in windows}, {"pending"})

        status, out, err = await twlog("audit", "--zookeeper", self.zk, "--topic", "payments", "--grace-s", "0")
        self.assertEqual(status, 0, err)
        self.assertIn(b"complete", out)
        self.assertIn(b"0 with missing messages", err)

        status, out, err = await twlog("consume", "--zookeeper", self.zk, "--topic", "payments", "--audit")
        self.assertEqual(status, 0, err)
        self.assertEqual(sorted(out.splitlines()), sorted(lines))

        await self._same_counting_in_spark(windows=await audit_json(self.zk, "payments", "--grace-s", "0"))

    async def test_delivery_delay_while_following(self) -> None:
        """--follow-s: messages produced while the audit follows the topic get a delivery delay (creation to
        arrival, under a few seconds on one machine), well below their age at the audit; the messages that were
        there before it looked have none."""
        await produce(self.zk, "orders", [b"before %d" % i for i in range(50)], "--audit", "--audit-window-s", "1",
                      "--audit-origin", "shop")
        await deferLater(reactor, 3, lambda: None)  # the next messages are created in later windows
        following = Deferred.fromCoroutine(audit_json(self.zk, "orders", "--grace-s", "0", "--follow-s", "12"))
        await deferLater(reactor, 4, lambda: None)  # the audit has started, read the topic, and follows it
        await produce(self.zk, "orders", [b"during %d" % i for i in range(50)], "--audit", "--audit-window-s", "1",
                      "--audit-origin", "shop")
        status, windows, err = await following
        self.assertEqual(status, 0, err)
        self.assertEqual(sum(w["received"] for w in windows), 100)
        self.assertEqual(sum(w["delivered"] for w in windows), 50, windows)
        before = [w for w in windows if w["delivered"] == 0]
        during = [w for w in windows if w["delivered"]]
        self.assertEqual(sum(w["received"] for w in before), 50)
        self.assertTrue(all(w["delivery_delay_ms"] is None for w in before))
        for w in during:
            self.assertEqual(w["delivered"], w["received"])
            self.assertLess(w["delivery_delay_ms"]["p99"], 5000, w)
        self.assertGreater(min(w["age_at_audit_ms"]["p50"] for w in before),
                           max(w["delivery_delay_ms"]["p99"] for w in during))

    async def _same_counting_in_spark(self, windows) -> None:
        """twlog.audit.audit_dataframe over the source's envelope columns counts as twlog audit does."""
        try:
            spark = spark_session()
        except ImportError:
            raise SkipTest("pyspark is not installed") from None
        def run():
            reader = spark.read.format("twlog").option("zookeeper", self.zk)
            df = reader.option("subscribe", "payments").option("envelope", "true").load()
            events = spark.read.format("twlog").option("zookeeper", self.zk).option("subscribe", AUDIT_TOPIC).load()
            rows = df.select("value", "origin", "created_ms", "sequence").collect()
            return rows, audit_dataframe(df, events, grace_s=0)

        rows, reports = await spark_call(run)
        self.assertEqual({r["origin"] for r in rows}, {"shop"})
        self.assertEqual(sorted(bytes(r["value"]) for r in rows), sorted(b"payment %d" % i for i in range(500)))
        self.assertTrue(all(r["created_ms"] > 0 for r in rows))
        _, cli, _ = windows
        fields = ("window_start_ms", "origin", "expected", "received", "missing", "duplicated", "status")
        self.assertEqual([tuple(r.as_json()[f] for f in fields) for r in reports],
                         [tuple(w[f] for f in fields) for w in cli])

    async def test_errors_in_one_line(self) -> None:
        """An un-instrumented topic, a topic that does not exist, a window that is not a multiple of the producers'."""
        await produce(self.zk, "plain", [b"a", b"b"])
        status, _, err = await twlog("audit", "--zookeeper", self.zk, "--topic", "plain")
        self.assertEqual(status, 1)
        one_line(self, err)
        self.assertIn(b"topic 'plain' is not instrumented: none of its 2 messages", err)

        status, _, err = await twlog("audit", "--zookeeper", self.zk, "--topic", "nosuch")
        self.assertEqual(status, 1)
        one_line(self, err)
        self.assertIn(b"'nosuch' does not exist", err)

        await produce(self.zk, "timed", [b"x"], "--audit", "--audit-window-s", "2")
        status, _, err = await twlog("audit", "--zookeeper", self.zk, "--topic", "timed", "--window-s", "3")
        self.assertEqual(status, 2)
        one_line(self, err)
        self.assertIn(b"not a multiple of the 2 s window", err)

        status, _, err = await twlog("audit", "--zookeeper", self.zk, "--topic", "timed", "--since", "yesterday")
        self.assertEqual(status, 2)
        one_line(self, err)
