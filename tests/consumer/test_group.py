"""GroupConsumer's state machine, deterministic: every transition on a FakeZooKeeper, a task.Clock and stub fetchers.

The fetch loops are stubs (a L{StubFetcher} per broker, recording the
partitions it was given): these tests are about membership, ownership,
offsets and states.  Fetching itself is tested in C{tests.consumer.test_stream}.
"""

from __future__ import annotations

import json
import random

from twisted.internet.defer import succeed
from twisted.internet.task import Clock
from twisted.logger import LogLevel, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper, FakeZooKeeperServer
from twlog.consumer.group import GroupConsumer, GroupState
from twlog.consumer.rebalancer import GROUP_MOVES
from twlog.coord import paths
from twlog.errors import ClientClosed, RebalanceFailed
from twlog.statemachine import IllegalTransition, StateMachine
from twlog.storage.message import MessageAndOffset

S = GroupState


class StubFetcher:
    """A fetch loop that fetches nothing: it records its broker and partitions, and whether it runs."""

    def __init__(self, broker_id: int, address: tuple[str, int], partitions: list) -> None:
        self.broker_id = broker_id
        self.address = address
        self.partitions = partitions
        self.running = False

    def start(self) -> None:
        self.running = True

    def stop(self):
        self.running = False
        return succeed(None)


class GroupTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.server = FakeZooKeeperServer()
        self.zk = FakeZooKeeper(self.server)
        self.zk.start()
        self.admin = FakeZooKeeper(self.server)  # brokers, other members, and reads
        self.admin.start()
        self.fetchers: list[StubFetcher] = []
        self.register_broker(0, {"t": 4})

    # -- the cluster ----------------------------------------------------------------------------

    def register_broker(self, broker_id: int, topics: dict[str, int]) -> None:
        self.successResultOf(self.admin.create(paths.broker_id_path(broker_id), f"h{broker_id}:9092".encode(),
                                               ephemeral=True, makepath=True))
        for topic, count in topics.items():
            self.successResultOf(self.admin.create(paths.broker_topic_path(topic, broker_id), str(count).encode(),
                                                   ephemeral=True, makepath=True))

    def add_member(self, consumer_id: str, subscription: dict[str, int], zk: FakeZooKeeper | None = None) -> None:
        """A member that registers and never claims anything."""
        self.successResultOf((zk or self.admin).create(
            paths.consumer_ids_path("g", consumer_id), json.dumps(subscription).encode(), ephemeral=True,
            makepath=True))

    def remove_member(self, consumer_id: str) -> None:
        self.successResultOf(self.admin.delete(paths.consumer_ids_path("g", consumer_id)))

    def value(self, path: str) -> bytes | None:
        stat = self.successResultOf(self.admin.exists(path))
        return None if stat is None else self.successResultOf(self.admin.get(path))[0]

    def owner(self, name: str, topic: str = "t") -> tuple[bytes, int] | None:
        stat = self.successResultOf(self.admin.exists(paths.owner_path("g", topic, name)))
        return None if stat is None else (self.value(paths.owner_path("g", topic, name)), stat.ephemeralOwner)

    # -- the consumer ---------------------------------------------------------------------------

    def factory(self, broker_id: int, address: tuple[str, int], partitions: list) -> StubFetcher:
        fetcher = StubFetcher(broker_id, address, partitions)
        self.fetchers.append(fetcher)
        return fetcher

    def consumer(self, consumer_id: str = "a", zk: FakeZooKeeper | None = None, **options) -> GroupConsumer:
        options = {"auto_commit_interval_ms": 0, "rebalance_max_retries": 3, "rebalance_backoff_ms": 500,
                   "session_timeout_s": 6.0, **options}
        consumer = GroupConsumer(zk or self.zk, "g", reactor=self.clock, consumer_id=consumer_id,
                                 fetcher_factory=self.factory, rng=random.Random(1), **options)
        self.addCleanup(consumer.close)
        return consumer

    def joined(self, consumer_id: str = "a", subscription=None, **options) -> tuple[GroupConsumer, dict]:
        consumer = self.consumer(consumer_id, **options)
        streams = self.successResultOf(consumer.create_message_streams(subscription or {"t": 1}))
        return consumer, streams

    def running_fetchers(self) -> dict[int, list[str]]:
        return {f.broker_id: [p.name for p in f.partitions] for f in self.fetchers if f.running}


