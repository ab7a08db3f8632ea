"""Two registry processes on one topic agree on ids: a record that lost to an earlier one is planned again."""

from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from tests.schema_registry.support import FakeJournal, Topic
from twlog.avro.schema import AvroSchema
from twlog.schema_registry.core import ATTEMPTS, SchemaRegistry
from twlog.schema_registry.errors import RestError

A = AvroSchema.parse('{"type":"enum","name":"A","symbols":["X"]}')
B = AvroSchema.parse('{"type":"enum","name":"B","symbols":["X"]}')


def plan(subject, schema):
    def register(state):
        schema_id, record = state.plan_register(subject, schema)
        return {"id": schema_id}, record

    return register


class AgreementTests(SynchronousTestCase):
    def test_conflicting_writer_plans_again(self) -> None:
        """A planned id 1 and waits; B writes id 1 first; A's record is refused everywhere and A answers id 2."""
        topic = Topic()
        first, second = FakeJournal(topic), FakeJournal(topic)
        a, b = SchemaRegistry(first, reactor=Clock()), SchemaRegistry(second, reactor=Clock())
        first.hold = True
        answer_a = a.write(plan("sa", A))
        self.assertNoResult(answer_a)
        self.assertEqual(self.successResultOf(b.write(plan("sb", B))), {"id": 1})
        first.hold = False
        first.release()
        self.assertEqual(self.successResultOf(answer_a), {"id": 2})
        self.assertEqual([r["id"] for r in topic.records], [1, 1, 2])  # the refused record stays, ignored
        for registry in (a, b):
            self.successResultOf(registry.sync())
            self.assertEqual(registry.state.schemas, {1: B.confluent, 2: A.confluent})
        fresh = SchemaRegistry(FakeJournal(topic), reactor=Clock())  # a restart replays to the same state
        self.successResultOf(fresh.sync())
        self.assertEqual(fresh.state.schemas, {1: B.confluent, 2: A.confluent})

    def test_same_schema_from_both(self) -> None:
        """Both register the same schema under one subject at once: one version, one id, both answered it."""
        topic = Topic()
        first, second = FakeJournal(topic), FakeJournal(topic)
        a, b = SchemaRegistry(first, reactor=Clock()), SchemaRegistry(second, reactor=Clock())
        first.hold = True
        answer_a = a.write(plan("s", A))
        self.assertEqual(self.successResultOf(b.write(plan("s", A))), {"id": 1})
        first.hold = False
        first.release()
        self.assertEqual(self.successResultOf(answer_a), {"id": 1})
        self.assertEqual([v.version for v in a.state.versions("s")], [1])

    def test_gives_up_after_attempts(self) -> None:
        """A writer that keeps losing answers 50001 after ATTEMPTS tries, not forever."""
        topic = Topic()
        topic.records.append({"op": "config", "subject": None, "compatibility": "NONE"})
        journal = FakeJournal(topic)
        registry = SchemaRegistry(journal, reactor=Clock())
        original = journal.append

        async def losing(record):
            other = f'{{"type":"enum","name":"Z{len(topic.records)}","symbols":["X"]}}'
            topic.records.append(dict(record, schema=other))  # another writer's record takes the id first
            return await original(record)

        journal.append = losing
        failure = self.failureResultOf(registry.write(plan("s", A)), RestError)
        self.assertEqual(failure.value.code, 50001)
        self.assertEqual(len(topic.records), 1 + 2 * ATTEMPTS)


def lines(events) -> list[str]:
    return [formatEvent(event) for event in events if event["log_namespace"].startswith("twlog.schema_registry")]


