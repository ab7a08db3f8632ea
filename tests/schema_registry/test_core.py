"""Two registry processes on one topic agree on ids: a record that lost to an earlier one is planned again."""

from twisted.internet.task import Clock
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
            self.assertEqual(registry.state.schemas, {1: B.text, 2: A.text})
        fresh = SchemaRegistry(FakeJournal(topic), reactor=Clock())  # a restart replays to the same state
        self.successResultOf(fresh.sync())
        self.assertEqual(fresh.state.schemas, {1: B.text, 2: A.text})

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