class JoiningTests(GroupTestCase):
    def test_start_registers_and_rebalances(self) -> None:
        """NEW -> REBALANCING -> STABLE: registered with the subscription, every partition claimed, fetching."""
        consumer = self.consumer()
        self.assertIs(consumer.state, S.NEW)
        streams = self.successResultOf(consumer.create_message_streams({"t": 2}))
        self.assertIs(consumer.state, S.STABLE)
        self.assertEqual([s.stream_id for s in streams["t"]], ["a-0", "a-1"])
        self.assertEqual(json.loads(self.value(paths.consumer_ids_path("g", "a"))), {"t": 2})
        self.assertEqual(consumer.owned(), {"t": {"0-0": "a-0", "0-1": "a-0", "0-2": "a-1", "0-3": "a-1"}})
        self.assertEqual(self.owner("0-3"), (b"a-1", self.zk.session_id))
        self.assertEqual(self.running_fetchers(), {0: ["0-0", "0-1", "0-2", "0-3"]})
        self.assertEqual(self.fetchers[0].address, ("h0", 9092))
        self.assertEqual((consumer.rebalances, consumer.retries), (1, 0))

    def test_register_waits_for_own_stale_node(self) -> None:
        """A member node of this id held by another session is waited for, then taken."""
        stale = FakeZooKeeper(self.server)
        stale.start()
        self.add_member("a", {"t": 1}, zk=stale)
        consumer = self.consumer()
        d = consumer.create_message_streams({"t": 1})
        self.assertNoResult(d)
        stale.expire()
        self.clock.advance(5)
        self.successResultOf(d)
        self.assertIs(consumer.state, S.STABLE)

    def test_register_gives_up(self) -> None:
        """A member node of this id held for good by another session: create_message_streams fails."""
        self.add_member("a", {"t": 1})
        d = self.consumer().create_message_streams({"t": 1})
        for _ in range(5):
            self.clock.advance(5)
        self.failureResultOf(d, RebalanceFailed)

    def test_committed_offsets_are_where_fetching_starts(self) -> None:
        """A partition with a committed offset is fetched from it; one without asks the broker (None)."""
        self.successResultOf(self.admin.set_or_create(paths.offset_path("g", "t", "0-1"), b"42"))
        consumer, _ = self.joined()
        offsets = {p.name: p.fetch_offset for p in self.fetchers[0].partitions}
        self.assertEqual(offsets, {"0-0": None, "0-1": 42, "0-2": None, "0-3": None})

    def test_second_call_refused(self) -> None:
        """create_message_streams is called once."""
        consumer, _ = self.joined()
        self.failureResultOf(consumer.create_message_streams({"t": 1}), ValueError)


class RebalanceTests(GroupTestCase):
    def test_member_joins_and_leaves(self) -> None:
        """STABLE -> REBALANCING -> STABLE when a member joins (half each) and when it leaves (all again)."""
        consumer, _ = self.joined()
        self.add_member("b", {"t": 1})
        self.assertIs(consumer.state, S.STABLE)
        self.assertEqual(consumer.owned(), {"t": {"0-0": "a-0", "0-1": "a-0"}})
        self.assertIsNone(self.owner("0-2"))
        self.assertEqual(self.running_fetchers(), {0: ["0-0", "0-1"]})
        self.remove_member("b")
        self.assertEqual(sorted(consumer.owned()["t"]), ["0-0", "0-1", "0-2", "0-3"])
        self.assertEqual(consumer.rebalances, 3)

    def test_two_consumers_share(self) -> None:
        """Two group consumers on their own sessions split the partitions, each owning its range."""
        a, _ = self.joined("a")
        other = FakeZooKeeper(self.server)
        other.start()
        b = self.consumer("b", zk=other)
        self.successResultOf(b.create_message_streams({"t": 1}))
        self.assertEqual((a.state, b.state), (S.STABLE, S.STABLE))
        self.assertEqual(a.owned(), {"t": {"0-0": "a-0", "0-1": "a-0"}})
        self.assertEqual(b.owned(), {"t": {"0-2": "b-0", "0-3": "b-0"}})
        self.assertEqual(self.owner("0-2"), (b"b-0", other.session_id))

    def test_broker_topic_change(self) -> None:
        """A broker registering the topic brings its partitions in; a broker leaving takes them away."""
        consumer, _ = self.joined()
        broker = FakeZooKeeper(self.server)
        broker.start()
        self.successResultOf(broker.create(paths.broker_id_path(1), b"h1:9092", ephemeral=True))
        self.successResultOf(broker.create(paths.broker_topic_path("t", 1), b"2", ephemeral=True))
        self.assertEqual(sorted(consumer.owned()["t"]), ["0-0", "0-1", "0-2", "0-3", "1-0", "1-1"])
        self.assertEqual(self.running_fetchers(), {0: ["0-0", "0-1", "0-2", "0-3"], 1: ["1-0", "1-1"]})
        self.successResultOf(broker.stop())
        self.assertEqual(sorted(consumer.owned()["t"]), ["0-0", "0-1", "0-2", "0-3"])
        self.assertIs(consumer.state, S.STABLE)

    def test_changes_during_a_rebalance_coalesce(self) -> None:
        """Events during a rebalance cause exactly one more rebalance after it, whatever their number."""
        consumer, _ = self.joined()
        self.zk.hold()  # the consumer's ZooKeeper answers slowly
        self.add_member("b", {"t": 1})  # starts rebalance 2
        self.assertTrue(consumer.rebalancing)
        self.register_broker(1, {"t": 2})
        self.add_member("c", {"t": 1})
        self.remove_member("c")
        self.zk.flush()
        self.assertFalse(consumer.rebalancing)
        self.assertEqual(consumer.rebalances, 3)
        self.assertIs(consumer.state, S.STABLE)
        self.assertEqual(consumer.owned(), {"t": {"0-0": "a-0", "0-1": "a-0", "0-2": "a-0"}})

    def test_rebalance_drops_fetched_data_and_commits(self) -> None:
        """A rebalance drops what was fetched and not handed out, and commits what was."""
        consumer, streams = self.joined()
        [stream] = streams["t"]
        owned = self.fetchers[0].partitions[0]
        stream.deliver(owned, (MessageAndOffset(0, 10, b"x"), MessageAndOffset(10, 20, b"y")))
        message = self.successResultOf(stream.__anext__())
        self.assertEqual((message.partition.name, message.next_offset), ("0-0", 10))
        self.add_member("b", {"t": 1})
        self.assertEqual(stream.queued, 0)
        self.assertEqual(self.value(paths.offset_path("g", "t", "0-0")), b"10")
        self.assertEqual(self.fetchers[-1].partitions[0].fetch_offset, 10)


