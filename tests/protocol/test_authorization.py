"""Unit tests for twlog.protocol.authorization: each request type refused without its ACL and allowed with it,
through a broker connection (StringTransport), and the METADATA family hiding the topics not described."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import attrs
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import NO_ERROR, UNKNOWN, ClusterAuthorizationFailed, TopicAuthorizationFailed
from twlog.protocol import codec, sasl_codec
from twlog.protocol import replication_codec as replication
from twlog.protocol.authorization import REQUEST_ACLS, REQUEST_KINDS, RequestGuard
from twlog.protocol.codec import (
    ACK_APPENDED,
    AckProduceRequest,
    BoundariesRequest,
    ClusterMetadataRequest,
    CreateTopicRequest,
    DeleteTopicRequest,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    WaitFetchRequest,
)
from twlog.protocol.factory import BrokerFactory
from twlog.protocol.replica_status_codec import ReplicaStatusRequest
from twlog.protocol.responses import TopicLayout
from twlog.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from twlog.storage.message import encode_message_set

from .test_server import BrokerTestMixin, frame, responses

ALICE = "User:alice"
SET = encode_message_set([b"m"])
TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER


def allow(operation: Operation, resource_type: ResourceType = TOPIC, name: str = "t",
          pattern_type: PatternType = PatternType.LITERAL, principal: str = ALICE, host: str = "*",
          permission: Permission = Permission.ALLOW) -> tuple[ResourcePattern, AccessControlEntry]:
    return (ResourcePattern(resource_type, name, pattern_type),
            AccessControlEntry(principal, permission, operation, host))


def acl_map(*bindings) -> dict:
    acls: dict = {}
    for pattern, entry in bindings:
        acls.setdefault(pattern, set()).add(entry)
    return acls


#: Per request type: a request on topic t (which exists), the ACL that allows it, and the code of its refusal
#: (a 0.7 type's: Unknown, the nearest 0.7 code; None: a fire-and-forget produce, dropped).
CASES = {
    codec.PRODUCE: (ProduceRequest("t", 0, SET), allow(Operation.WRITE), None),
    codec.FETCH: (FetchRequest("t", 0, 0, 1000), allow(Operation.READ), UNKNOWN),
    codec.MULTIFETCH: (MultiFetchRequest((FetchRequest("t", 0, 0, 1000),)), allow(Operation.READ), UNKNOWN),
    codec.MULTIPRODUCE: (MultiProduceRequest((ProduceRequest("t", 0, SET),)), allow(Operation.WRITE), None),
    codec.OFFSETS: (OffsetsRequest("t", 0, -1, 1), allow(Operation.DESCRIBE), UNKNOWN),
    codec.ACK_PRODUCE: (AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("t", 0, SET),)),
                        allow(Operation.WRITE), TopicAuthorizationFailed.code),
    codec.WAIT_FETCH: (WaitFetchRequest(0, 0, (FetchRequest("t", 0, 0, 1000),)), allow(Operation.READ),
                       TopicAuthorizationFailed.code),
    codec.CREATE_TOPIC: (CreateTopicRequest("t", 2), allow(Operation.CREATE, CLUSTER, CLUSTER_NAME),
                         TopicAuthorizationFailed.code),
    codec.BOUNDARIES: (BoundariesRequest("t", 0, (0,)), allow(Operation.DESCRIBE), TopicAuthorizationFailed.code),
    codec.DELETE_TOPIC: (DeleteTopicRequest("t"), allow(Operation.DELETE), TopicAuthorizationFailed.code),
    replication.REPLICA_FETCH: (
        replication.ReplicaFetchRequest(1, 0, 0, (replication.ReplicaFetch("t", 0, 0, 0, 100),)),
        allow(Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME), ClusterAuthorizationFailed.code),
    replication.EPOCH_END_OFFSET: (
        replication.EpochEndOffsetRequest((replication.EpochQuery("t", 0, -1, 0),)),
        allow(Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME), ClusterAuthorizationFailed.code),
    replication.REPLICA_STATUS: (ReplicaStatusRequest("t", (0,)),
                                 allow(Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME),
                                 ClusterAuthorizationFailed.code),
}


def answered(request) -> bytes:
    """What the replication handlers (not installed without the replica side) answer here: no error."""
    return codec.encode_error_response(NO_ERROR)


class GuardTestMixin(BrokerTestMixin):
    def setUp(self) -> None:
        self.make_broker()
        for kind in (replication.ReplicaFetchRequest, replication.EpochEndOffsetRequest, ReplicaStatusRequest):
            self.broker.handlers[kind] = lambda request, peer: answered(request)
        self.broker.produce(ProduceRequest("t", 0, SET))  # topic t exists (made before the guard)
        self.cluster_topics: set[str] = set()

    def guard(self, *bindings, super_users=()) -> RequestGuard:
        guard = self.broker.guard = RequestGuard(
            Authorizer(acl_map(*bindings), super_users), self.clock, self.broker.count_error,
            lambda topic: topic in self.logs.topics() or topic in self.cluster_topics,
            self.broker.config.log.partitions_for)
        return guard

    def connection(self, principal: str = ALICE, host: str = "10.0.0.1"):
        """A connection of C{principal} from C{host}, on a StringTransport."""
        protocol = BrokerFactory(self.broker).buildProtocol(IPv4Address("TCP", host, 40000))
        protocol.makeConnection(StringTransport())
        protocol.principal = principal
        return protocol

    def ask(self, request, principal: str = ALICE, host: str = "10.0.0.1") -> bytes | None:
        """C{request}'s response frame on a new connection of C{principal} from C{host} (None: no response)."""
        protocol = self.connection(principal, host)
        protocol.dataReceived(frame(request))
        transport = protocol.transport
        got = responses(transport.value())
        return got[0] if got else None

    def code(self, request, **kwargs) -> int:
        answer = self.ask(request, **kwargs)
        return int.from_bytes(answer[:2], "big", signed=True)

    def end(self, topic: str = "t", partition: int = 0) -> int:
        return self.logs.get_log(topic, partition).end_offset if self.logs.get_log(topic, partition) else 0