class ClusterLostTests(SynchronousTestCase):
    """The cluster holding the journal goes away: reads from memory at once, writes bounded, one line each way."""

    def setUp(self) -> None:
        self.topic = Topic()
        self.journal = FakeJournal(self.topic)
        self.clock = Clock()
        self.registry = SchemaRegistry(self.journal, reactor=self.clock, timeout_s=5)
        self.assertEqual(self.successResultOf(self.registry.write(plan("s", A))), {"id": 1})

    def subjects(self):
        return self.registry.read(lambda state: state.subject_names())

    def test_hung_cluster(self) -> None:
        """The cluster takes connections and never answers: the first read waits the request timeout and is
        answered from memory; later reads at once, without asking it; a write fails 50002 in the timeout."""
        self.topic.hung = True
        first = self.subjects()
        self.clock.advance(4.9)
        self.assertNoResult(first)
        with capturedLogs() as events:
            self.clock.advance(0.1)
        self.assertEqual(self.successResultOf(first), ["s"])
        self.assertEqual(lines(events), [
            "lost the twlog cluster holding twlog-schemas: the twlog cluster did not answer within 5 s "
            "(--request-timeout); reads are answered from memory (1 schema(s), 1 subject(s)) and writes fail with 500 "
            "until it is back (trying again quietly)"])
        reads = self.journal.calls["read_new"]
        self.assertEqual(self.successResultOf(self.subjects()), ["s"])  # at once
        self.assertEqual(self.journal.calls["read_new"], reads)
        written = self.registry.write(plan("t", B))
        self.clock.advance(4.9)
        self.assertNoResult(written)
        self.clock.advance(0.1)
        failure = self.failureResultOf(written, RestError)
        self.assertEqual((failure.value.status, failure.value.code), (500, 50002))

    def test_dropped_connection_refused(self) -> None:
        """The journal's connection drops and the broker refuses a new one: lost at once (no request waits);
        tried again quietly with backoff; one line when lost, one when back, and reads are current again."""
        self.topic.down = True
        with capturedLogs() as events:
            self.journal.drop()
            self.assertEqual(self.successResultOf(self.subjects()), ["s"])  # from memory, at once
            failure = self.failureResultOf(self.registry.write(plan("t", B)), RestError)  # refused at once
            self.assertEqual((failure.value.status, failure.value.code), (500, 50001))
            self.assertIn("Connection refused", failure.value.message)
            for _ in range(120):  # a minute of retries
                self.clock.advance(0.5)
            probes = self.journal.calls["probe"]
            self.assertLess(probes, 15)  # backoff: 0.5 s doubling up to 10 s, not one a turn
            self.topic.down = False
            self.topic.records.append({"op": "config", "subject": "t", "compatibility": "NONE"})  # another's write
            self.clock.advance(10)
        self.assertEqual(lines(events), [
            "lost the twlog cluster holding twlog-schemas: the connection to broker 0 at 127.0.0.1:9092 dropped, and "
            "cannot connect to 127.0.0.1:9092: Connection refused; reads are answered from memory (1 schema(s), "
            "1 subject(s)) and writes fail with 500 until it is back (trying again quietly)",
            "the twlog cluster is back after 70 s: twlog-schemas read to offset 2 (1 schema(s), 1 subject(s)); "
            "writes are taken again"])
        self.assertIsNone(self.registry.lost)
        self.assertEqual(self.registry.state.level("t"), "NONE")  # what was written meanwhile is read
        self.assertEqual(self.successResultOf(self.registry.write(plan("t", B))), {"id": 2})

    def test_write_brings_it_back(self) -> None:
        """A write while lost tries the cluster at once: if it is back, the write is taken."""
        self.topic.down = True
        self.journal.drop()
        self.topic.down = False
        self.assertEqual(self.successResultOf(self.registry.write(plan("t", B))), {"id": 2})
        self.assertIsNone(self.registry.lost)

    def test_never_read(self) -> None:
        """Started while the cluster is down: nothing in memory to answer from, so reads are 500 (50001) at once."""
        self.topic.down = True
        registry = SchemaRegistry(FakeJournal(self.topic), reactor=self.clock, timeout_s=5)
        self.assertFalse(self.successResultOf(registry.start()))
        failure = self.failureResultOf(registry.read(lambda state: state.subject_names()), RestError)
        self.assertEqual((failure.value.status, failure.value.code), (500, 50001))
        self.assertIn("twlog-schemas could not be read yet: cannot connect", failure.value.message)
        self.topic.down = False
        self.clock.advance(0.5)
        self.assertEqual(self.successResultOf(registry.read(lambda state: state.subject_names())), ["s"])
        registry.stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])