class ConflictTests(GroupTestCase):
    def hold_partition(self, name: str) -> FakeZooKeeper:
        other = FakeZooKeeper(self.server)
        other.start()
        self.successResultOf(other.create(paths.owner_path("g", "t", name), b"z-0", ephemeral=True, makepath=True))
        return other

    def test_conflict_backs_off_and_retries(self) -> None:
        """An owner node still held by another member: release all, back off, retry; STABLE once it goes."""
        other = self.hold_partition("0-2")
        consumer = self.consumer()
        d = consumer.create_message_streams({"t": 1})
        self.assertNoResult(d)
        self.assertIs(consumer.state, S.REBALANCING)
        self.assertEqual(consumer.retries, 1)
        self.assertEqual(consumer.owned(), {})
        self.assertIsNone(self.owner("0-0"))  # released while backing off
        self.successResultOf(other.delete(paths.owner_path("g", "t", "0-2")))
        self.clock.advance(2)
        self.successResultOf(d)
        self.assertIs(consumer.state, S.STABLE)
        self.assertEqual(len(consumer.owned()["t"]), 4)

    def test_bounded_retries_then_rebalance_failed(self) -> None:
        """After rebalance_max_retries attempts: FAILED, each stream raises RebalanceFailed once; a change retries."""
        other = self.hold_partition("0-2")
        consumer = self.consumer()
        d = consumer.create_message_streams({"t": 2})
        for _ in range(3):
            self.clock.advance(10)
        streams = self.successResultOf(d)
        self.assertIs(consumer.state, S.FAILED)
        self.assertEqual(consumer.retries, 2)
        self.failureResultOf(consumer.when_stable(), RebalanceFailed)
        for stream in streams["t"]:
            failure = self.failureResultOf(stream.__anext__(), RebalanceFailed)
            self.assertIn("could not rebalance in 3 attempts: owned by another consumer: t:0-2",
                          failure.getErrorMessage())
            waiting = stream.__anext__()
            self.assertNoResult(waiting)  # once
            waiting.addErrback(lambda f: f.trap(StopAsyncIteration))  # ends at close
        self.successResultOf(other.stop())
        self.add_member("b", {"t": 1})  # a change: FAILED -> REBALANCING -> STABLE
        self.assertIs(consumer.state, S.STABLE)

    def test_reconnecting_retries_a_failed_rebalance(self) -> None:
        """FAILED, then the session reconnects: it rebalances again."""
        other = self.hold_partition("0-0")
        consumer = self.consumer()
        d = consumer.create_message_streams({"t": 1})
        for _ in range(3):
            self.clock.advance(10)
        self.successResultOf(d)
        self.assertIs(consumer.state, S.FAILED)
        self.successResultOf(other.stop())
        self.zk.suspend()
        self.zk.reconnect()
        self.assertIs(consumer.state, S.STABLE)