class EveryRequestTypeTests(GuardTestMixin, SynchronousTestCase):
    def test_every_request_type_has_a_case(self) -> None:
        """The cases cover every type of the table but the METADATA family (never refused: HidingTests) and
        SASL's (no ACL: test_sasl_needs_no_acl)."""
        self.assertEqual(set(CASES) | {codec.METADATA, codec.CLUSTER_METADATA, replication.CLUSTER_METADATA_V2,
                                       *sasl_codec.TYPES}, set(REQUEST_ACLS))

    def test_sasl_needs_no_acl(self) -> None:
        """SASL's requests pass the guard untouched, whoever asks (the connection answers them before it)."""
        guard = self.guard()
        for request in (sasl_codec.SaslHandshakeRequest("SCRAM-SHA-512"), sasl_codec.SaslAuthenticateRequest(b"")):
            handler = lambda request, peer: b"answered"  # noqa: E731
            self.assertIs(guard.handler(request, handler, self.connection()), handler)

    def test_every_request_type_is_in_the_table(self) -> None:
        """Every request type the codec decodes has its row (a new one fails here until it is given one), and a
        type without a row is refused to everyone, super users too (fail closed)."""
        self.assertEqual({REQUEST_KINDS[kind] for kind in typing.get_args(codec.Request)}, set(REQUEST_ACLS))

        @attrs.frozen
        class NewRequest:
            topic: str = "t"

        self.broker.handlers[NewRequest] = lambda request, peer: answered(request)
        guard = self.guard(allow(Operation.ALL, name="*"), super_users={ALICE})
        with self.assertRaises(ClusterAuthorizationFailed):
            guard.handler(NewRequest(), self.broker.handlers[NewRequest], self.connection())(NewRequest(), "?")

    def test_refused_without_its_acl(self) -> None:
        """With ACLs for everything else, each type is refused: its code (0.7 types: Unknown), counted."""
        for kind, (request, needed, code) in CASES.items():
            with self.subTest(kind=kind):
                # (Read, Write and Delete imply Describe: they are left out for a type needing Describe.)
                implying = {needed[1].operation} | ({Operation.READ, Operation.WRITE, Operation.DELETE}
                                                    if needed[1].operation is Operation.DESCRIBE else set())
                others = [binding for _, binding, _ in CASES.values() if binding[1].operation not in implying]
                guard = self.guard(*others)
                before = self.end()
                if code is None:
                    self.assertIsNone(self.ask(request))
                    self.assertEqual(self.end(), before)  # dropped: nothing written
                    self.assertEqual(guard.dropped.total, 1)
                else:
                    self.assertEqual(self.code(request), code)
                # (counted by the resource of the refusal: CREATE_TOPIC's, Create on the cluster or the topic, is the
                # topic's, as its error)
                resource_type = "Cluster" if code == ClusterAuthorizationFailed.code else "Topic"
                operation = needed[1].operation.value
                self.assertEqual(guard.refusals, {(operation, resource_type): 1})
                self.assertIn((kind, (code if code is not None else TopicAuthorizationFailed.code)
                               if code != UNKNOWN else UNKNOWN), self.broker.error_counts)

    def test_allowed_with_its_acl(self) -> None:
        """With just its ACL, each type is served (answered without error, or the produce is written)."""
        for kind, (request, needed, code) in CASES.items():
            with self.subTest(kind=kind):
                guard = self.guard(needed)
                before = self.end()
                if code is None:
                    self.assertIsNone(self.ask(request))
                    self.assertGreater(self.end(), before)
                else:
                    self.assertEqual(self.code(request), NO_ERROR)
                self.assertEqual(guard.refusals, {})

    def test_create_topic_on_the_topic_will_do(self) -> None:
        """CREATE_TOPIC needs Create on the cluster or on the topic."""
        self.guard(allow(Operation.CREATE, name="new"))
        self.assertEqual(self.code(CreateTopicRequest("new", 1)), NO_ERROR)
        self.assertEqual(self.code(CreateTopicRequest("other", 1)), TopicAuthorizationFailed.code)

    def test_producing_to_a_new_topic_needs_create(self) -> None:
        """A produce creating a topic needs Create too (on the topic or the cluster); to one the cluster has
        (another broker's), Write is enough."""
        request = AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("new", 0, SET),))
        guard = self.guard(allow(Operation.WRITE, name="new"))
        self.assertEqual(self.code(request), TopicAuthorizationFailed.code)
        self.assertEqual(guard.refusals, {("Create", "Topic"): 1})
        self.cluster_topics.add("new")
        self.assertEqual(self.code(request), NO_ERROR)
        self.guard(allow(Operation.WRITE, name="new2"), allow(Operation.CREATE, CLUSTER, CLUSTER_NAME))
        self.assertEqual(self.code(AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("new2", 0, SET),))),
                         NO_ERROR)

    def test_a_multi_topic_request_needs_every_topic(self) -> None:
        """A request naming a topic it may not read is refused whole."""
        self.broker.produce(ProduceRequest("u", 0, SET))
        self.guard(allow(Operation.READ))
        request = WaitFetchRequest(0, 0, (FetchRequest("t", 0, 0, 100), FetchRequest("u", 0, 0, 100)))
        self.assertEqual(self.code(request), TopicAuthorizationFailed.code)

    def test_fire_and_forget_refusals_are_logged_at_most_once_a_minute(self) -> None:
        """Refused PRODUCEs are dropped and counted; the log says so once, then once a minute with the count."""
        guard = self.guard()
        logged = []
        guard.dropped._log.observer = logged.append  # (the EventLog's logger)
        for _ in range(3):
            self.ask(ProduceRequest("t", 0, SET))
        self.assertEqual(guard.dropped.total, 3)
        self.assertEqual(len(logged), 1)
        self.clock.advance(60)
        self.assertEqual(len(logged), 2)
        self.assertEqual(logged[1]["count"], 2)
        self.ask(ProduceRequest("t", 0, SET))
        timer = guard.dropped._timer  # the next line, due in a minute
        self.assertTrue(timer.active())
        BrokerFactory(self.broker).stopFactory()  # (at shutdown) leaves no timer behind
        self.assertFalse(timer.active())


