"""BrokerRegistration's state machine, deterministic: every transition on a FakeZooKeeper and a task.Clock."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from tests.fakes import FakeLogs
from tests.fakezk import FakeZooKeeper, FakeZooKeeperServer
from twlog.config import BrokerConfig, LogConfig
from twlog.coord import paths
from twlog.coord.cluster import parse_broker_address
from twlog.coord.registration import (
    REGISTRATION_MOVES,
    BrokerIdInUse,
    BrokerRegistration,
    RegistrationState,
    broker_address,
    broker_value,
)
from twlog.coord.zk import ConnectionLoss
from twlog.statemachine import IllegalTransition, StateMachine

S = RegistrationState


def config(broker_id: int = 5, host: str = "127.0.0.1") -> BrokerConfig:
    return BrokerConfig(log=LogConfig("unused"), broker_id=broker_id, host=host)


#: What the broker of config() writes, Kafka 0.7's form, when its clock says 1300000000 s.
VALUE = b"127.0.0.1-1300000000000:127.0.0.1:9092"


class RegistrationTestCase(SynchronousTestCase):
    """A broker registration on a FakeZooKeeper and a task.Clock, with another session beside it."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1300000000)
        self.server = FakeZooKeeperServer()
        self.zk = FakeZooKeeper(self.server)
        self.zk.start()
        self.other = FakeZooKeeper(self.server)
        self.other.start()
        self.logs = FakeLogs({"clicks": 3, "views": 1})

    def registration(self, **options) -> BrokerRegistration:
        return BrokerRegistration(self.zk, config(), self.logs, 9092, clock=self.clock, **options)

    def started(self) -> BrokerRegistration:
        registration = self.registration()
        self.successResultOf(registration.start())
        self.assertIs(registration.state, S.REGISTERED)
        return registration

    def node(self, path: str):
        """(value, ephemeral owner) of C{path}, or None."""
        stat = self.successResultOf(self.other.exists(path))
        if stat is None:
            return None
        return self.successResultOf(self.other.get(path))[0], stat.ephemeralOwner

    def assertRegistered(self, topics: dict[str, int]) -> None:
        session = self.zk.session_id
        self.assertEqual(self.node(paths.broker_id_path(5)), (VALUE, session))
        for topic, count in topics.items():
            self.assertEqual(self.node(paths.broker_topic_path(topic, 5)), (str(count).encode(), session))