class SessionTests(GroupTestCase):
    def test_suspended_then_reconnected(self) -> None:
        """A short connection loss changes nothing: still STABLE, same partitions."""
        consumer, _ = self.joined()
        self.zk.suspend()
        self.clock.advance(5)
        self.zk.reconnect()
        self.clock.advance(5)
        self.assertIs(consumer.state, S.STABLE)
        self.assertEqual(len(consumer.owned()["t"]), 4)
        self.assertEqual(consumer.rebalances, 1)

    def test_member_joins_while_disconnected(self) -> None:
        """The connection's loss drops the members watch; reconnected, a change made meanwhile is noticed."""
        consumer, _ = self.joined()
        self.zk.suspend()
        self.add_member("b", {"t": 1})
        self.assertEqual(len(consumer.owned()["t"]), 4)
        self.zk.reconnect()
        self.assertEqual(consumer.owned(), {"t": {"0-0": "a-0", "0-1": "a-0"}})
        self.add_member("c", {"t": 2})  # watching again
        self.assertEqual(consumer.owned(), {"t": {"0-0": "a-0"}})

    def test_out_of_touch_too_long(self) -> None:
        """Suspended for session_timeout_s: SESSION_LOST, nothing delivered; reconnected: rejoins, STABLE."""
        consumer, _ = self.joined()
        self.zk.suspend()
        self.clock.advance(6)
        self.assertIs(consumer.state, S.SESSION_LOST)
        self.assertEqual((consumer.owned(), self.running_fetchers()), ({}, {}))
        self.zk.reconnect()  # the same session, still alive
        self.assertIs(consumer.state, S.STABLE)
        self.assertEqual(self.owner("0-0"), (b"a-0", self.zk.session_id))

    def test_expired_then_rejoins(self) -> None:
        """Session expired: SESSION_LOST (member and owner nodes gone); a new session: registered again, STABLE."""
        consumer, _ = self.joined()
        self.zk.expire()
        self.assertIs(consumer.state, S.SESSION_LOST)
        self.assertEqual(consumer.owned(), {})
        self.assertIsNone(self.value(paths.consumer_ids_path("g", "a")))
        self.assertIsNone(self.owner("0-0"))
        self.zk.reconnect()
        self.assertIs(consumer.state, S.STABLE)
        self.assertIsNotNone(self.value(paths.consumer_ids_path("g", "a")))
        self.assertEqual(self.owner("0-0"), (b"a-0", self.zk.session_id))
        self.assertEqual(self.running_fetchers(), {0: ["0-0", "0-1", "0-2", "0-3"]})

    def test_expired_during_backoff(self) -> None:
        """The session expires while a rebalance backs off: the sleep ends, SESSION_LOST; rejoining retries."""
        other = FakeZooKeeper(self.server)
        other.start()
        self.successResultOf(other.create(paths.owner_path("g", "t", "0-1"), b"z-0", ephemeral=True, makepath=True))
        consumer = self.consumer()
        consumer.create_message_streams({"t": 1})
        self.assertEqual(consumer.retries, 1)
        self.zk.expire()
        self.assertIs(consumer.state, S.SESSION_LOST)
        self.assertFalse(consumer.rebalancing)
        self.successResultOf(other.stop())
        self.zk.reconnect()
        self.assertIs(consumer.state, S.STABLE)

    def test_rejoin_fails(self) -> None:
        """Another session took the member id while the session was gone: FAILED, the streams are told."""
        consumer, streams = self.joined()
        self.zk.expire()
        self.add_member("a", {"t": 1})
        self.zk.reconnect()
        for _ in range(4):
            self.clock.advance(10)
        self.assertIs(consumer.state, S.FAILED)
        failure = self.failureResultOf(streams["t"][0].__anext__(), RebalanceFailed)
        self.assertIn("could not rejoin group g", failure.getErrorMessage())
        self.assertEqual(len(self.flushLoggedErrors(RebalanceFailed)), 1)


class OffsetTests(GroupTestCase):
    def test_commit_writes_moved_offsets(self) -> None:
        """commit() writes each owned partition's consumed offset, only where it moved."""
        consumer, _ = self.joined()
        parts = {p.name: p for p in self.fetchers[0].partitions}
        parts["0-1"].consumed = 7
        self.successResultOf(consumer.commit())
        self.assertEqual(self.value(paths.offset_path("g", "t", "0-1")), b"7")
        self.assertIsNone(self.value(paths.offset_path("g", "t", "0-0")))
        self.admin.operations.clear()
        self.zk.operations.clear()
        self.successResultOf(consumer.commit())
        self.assertEqual(self.zk.operations, [])

    def test_autocommit(self) -> None:
        """With auto_commit_interval_ms, offsets are written on the clock."""
        consumer, _ = self.joined(auto_commit_interval_ms=1000)
        self.fetchers[0].partitions[2].consumed = 99
        self.clock.advance(1)
        self.assertEqual(self.value(paths.offset_path("g", "t", "0-2")), b"99")