class DecisionTests(GuardTestMixin, SynchronousTestCase):
    """Kafka's rules, seen through requests."""

    fetch = FetchRequest("t", 0, 0, 1000)
    wait = WaitFetchRequest(0, 0, (FetchRequest("t", 0, 0, 1000),))

    def test_no_acl_is_no_access(self) -> None:
        self.guard()
        self.assertEqual(self.code(self.wait), TopicAuthorizationFailed.code)

    def test_prefixed(self) -> None:
        """A PREFIXED pattern covers every topic starting with it, and no other."""
        self.broker.produce(ProduceRequest("other", 0, SET))
        self.guard(allow(Operation.READ, name="t", pattern_type=PatternType.PREFIXED))
        self.assertEqual(self.code(self.wait), NO_ERROR)
        self.assertEqual(self.code(WaitFetchRequest(0, 0, (FetchRequest("other", 0, 0, 9),))),
                         TopicAuthorizationFailed.code)

    def test_deny_wins_over_allow(self) -> None:
        """A Deny (literal, prefixed or wildcard) refuses what an Allow allows."""
        for deny in (allow(Operation.READ, permission=Permission.DENY),
                     allow(Operation.ALL, name="*", permission=Permission.DENY),
                     allow(Operation.READ, name="t", pattern_type=PatternType.PREFIXED, permission=Permission.DENY)):
            with self.subTest(deny=deny):
                self.guard(allow(Operation.READ), deny)
                self.assertEqual(self.code(self.wait), TopicAuthorizationFailed.code)

    def test_host(self) -> None:
        """An ACL naming a host matches connections from that address only."""
        self.guard(allow(Operation.READ, host="10.0.0.1"))
        self.assertEqual(self.code(self.wait, host="10.0.0.1"), NO_ERROR)
        self.assertEqual(self.code(self.wait, host="10.0.0.2"), TopicAuthorizationFailed.code)

    def test_super_users(self) -> None:
        """A super user may do anything, even denied."""
        self.guard(allow(Operation.ALL, name="*", principal="User:*", permission=Permission.DENY),
                   super_users={"User:admin"})
        self.assertEqual(self.code(self.wait, principal="User:admin"), NO_ERROR)
        self.assertEqual(self.code(self.wait), TopicAuthorizationFailed.code)

    def test_wildcards(self) -> None:
        """The literal topic '*' covers every topic, the principal User:* every principal."""
        self.guard(allow(Operation.READ, name="*", principal="User:*"))
        self.assertEqual(self.code(self.wait, principal="User:ANONYMOUS"), NO_ERROR)

    def test_read_implies_describe(self) -> None:
        """Read allows Describe (OFFSETS), not the other way round."""
        self.guard(allow(Operation.READ))
        self.assertEqual(self.code(BoundariesRequest("t", 0, (0,))), NO_ERROR)
        self.guard(allow(Operation.DESCRIBE))
        self.assertEqual(self.code(self.wait), TopicAuthorizationFailed.code)