class RegistrationStateTests(RegistrationTestCase):
    def test_start(self) -> None:
        """STOPPED -> REGISTERING -> REGISTERED: the id and every topic, ephemeral to the session."""
        registration = self.registration()
        self.assertIs(registration.state, S.STOPPED)
        self.zk.hold()
        d = registration.start()
        self.assertIs(registration.state, S.REGISTERING)
        self.zk.flush()
        self.successResultOf(d)
        self.assertIs(registration.state, S.REGISTERED)
        self.assertRegistered({"clicks": 3, "views": 1})
        self.assertEqual(registration.registrations, 1)

    def test_new_topic(self) -> None:
        """A topic created while REGISTERED gets its node."""
        self.started()
        self.logs.create("fresh", 4)
        self.assertRegistered({"fresh": 4})

    def test_deleted_topic(self) -> None:
        """A topic deleted while REGISTERED loses its node, and its topic node once no broker's is left."""
        self.started()
        self.successResultOf(self.other.create(paths.broker_topic_path("views", 6), b"1", ephemeral=True))
        self.logs.delete("clicks")
        self.logs.delete("views")
        self.assertIsNone(self.node(paths.broker_topic_path("clicks", 5)))
        self.assertIsNone(self.node(paths.broker_topic_path("clicks")))
        self.assertIsNone(self.node(paths.broker_topic_path("views", 5)))
        self.assertEqual(self.node(paths.broker_topic_path("views", 6)), (b"1", self.other.session_id))
        self.assertRegistered({})

    def test_id_in_use_by_another_live_broker(self) -> None:
        """REGISTERING -> STOPPED with BrokerIdInUse naming the holder; no topic registered."""
        self.successResultOf(self.other.create(paths.broker_id_path(5), b"10.0.0.9:9092", ephemeral=True,
                                               makepath=True))
        registration = self.registration()
        failure = self.failureResultOf(registration.start(), BrokerIdInUse)
        self.assertEqual(failure.getErrorMessage(),
                         "broker id 5 is already registered by a live broker at 10.0.0.9:9092")
        self.assertIs(registration.state, S.STOPPED)
        self.assertIsNone(self.node(paths.broker_topic_path("clicks", 5)))

    def test_id_held_by_persistent_node(self) -> None:
        """A persistent node on the id is refused too."""
        self.successResultOf(self.other.create(paths.broker_id_path(5), b"10.0.0.9:9092", makepath=True))
        failure = self.failureResultOf(self.registration().start(), BrokerIdInUse)
        self.assertIn("persistent node, not by a live broker", failure.getErrorMessage())

    def test_waits_for_own_previous_registration(self) -> None:
        """This address registered by an older session: REGISTERING until that session expires, then REGISTERED."""
        previous = FakeZooKeeper(self.server)  # a crashed run's session, not expired yet
        previous.start()
        self.successResultOf(previous.create(paths.broker_id_path(5), b"127.0.0.1:9092", ephemeral=True,
                                             makepath=True))
        registration = self.registration(stale_wait_s=15)
        d = registration.start()
        self.clock.advance(10)
        self.assertNoResult(d)
        self.assertIs(registration.state, S.REGISTERING)
        previous.expire()
        self.successResultOf(d)
        self.assertIs(registration.state, S.REGISTERED)
        self.assertRegistered({"clicks": 3})

    def test_advertised_port_is_registered(self) -> None:
        """With an advertised port (a proxy in front of the broker), /brokers/ids/<id> names it, not the port
        listened on."""
        zk = FakeZooKeeper()
        zk.start()
        settings = BrokerConfig(log=LogConfig("unused"), broker_id=5, host="127.0.0.1", advertised_port=19092)
        registration = BrokerRegistration(zk, settings, FakeLogs(), 9092, clock=self.clock)
        self.successResultOf(registration.start())
        written = self.successResultOf(zk.get(paths.broker_id_path(5)))[0]
        self.assertEqual(parse_broker_address(written), ("127.0.0.1", 19092))
        self.assertEqual(registration.address, "127.0.0.1:19092")

    def test_waits_for_own_previous_registration_in_07_form(self) -> None:
        """A previous run's 0.7-form value (another creator timestamp) or an IPv6 one is this broker's too."""
        for host, value in (("127.0.0.1", b"127.0.0.1-1200000000000:127.0.0.1:9092"),
                            ("::1", b"[::1]-1200000000000:[::1]:9092"), ("::1", b"[::1]:9092")):
            server = FakeZooKeeperServer()
            zk, previous = FakeZooKeeper(server), FakeZooKeeper(server)
            zk.start()
            previous.start()
            self.successResultOf(previous.create(paths.broker_id_path(5), value, ephemeral=True, makepath=True))
            registration = BrokerRegistration(zk, config(host=host), FakeLogs(), 9092, clock=self.clock,
                                              stale_wait_s=15)
            d = registration.start()
            self.clock.advance(10)
            self.assertNoResult(d)
            previous.expire()
            self.successResultOf(d)
            written = self.successResultOf(zk.get(paths.broker_id_path(5)))[0]
            self.assertEqual(parse_broker_address(written), (host, 9092))
            self.assertNotEqual(written, value)

    def test_id_in_use_by_a_07_broker(self) -> None:
        """Another address in 0.7's form is another broker: refused, named as host:port."""
        self.successResultOf(self.other.create(paths.broker_id_path(5), b"10.0.0.1-1300000000:10.0.0.1:9092",
                                               ephemeral=True, makepath=True))
        failure = self.failureResultOf(self.registration().start(), BrokerIdInUse)
        self.assertEqual(failure.getErrorMessage(),
                         "broker id 5 is already registered by a live broker at 10.0.0.1:9092")

    def test_own_previous_registration_that_stays(self) -> None:
        """... and refused after stale_wait_s if it does not go."""
        self.successResultOf(self.other.create(paths.broker_id_path(5), b"127.0.0.1:9092", ephemeral=True,
                                               makepath=True))
        registration = self.registration(stale_wait_s=15)
        d = registration.start()
        self.clock.advance(15)
        self.assertIn("did not expire in time", self.failureResultOf(d, BrokerIdInUse).getErrorMessage())
        self.assertIs(registration.state, S.STOPPED)

    def test_replaces_topic_node_of_another_session(self) -> None:
        """A topic node under our id left by another session is replaced once we hold the id."""
        self.successResultOf(self.other.create(paths.broker_topic_path("clicks", 5), b"9", makepath=True))
        self.started()
        self.assertRegistered({"clicks": 3})

    def test_suspended_then_reconnected(self) -> None:
        """REGISTERED -> SUSPENDED -> RE_REGISTERING -> REGISTERED; a node that went missing is made again."""
        registration = self.started()
        session = self.zk.session_id
        self.zk.suspend()
        self.assertIs(registration.state, S.SUSPENDED)
        self.successResultOf(self.other.delete(paths.broker_topic_path("views", 5)))  # as if a write had failed
        self.zk.hold()
        self.zk.reconnect()
        self.assertIs(registration.state, S.RE_REGISTERING)
        self.zk.flush()
        self.assertIs(registration.state, S.REGISTERED)
        self.assertEqual(self.zk.session_id, session)
        self.assertRegistered({"clicks": 3, "views": 1})
        self.assertEqual(registration.registrations, 1)

    def test_expired_then_registers_again(self) -> None:
        """REGISTERED -> EXPIRED (nodes gone) -> RE_REGISTERING -> REGISTERED in the new session, new topics too."""
        registration = self.started()
        self.zk.expire()
        self.assertIs(registration.state, S.EXPIRED)
        self.assertIsNone(self.node(paths.broker_id_path(5)))
        self.logs.create("later", 2)  # created while expired: registered with the others
        self.assertIsNone(self.node(paths.broker_topic_path("later", 5)))
        self.zk.reconnect()
        self.assertIs(registration.state, S.REGISTERED)
        self.assertRegistered({"clicks": 3, "views": 1, "later": 2})
        self.assertEqual(registration.registrations, 2)

    def test_lost_while_suspended(self) -> None:
        """SUSPENDED, the session expires meanwhile: LOST on reconnecting -> EXPIRED -> REGISTERED."""
        registration = self.started()
        self.zk.suspend()
        self.server.expire(self.zk.session_id)
        states = []
        self.zk.add_state_listener(lambda state: states.append(registration.state))
        self.zk.reconnect()
        self.assertEqual(states, [S.EXPIRED, S.REGISTERED])
        self.assertRegistered({"clicks": 3, "views": 1})

    def test_registering_again_fails_then_retries(self) -> None:
        """A failed re-registration stays RE_REGISTERING and is retried after a back-off."""
        registration = self.started()
        self.zk.expire()
        real_create = self.zk.create
        failures = [ConnectionLoss("flaky")]

        def create(*args, **kwargs):
            if failures:
                raise failures.pop()
            return real_create(*args, **kwargs)

        self.patch(self.zk, "create", create)
        self.zk.reconnect()
        self.assertIs(registration.state, S.RE_REGISTERING)
        self.assertIsNone(self.node(paths.broker_id_path(5)))
        self.clock.advance(2)
        self.assertIs(registration.state, S.REGISTERED)
        self.assertRegistered({"clicks": 3, "views": 1})

    def test_id_taken_while_expired(self) -> None:
        """RE_REGISTERING -> FAILED when another live broker took the id while the session was gone."""
        registration = self.started()
        self.zk.expire()
        self.successResultOf(self.other.create(paths.broker_id_path(5), b"10.0.0.9:9092", ephemeral=True))
        self.zk.reconnect()
        self.assertIs(registration.state, S.FAILED)

    def test_stop(self) -> None:
        """REGISTERED -> STOPPED: this session's nodes are deleted; the session stays open."""
        registration = self.started()
        self.successResultOf(registration.stop())
        self.assertIs(registration.state, S.STOPPED)
        self.assertIsNone(self.node(paths.broker_id_path(5)))
        self.assertIsNone(self.node(paths.broker_topic_path("clicks", 5)))
        self.assertTrue(self.zk.connected)
        self.zk.expire()
        self.zk.reconnect()
        self.assertIsNone(self.node(paths.broker_id_path(5)))  # not registered again

    def test_stop_while_suspended(self) -> None:
        """SUSPENDED -> STOPPED without touching ZooKeeper (the session takes its nodes when it ends)."""
        registration = self.started()
        self.zk.suspend()
        self.successResultOf(registration.stop())
        self.assertIs(registration.state, S.STOPPED)

    def test_stop_leaves_others_nodes(self) -> None:
        """Stop deletes only nodes this session owns."""
        registration = self.started()
        self.successResultOf(self.other.delete(paths.broker_topic_path("clicks", 5)))
        self.successResultOf(self.other.create(paths.broker_topic_path("clicks", 5), b"7", ephemeral=True))
        self.successResultOf(registration.stop())
        self.assertEqual(self.node(paths.broker_topic_path("clicks", 5)), (b"7", self.other.session_id))