class CloseTests(GroupTestCase):
    def test_close(self) -> None:
        """close: commit, release the owner nodes, deregister, stop fetching, end the streams; CLOSED."""
        consumer, streams = self.joined()
        self.fetchers[0].partitions[0].consumed = 5
        self.successResultOf(consumer.close())
        self.assertIs(consumer.state, S.CLOSED)
        self.assertEqual(self.value(paths.offset_path("g", "t", "0-0")), b"5")
        self.assertIsNone(self.owner("0-0"))
        self.assertIsNone(self.value(paths.consumer_ids_path("g", "a")))
        self.assertEqual(self.running_fetchers(), {})
        self.failureResultOf(streams["t"][0].__anext__(), StopAsyncIteration)
        self.failureResultOf(consumer.when_stable(), ClientClosed)
        self.assertTrue(self.zk.connected)  # a session given to it is not its to close

    def test_close_while_session_lost(self) -> None:
        """Closed while SESSION_LOST: nothing to release (the session's nodes went, or will go, with it)."""
        consumer, _ = self.joined()
        self.zk.suspend()
        self.clock.advance(6)
        self.successResultOf(consumer.close())
        self.assertIs(consumer.state, S.CLOSED)

    def test_close_during_backoff(self) -> None:
        """Closing a consumer that is backing off ends the rebalance and the join."""
        other = FakeZooKeeper(self.server)
        other.start()
        self.successResultOf(other.create(paths.owner_path("g", "t", "0-1"), b"z-0", ephemeral=True, makepath=True))
        consumer = self.consumer()
        d = consumer.create_message_streams({"t": 1})
        self.successResultOf(consumer.close())
        self.assertIs(consumer.state, S.CLOSED)
        self.successResultOf(d)
        self.assertIsNone(self.value(paths.consumer_ids_path("g", "a")))


class TransitionTableTests(GroupTestCase):
    """Every move of L{GROUP_MOVES}, made the way it happens (ZooKeeper events, conflicts, the clock, close)."""

    def setUp(self) -> None:
        super().setUp()
        self.moves: set[tuple[GroupState, GroupState]] = set()

        def observe(event: dict) -> None:
            if isinstance(event.get("source"), str) and str(event.get("machine", "")).startswith("group g member"):
                self.moves.add((S[event["source"]], S[event["target"]]))

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)

    def hold_partition(self, name: str) -> FakeZooKeeper:
        return ConflictTests.hold_partition(self, name)

    def failed(self, consumer_id: str) -> tuple[GroupConsumer, FakeZooKeeper]:
        other = self.hold_partition("0-0")
        consumer = self.consumer(consumer_id)
        d = consumer.create_message_streams({"t": 1})
        self.assertIs(consumer.state, S.REBALANCING)  # NEW -> REBALANCING
        for _ in range(3):
            self.clock.advance(10)
        self.successResultOf(d)
        self.assertIs(consumer.state, S.FAILED)  # REBALANCING -> FAILED
        return consumer, other

    def test_every_transition(self) -> None:
        """Each move of the table happens, and no move outside it."""
        # REBALANCING -> STABLE, STABLE -> REBALANCING, STABLE -> SESSION_LOST, SESSION_LOST -> REBALANCING,
        # STABLE -> CLOSED
        a, _ = self.joined("a")
        self.add_member("b", {"t": 1})
        self.zk.expire()
        self.assertIs(a.state, S.SESSION_LOST)
        self.zk.reconnect()
        self.assertIs(a.state, S.STABLE)
        self.successResultOf(a.close())
        self.remove_member("b")
        # NEW -> CLOSED
        self.successResultOf(self.consumer("n").close())
        # FAILED -> REBALANCING (a change) and FAILED -> CLOSED
        c, other = self.failed("c")
        self.successResultOf(other.stop())
        self.add_member("b", {"t": 1})
        self.assertIs(c.state, S.STABLE)
        self.remove_member("b")
        self.successResultOf(c.close())
        d, other = self.failed("d")
        self.successResultOf(d.close())
        self.assertIs(d.state, S.CLOSED)
        self.successResultOf(other.stop())
        # FAILED -> SESSION_LOST; SESSION_LOST -> FAILED (rejoining fails: the id is taken); SESSION_LOST -> CLOSED
        self.zk.expire()
        self.zk.reconnect()
        e, other2 = self.failed("e")
        self.zk.expire()
        self.assertIs(e.state, S.SESSION_LOST)
        self.add_member("e", {"t": 1})
        self.zk.reconnect()
        for _ in range(4):
            self.clock.advance(10)
        self.assertIs(e.state, S.FAILED)
        self.flushLoggedErrors(RebalanceFailed)
        self.zk.expire()
        self.assertIs(e.state, S.SESSION_LOST)
        self.successResultOf(e.close())
        # REBALANCING -> SESSION_LOST (the session expires while backing off), REBALANCING -> CLOSED
        self.zk.reconnect()
        self.remove_member("e")
        f = self.consumer("f")
        f.create_message_streams({"t": 1})
        self.zk.expire()
        self.assertIs(f.state, S.SESSION_LOST)
        self.successResultOf(f.close())
        self.zk.reconnect()
        g = self.consumer("g")
        g.create_message_streams({"t": 1})
        self.assertIs(g.state, S.REBALANCING)
        self.successResultOf(g.close())
        expected = set(StateMachine("g", S.NEW, GROUP_MOVES).transitions())
        self.assertEqual(self.moves, expected)

    def test_illegal_moves_raise(self) -> None:
        """Moves the table does not have raise IllegalTransition, and the state stays; no one assigns a state."""
        consumer, _ = self.joined()
        rebalancer = consumer.rebalancer
        self.assertRaises(IllegalTransition, rebalancer.join)  # only from NEW
        self.assertRaises(IllegalTransition, rebalancer.rejoined)  # only from SESSION_LOST
        self.assertRaises(IllegalTransition, rebalancer.rejoin_failed, RebalanceFailed("x"))  # no STABLE -> FAILED
        self.assertIs(consumer.state, S.STABLE)
        with self.assertRaises(AttributeError):
            consumer.state = S.CLOSED
        with self.assertRaises(AttributeError):
            rebalancer.state = S.CLOSED
        self.successResultOf(consumer.close())
        error = self.assertRaises(IllegalTransition, rebalancer.close)  # CLOSED is final
        self.assertEqual((error.source, error.target), (S.CLOSED, S.CLOSED))
        self.assertRaises(IllegalTransition, rebalancer.rejoined)