class HidingTests(GuardTestMixin, SynchronousTestCase):
    """METADATA, CLUSTER_METADATA and _V2: topics not described are answered as topics that do not exist."""

    def setUp(self) -> None:
        super().setUp()
        self.broker.produce(ProduceRequest("secret", 0, SET))
        self.broker.produce(ProduceRequest("secret", 1, SET))
        self.guard(allow(Operation.DESCRIBE))

    def test_metadata(self) -> None:
        listed = codec.decode_metadata_response(self.ask(MetadataRequest()))
        self.assertEqual([t.topic for t in listed.topics], ["t"])
        asked = codec.decode_metadata_response(self.ask(MetadataRequest(("secret", "nosuch", "t"))))
        unknown = asked.topics[1]
        self.assertEqual(asked.topics[0], codec.TopicMetadata("secret", NO_ERROR, unknown.partitions))
        self.assertEqual(unknown, codec.TopicMetadata("nosuch", NO_ERROR, self.broker.config.log.num_partitions))

    def test_metadata_without_acls_lists_nothing(self) -> None:
        self.guard()
        self.assertEqual(codec.decode_metadata_response(self.ask(MetadataRequest())).topics, ())

    def test_cluster_metadata(self) -> None:
        listed = codec.decode_cluster_metadata_response(self.ask(ClusterMetadataRequest()))
        self.assertEqual([t.topic for t in listed.topics], ["t"])
        asked = codec.decode_cluster_metadata_response(self.ask(ClusterMetadataRequest(("secret", "nosuch"))))
        self.assertEqual(asked.topics, (TopicLayout("secret", NO_ERROR), TopicLayout("nosuch", NO_ERROR)))

    def test_cluster_metadata_v2(self) -> None:
        listed = replication.decode_cluster_metadata_v2_response(self.ask(replication.ClusterMetadataV2Request()))
        self.assertEqual([t.topic for t in listed.topics], ["t"])
        asked = replication.decode_cluster_metadata_v2_response(
            self.ask(replication.ClusterMetadataV2Request(("secret",))))
        self.assertEqual(asked.topics, (TopicLayout("secret", NO_ERROR),))

    def test_super_user_sees_all(self) -> None:
        self.guard(super_users={ALICE})
        listed = codec.decode_metadata_response(self.ask(MetadataRequest()))
        self.assertEqual([t.topic for t in listed.topics], ["secret", "t"])


class DocumentedTableTests(SynchronousTestCase):
    def test_docs_table_is_the_enforced_one(self) -> None:
        """docs/security.md's request/ACL table is REQUEST_ACLS, row for row."""
        text = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
        rows = re.findall(r"^\| (\d+) \| `(\w+)` \| (\w+) \| ([\w ,or]+?) \|", text, re.M)
        documented = {int(kind): (name, operation, tuple(t.strip() for t in types.split(" or ")))
                      for kind, name, operation, types in rows}
        enforced = {kind: (name, operation.value if operation else "none", tuple(t.value for t in types) or ("none",))
                    for kind, (name, operation, types) in REQUEST_ACLS.items()}  # (none: SASL's, needing no ACL)
        self.assertEqual(documented, enforced)