class TransitionTableTests(RegistrationTestCase):
    """Every move of L{REGISTRATION_MOVES}, made by ZooKeeper's session events, start, stop and the clock."""

    def setUp(self) -> None:
        super().setUp()
        self.moves: set[tuple[RegistrationState, RegistrationState]] = set()

        def observe(event: dict) -> None:
            if event.get("machine") == "broker 5 registration":
                self.moves.add((S[event["source"]], S[event["target"]]))

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)

    def lose_session(self) -> None:
        """LOST without SUSPENDED first (the session closed under us); connected again on a new session."""
        self.zk.stop()

    def stopped(self, registration: BrokerRegistration) -> None:
        self.successResultOf(registration.stop())
        self.assertIs(registration.state, S.STOPPED)
        self.zk.start()

    def test_every_transition(self) -> None:
        """Each move of the table happens, and no move outside it."""
        # STOPPED -> REGISTERING -> REGISTERED -> SUSPENDED -> RE_REGISTERING -> REGISTERED -> SUSPENDED -> EXPIRED
        # -> RE_REGISTERING -> REGISTERED -> EXPIRED (LOST alone) -> RE_REGISTERING -> REGISTERED -> STOPPED -> STOPPED
        registration = self.started()
        self.zk.suspend()
        self.zk.reconnect()
        self.assertIs(registration.state, S.REGISTERED)
        self.zk.expire()
        self.assertIs(registration.state, S.EXPIRED)
        self.zk.reconnect()
        self.lose_session()
        self.assertIs(registration.state, S.EXPIRED)
        self.zk.start()
        self.assertIs(registration.state, S.REGISTERED)
        self.stopped(registration)
        self.successResultOf(registration.stop())
        # REGISTERING -> SUSPENDED (a slow server), then reconnected
        self.zk.hold()
        d = registration.start()
        self.zk.suspend()
        self.assertIs(registration.state, S.SUSPENDED)
        self.zk.reconnect()
        self.assertIs(registration.state, S.RE_REGISTERING)
        self.zk.flush()
        self.successResultOf(d)
        self.assertIs(registration.state, S.REGISTERED)
        self.stopped(registration)
        # REGISTERING -> EXPIRED -> STOPPED (the start fails: its session is gone)
        self.zk.hold()
        d = registration.start()
        self.lose_session()
        self.assertIs(registration.state, S.EXPIRED)
        self.zk.flush()
        self.failureResultOf(d)
        self.assertIs(registration.state, S.STOPPED)
        self.zk.start()
        # REGISTERING -> STOPPED
        self.zk.hold()
        d = registration.start()
        stopping = registration.stop()
        self.assertIs(registration.state, S.STOPPED)
        self.zk.flush()
        self.successResultOf(stopping)
        self.failureResultOf(d)
        # SUSPENDED -> STOPPED
        self.successResultOf(registration.start())
        self.zk.suspend()
        self.stopped(registration)
        # RE_REGISTERING -> SUSPENDED, RE_REGISTERING -> EXPIRED, RE_REGISTERING -> STOPPED
        self.successResultOf(registration.start())
        self.zk.expire()
        self.zk.hold()
        self.zk.reconnect()
        self.assertIs(registration.state, S.RE_REGISTERING)
        self.zk.suspend()
        self.assertIs(registration.state, S.SUSPENDED)
        self.zk.flush()
        self.zk.hold()
        self.zk.reconnect()
        self.assertIs(registration.state, S.RE_REGISTERING)
        self.lose_session()
        self.assertIs(registration.state, S.EXPIRED)
        self.zk.flush()
        self.zk.hold()
        self.zk.start()
        self.assertIs(registration.state, S.RE_REGISTERING)
        stopping = registration.stop()
        self.assertIs(registration.state, S.STOPPED)
        self.zk.flush()
        self.successResultOf(stopping)
        # RE_REGISTERING -> FAILED (the id was taken meanwhile); FAILED -> SUSPENDED, EXPIRED, STOPPED
        self.successResultOf(registration.start())
        self.zk.expire()
        thief = self.successResultOf(self.other.create(paths.broker_id_path(5), b"10.0.0.9:9092", ephemeral=True))
        self.zk.reconnect()
        self.assertIs(registration.state, S.FAILED)
        self.zk.suspend()
        self.assertIs(registration.state, S.SUSPENDED)
        self.zk.reconnect()
        self.assertIs(registration.state, S.FAILED)
        self.lose_session()
        self.assertIs(registration.state, S.EXPIRED)
        self.zk.start()
        self.assertIs(registration.state, S.FAILED)
        self.stopped(registration)
        self.successResultOf(self.other.delete(thief))
        self.assertEqual(self.moves, set(StateMachine("r", S.STOPPED, REGISTRATION_MOVES).transitions()))

    def test_illegal_moves_raise(self) -> None:
        """start() while registered is no move of the table: it fails with IllegalTransition, the state stays."""
        registration = self.started()
        error = self.failureResultOf(registration.start(), IllegalTransition).value
        self.assertEqual((error.machine, error.source, error.target),
                         ("broker 5 registration", S.REGISTERED, S.REGISTERING))
        self.assertIs(registration.state, S.REGISTERED)
        with self.assertRaises(AttributeError):
            registration.state = S.STOPPED

    def test_topic_created_only_while_the_id_is_held(self) -> None:
        """A topic created while FAILED is not registered under an id another broker holds."""
        registration = self.started()
        self.zk.expire()
        self.successResultOf(self.other.create(paths.broker_id_path(5), b"10.0.0.9:9092", ephemeral=True))
        self.zk.reconnect()
        self.assertIs(registration.state, S.FAILED)
        self.logs.create("later", 2)
        self.assertIsNone(self.node(paths.broker_topic_path("later", 5)))


class AddressTests(SynchronousTestCase):
    def test_broker_address(self) -> None:
        """Addresses are host:port, with IPv6 hosts in brackets."""
        self.assertEqual(broker_address("127.0.0.1", 9092), "127.0.0.1:9092")
        self.assertEqual(broker_address("::1", 9092), "[::1]:9092")

    def test_broker_value(self) -> None:
        """/brokers/ids/<id> holds Kafka 0.7's Broker.getZKString: <host>-<ms>:<host>:<port>."""
        self.assertEqual(broker_value("10.0.0.1", 9092, 1300000000), "10.0.0.1-1300000000:10.0.0.1:9092")
        self.assertEqual(broker_value("10.0.0.1", 9092, 1300000000).split(":")[1:], ["10.0.0.1", "9092"])  # 0.7
        self.assertEqual(broker_value("::1", 9092, 5), "[::1]-5:[::1]:9092")
        for host in ("10.0.0.1", "my-host.example", "::1"):
            self.assertEqual(parse_broker_address(broker_value(host, 9092, 1300000000000).encode()), (host, 9092))