class OfflinePartitionTests(GroupTestCase):
    def test_partitions_of_a_down_broker_are_said(self) -> None:
        """A broker that held the topic (/twlog/held) and is gone: its partitions are read by no member, and each
        rebalance says so in a warning naming the broker and them."""
        self.successResultOf(self.admin.create(paths.held_path("t", 1), b"2", makepath=True))
        events: list[dict] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        consumer, _ = self.joined()
        self.assertEqual(sorted(consumer.owned()["t"]), ["0-0", "0-1", "0-2", "0-3"])
        warnings = [formatEvent(e) for e in events if e.get("log_level") == LogLevel.warn]
        self.assertIn("group g: 2 partition(s) cannot be read by any member: broker 1, which holds t:1-0..1-1, is "
                      "not registered: down?", warnings)


class AssignmentReportTests(GroupTestCase):
    """A member says (an info log line, and its assignment listeners) what it reads each time that changes."""

    def setUp(self) -> None:
        super().setUp()
        self.logged: list[str] = []

        def observe(event: dict) -> None:
            if event.get("log_level") is LogLevel.info and "change" in event:
                self.logged.append(formatEvent(event))

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)

    def listened(self, consumer_id: str = "a") -> tuple[GroupConsumer, list[str]]:
        consumer = self.consumer(consumer_id)
        changes: list[str] = []
        consumer.assignments.add_listener(lambda change: changes.append(change.describe()))
        self.successResultOf(consumer.create_message_streams({"t": 1}))
        return consumer, changes

    def test_rebalances_that_change_what_it_reads(self) -> None:
        """The first rebalance, a member joining and leaving, a broker coming: one line each; no change, no line."""
        consumer, changes = self.listened()
        self.add_member("b", {"t": 1})
        self.remove_member("b")
        self.register_broker(1, {"t": 2})
        self.assertEqual(changes, [
            "now reading t:0-0..0-3 (4 partitions)",
            "now reading t:0-0..0-1 (2 partitions), gave up t:0-2..0-3",
            "now reading t:0-0..0-3 (4 partitions)",
            "now reading t:{0-0..0-3, 1-0..1-1} (6 partitions)",
        ])
        self.assertEqual(self.logged, [f"consumer a of group g: {change}" for change in changes])
        rebalances = consumer.rebalances
        self.add_member("c", {"other": 1})  # a rebalance that changes nothing for this member
        self.assertEqual(consumer.rebalances, rebalances + 1)
        self.assertEqual(len(changes), 4)

    def test_nothing_to_read_and_session_lost(self) -> None:
        """A member left without partitions says so; losing the session gives everything up, with the reason."""
        for member in ("b", "c", "d", "e"):
            self.add_member(member, {"t": 1})
        consumer, changes = self.listened("z")  # sorted last of five members for four partitions
        self.assertEqual(changes, ["now reading no partitions"])
        for member in ("b", "c", "d", "e"):
            self.remove_member(member)
        self.zk.expire()
        self.assertEqual(changes[1:], [
            "now reading t:0-3 (1 partition)",  # b left (c leaving changes nothing for z)
            "now reading t:0-2..0-3 (2 partitions)",  # d left
            "now reading t:0-0..0-3 (4 partitions)",  # e left
            "now reading no partitions, gave up t:0-0..0-3 (the ZooKeeper session was lost)",
        ])

    def test_says_why_it_gave_up_a_down_brokers_partitions(self) -> None:
        """A broker that held the topic goes: each member says that no member can read its partitions and names
        the broker (not a bare 'gave up', which reads as if another member took them); once the broker is back,
        one more line each, without it."""
        self.register_broker(1, {"t": 2})
        self.successResultOf(self.admin.create(paths.held_path("t", 1), b"2", makepath=True))
        consumer, changes = self.listened()
        other, others = self.listened("c")
        self.assertEqual((changes[-1], others), ("now reading t:0-0..0-2 (3 partitions), gave up t:{0-3, 1-0..1-1}",
                                                 ["now reading t:{0-3, 1-0..1-1} (3 partitions)"]))
        for path in (paths.broker_id_path(1), paths.broker_topic_path("t", 1)):  # its session expired
            self.successResultOf(self.admin.delete(path))
        why = "no member can read 2 partitions: broker 1, which holds t:1-0..1-1, is not registered: down?"
        self.assertEqual(changes[-1], f"now reading t:0-0..0-1 (2 partitions), gave up t:0-2; {why}")
        self.assertEqual(others[-1], f"now reading t:0-2..0-3 (2 partitions), gave up t:1-0..1-1; {why}")
        self.assertEqual([line for line in changes + others if "can read" in line], [changes[-1], others[-1]])
        self.register_broker(1, {"t": 2})
        self.assertEqual((changes[-1], others[-1]), ("now reading t:0-0..0-2 (3 partitions)",
                                                     "now reading t:{0-3, 1-0..1-1} (3 partitions), gave up t:0-2"))
        self.assertIn(f"consumer c of group g: {others[-2]}", self.logged)


class ZooKeeperLossTests(GroupTestCase):
    """Offsets through a lost connection or session: committed first thing when the same session is back,
    never written after the session expired (another member may own the partitions by then)."""

    def consume(self, consumer: GroupConsumer, stream, name: str = "0-0", upto: int = 2) -> None:
        """Deliver C{upto} messages of 10 bytes to partition C{name} and take them (consumed: upto * 10)."""
        owned = consumer.rebalancer.consumption.owned[next(tp for tp in consumer.rebalancer.consumption.owned
                                                          if tp.name == name)]
        stream.deliver(owned, tuple(MessageAndOffset(n * 10, n * 10 + 10, b"x") for n in range(upto)))
        for _ in range(upto):
            self.successResultOf(stream.__anext__())

    def offset_writes(self, zk: FakeZooKeeper, name: str = "0-0") -> list[tuple[str, str]]:
        path = paths.offset_path("g", "t", name)
        return [(op, p) for op, p in zk.operations if p == path and op in ("set", "create")]

    def test_commits_first_when_the_connection_is_back(self) -> None:
        """Disconnected, the member hands nothing out (it could not commit it) and tries no commit; fetched
        messages wait in the stream.  Reconnected, its first request is the commit of what it handed out before
        the loss, before it reads the group again; then the waiting messages are handed out."""
        consumer, streams = self.joined(auto_commit_interval_ms=1000)
        [stream] = streams["t"]
        self.consume(consumer, stream, upto=2)  # consumed 20, not committed yet
        self.zk.suspend()
        self.zk.operations.clear()
        owned = self.fetchers[0].partitions[0]
        stream.deliver(owned, (MessageAndOffset(20, 30, b"z"),))  # fetching goes on
        waiting = stream.__anext__()
        self.clock.advance(3)  # three autocommit periods, out of touch
        self.assertNoResult(waiting)
        self.assertEqual((self.zk.operations, stream.queued, owned.consumed), ([], 1, 20))
        self.zk.reconnect()
        self.assertEqual(self.zk.operations[0], ("set", paths.offset_path("g", "t", "0-0")))
        self.assertIn(("children", paths.consumer_ids_path("g")), self.zk.operations[1:])
        self.assertEqual(self.value(paths.offset_path("g", "t", "0-0")), b"20")
        self.assertEqual(self.successResultOf(waiting).offset, 20)
        self.assertIs(consumer.state, S.STABLE)

    def test_out_of_touch_then_the_same_session(self) -> None:
        """Out of touch for the session timeout: it stops delivering and drops what was queued, but keeps the
        consumed offsets; the same session back, they are committed before it rebalances, and fetching
        resumes there."""
        consumer, streams = self.joined()
        [stream] = streams["t"]
        self.consume(consumer, stream, upto=3)
        self.zk.suspend()
        stream.deliver(self.fetchers[0].partitions[1], (MessageAndOffset(0, 10, b"y"),))
        self.clock.advance(6)
        self.assertIs(consumer.state, S.SESSION_LOST)
        self.assertEqual((consumer.owned(), stream.queued), ({}, 0))
        self.zk.operations.clear()
        self.zk.reconnect()
        self.assertEqual(self.zk.operations[0], ("set", paths.offset_path("g", "t", "0-0")))
        self.assertEqual(self.value(paths.offset_path("g", "t", "0-0")), b"30")
        self.assertIs(consumer.state, S.STABLE)
        offsets = {p.name: p.fetch_offset for p in self.fetchers[-1].partitions}
        self.assertEqual(offsets, {"0-0": 30, "0-1": None, "0-2": None, "0-3": None})

    def test_nothing_committed_after_expiry(self) -> None:
        """Out of touch, then its session expired: the partitions went to the other member, which commits its
        own offsets.  Back in a new session the member writes none of the offsets it consumed before: it
        rejoins and fetches from what the other member committed."""
        a, streams = self.joined("a")
        [stream] = streams["t"]
        other = FakeZooKeeper(self.server)
        other.start()
        b = self.consumer("b", zk=other)
        [b_stream] = self.successResultOf(b.create_message_streams({"t": 1}))["t"]
        self.assertEqual(sorted(a.owned()["t"]), ["0-0", "0-1"])
        self.consume(a, stream, upto=3)  # consumed 30, not committed
        self.zk.suspend()
        self.clock.advance(6)  # out of touch for the session timeout: stops, keeps the offsets
        self.zk.expire()  # and the server expires the session: a's owner nodes go; b takes everything
        self.assertEqual(sorted(b.owned()["t"]), ["0-0", "0-1", "0-2", "0-3"])
        self.consume(b, b_stream, upto=1)
        self.successResultOf(b.commit())
        self.assertEqual(self.value(paths.offset_path("g", "t", "0-0")), b"10")
        self.zk.operations.clear()
        self.zk.reconnect()  # a new session: a rejoins, and b hands 0-0..0-1 back
        self.successResultOf(a.commit())
        self.assertIs(a.state, S.STABLE)
        self.assertEqual(sorted(a.owned()["t"]), ["0-0", "0-1"])
        self.assertEqual(self.offset_writes(self.zk), [])
        self.assertEqual(self.value(paths.offset_path("g", "t", "0-0")), b"10")
        self.assertEqual({p.name: p.fetch_offset for p in self.fetchers[-1].partitions if p.name == "0-0"},
                         {"0-0": 10})

    def test_expired_while_disconnected(self) -> None:
        """The session expires before the member noticed it was out of touch too long: nothing of the old
        session is committed either."""
        consumer, streams = self.joined()
        [stream] = streams["t"]
        self.consume(consumer, stream, upto=2)
        self.zk.suspend()
        self.clock.advance(2)
        self.zk.expire()
        self.zk.operations.clear()
        self.zk.reconnect()
        self.assertEqual(self.offset_writes(self.zk), [])
        self.assertIsNone(self.value(paths.offset_path("g", "t", "0-0")))
        self.assertIs(consumer.state, S.STABLE)

    def test_acknowledged_while_out_of_touch(self) -> None:
        """With manual offsets, a message handed out before the loss and acknowledged while the member is out of
        touch (its target answered late) is committed when the same session is back; after an expiry such an
        acknowledgement is ignored."""
        consumer, streams = self.joined(manual_offsets=True)
        [stream] = streams["t"]
        self.consume(consumer, stream, upto=2)  # handed out, not acknowledged yet
        [partition] = [tp for tp in consumer.rebalancer.consumption.owned if tp.name == "0-0"]
        self.zk.suspend()
        self.clock.advance(6)  # SESSION_LOST, the offsets kept
        consumer.acknowledge_offset(partition, 20)
        self.zk.reconnect()
        self.assertEqual(self.value(paths.offset_path("g", "t", "0-0")), b"20")
        self.zk.expire()
        consumer.acknowledge_offset(partition, 30)
        self.zk.reconnect()
        self.assertEqual(self.value(paths.offset_path("g", "t", "0-0")), b"20")

    def test_rebalance_while_disconnected_keeps_the_offsets(self) -> None:
        """A rebalance that runs while ZooKeeper is out of reach cannot commit, so it releases nothing and
        forgets no offset: reconnected, the member commits them first, and fetches from there."""
        consumer, streams = self.joined()
        [stream] = streams["t"]
        self.consume(consumer, stream, upto=2)
        self.zk.suspend()
        consumer.rebalancer.request()  # as a change seen just before the connection dropped
        for _ in range(4):
            self.clock.advance(1)
        self.assertIs(consumer.state, S.FAILED)
        self.zk.operations.clear()
        self.zk.reconnect()
        self.assertEqual(self.zk.operations[0], ("set", paths.offset_path("g", "t", "0-0")))
        self.assertIs(consumer.state, S.STABLE)
        self.assertEqual(self.value(paths.offset_path("g", "t", "0-0")), b"20")
        self.assertEqual({p.name: p.fetch_offset for p in self.fetchers[-1].partitions if p.name == "0-0"},
                         {"0-0": 20})
