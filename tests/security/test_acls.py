"""Unit tests for twlog.security.acls: Kafka's ACL model, its ZooKeeper values and AclAuthorizer's decision."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclError,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    decode_acls,
    encode_acls,
    group_read_principals,
    parse_super_users,
)

Op, P = Operation, Permission
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
BOB = "User:bob"


def entry(operation: Operation, permission: Permission = P.ALLOW, principal: str = BOB, host: str = "*"):
    return AccessControlEntry(principal, permission, operation, host)


def decide(acls: dict, operation: Operation, name: str = "clicks", *, principal: str = BOB, host: str = "10.0.0.1",
           resource_type: ResourceType = TOPIC, super_users=()) -> bool:
    return Authorizer(acls, super_users).authorize(principal, host, operation, resource_type, name)


def topic(name: str = "clicks", pattern_type: PatternType = LITERAL) -> ResourcePattern:
    return ResourcePattern(TOPIC, name, pattern_type)


class DecisionTests(SynchronousTestCase):
    def test_no_acl_no_access(self) -> None:
        self.assertFalse(decide({}, Op.READ))
        self.assertFalse(decide({topic("other"): {entry(Op.READ)}}, Op.READ))

    def test_allow_matches_operation_principal_and_host(self) -> None:
        acls = {topic(): {entry(Op.WRITE, host="10.0.0.1")}}
        self.assertTrue(decide(acls, Op.WRITE))
        self.assertFalse(decide(acls, Op.READ))
        self.assertFalse(decide(acls, Op.WRITE, principal="User:alice"))
        self.assertFalse(decide(acls, Op.WRITE, host="10.0.0.2"))

    def test_deny_wins(self) -> None:
        """A Deny on any covering pattern refuses what any Allow allows."""
        for deny in ({topic(): {entry(Op.READ, P.DENY)}}, {topic("*"): {entry(Op.ALL, P.DENY)}},
                     {topic("cl", PREFIXED): {entry(Op.READ, P.DENY, principal="User:*")}},
                     {topic(): {entry(Op.READ, P.DENY, host="10.0.0.1")}}):
            acls = {topic(): {entry(Op.READ)}}
            for pattern, entries in deny.items():
                acls[pattern] = acls.get(pattern, set()) | entries
            self.assertFalse(decide(acls, Op.READ), deny)

    def test_deny_from_another_host_does_not_refuse(self) -> None:
        acls = {topic(): {entry(Op.READ), entry(Op.READ, P.DENY, host="10.0.0.9")}}
        self.assertTrue(decide(acls, Op.READ))

    def test_allow_implies_describe_deny_implies_nothing(self) -> None:
        """Read, Write, Delete, Alter allow Describe; AlterConfigs allows DescribeConfigs; a Deny Read still lets
        Describe through (Kafka's rule)."""
        for operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
            self.assertTrue(decide({topic(): {entry(operation)}}, Op.DESCRIBE), operation)
        self.assertFalse(decide({topic(): {entry(Op.CREATE)}}, Op.DESCRIBE))
        self.assertFalse(decide({topic(): {entry(Op.DESCRIBE)}}, Op.READ))
        self.assertTrue(decide({topic(): {entry(Op.ALTER_CONFIGS)}}, Op.DESCRIBE_CONFIGS))
        self.assertTrue(decide({topic(): {entry(Op.WRITE), entry(Op.READ, P.DENY)}}, Op.DESCRIBE))

    def test_all_matches_every_operation(self) -> None:
        for operation in Operation:
            self.assertTrue(decide({topic(): {entry(Op.ALL)}}, operation))
            self.assertFalse(decide({topic(): {entry(Op.ALL), entry(Op.ALL, P.DENY)}}, operation))

    def test_wildcards(self) -> None:
        """The literal name * covers every resource of its type (no other type); User:* every principal."""
        acls = {topic("*"): {entry(Op.READ, principal="User:*")}}
        self.assertTrue(decide(acls, Op.READ, "anything", principal="User:ANONYMOUS"))
        self.assertFalse(decide(acls, Op.READ, "g", resource_type=GROUP))

    def test_prefixed(self) -> None:
        acls = {topic("logs-", PREFIXED): {entry(Op.READ)}}
        self.assertTrue(decide(acls, Op.READ, "logs-2024"))
        self.assertTrue(decide(acls, Op.READ, "logs-"))
        self.assertFalse(decide(acls, Op.READ, "logs"))
        self.assertFalse(decide(acls, Op.READ, "xlogs-1"))

    def test_a_literal_is_not_a_prefix(self) -> None:
        self.assertFalse(decide({topic("logs-"): {entry(Op.READ)}}, Op.READ, "logs-2024"))

    def test_super_users(self) -> None:
        acls = {topic("*"): {entry(Op.ALL, P.DENY, principal="User:*")}}
        self.assertTrue(decide(acls, Op.WRITE, principal="User:admin", super_users={"User:admin"}))
        self.assertFalse(decide(acls, Op.WRITE))

    def test_cluster(self) -> None:
        acls = {ResourcePattern(CLUSTER, CLUSTER_NAME): {entry(Op.CLUSTER_ACTION)}}
        self.assertTrue(decide(acls, Op.CLUSTER_ACTION, CLUSTER_NAME, resource_type=CLUSTER))
        self.assertFalse(decide(acls, Op.CLUSTER_ACTION, "clicks"))


class RememberedDecisionTests(SynchronousTestCase):
    def test_bounded_and_still_right(self) -> None:
        """Decisions are remembered up to MAX_DECISIONS, then forgotten at once; the answers do not change."""
        authorizer = Authorizer({topic("t", PREFIXED): {entry(Op.READ)}})
        authorizer.MAX_DECISIONS = 3
        for _ in range(3):
            for n in range(5):
                self.assertTrue(authorizer.authorize(BOB, "h", Op.READ, TOPIC, f"t{n}"))
                self.assertFalse(authorizer.authorize(BOB, "h", Op.WRITE, TOPIC, f"t{n}"))
                self.assertLessEqual(len(authorizer._decisions), 3)


class ModelTests(SynchronousTestCase):
    def test_zookeeper_value_is_kafkas(self) -> None:
        value = encode_acls([entry(Op.WRITE)])
        self.assertEqual(value, b'{"version":1,"acls":[{"principal":"User:bob","permissionType":"Allow",'
                         b'"operation":"Write","host":"*"}]}')
        self.assertEqual(decode_acls(value), {entry(Op.WRITE)})

    def test_reads_what_kafka_writes(self) -> None:
        """Kafka's own value (spaces, several entries, IdempotentWrite on the cluster)."""
        value = (b'{"version": 1, "acls": [{"principal": "User:CN=broker,O=x", "permissionType": "Allow", '
                 b'"operation": "IdempotentWrite", "host": "*"}, {"principal": "User:bob", "permissionType": "Deny",'
                 b' "operation": "Read", "host": "10.0.0.1"}]}')
        self.assertEqual(decode_acls(value), {entry(Op.IDEMPOTENT_WRITE, principal="User:CN=broker,O=x"),
                                              entry(Op.READ, P.DENY, host="10.0.0.1")})

    def test_bad_values(self) -> None:
        for bad in (b"{", b'{"version":2,"acls":[]}', b'{"version":1}', b'{"version":1,"acls":[{"principal":'
                    b'"User:bob","permissionType":"Maybe","operation":"Read","host":"*"}]}', b"[1]"):
            self.assertRaises(AclError, decode_acls, bad)
        self.assertEqual(decode_acls(b""), frozenset())

    def test_invalid_patterns_and_bindings(self) -> None:
        self.assertRaises(AclError, ResourcePattern, CLUSTER, "other")
        self.assertRaises(AclError, ResourcePattern, TOPIC, "*", PREFIXED)
        self.assertRaises(AclError, ResourcePattern, TOPIC, "")
        with self.assertRaises(AclError) as caught:
            AclBinding(ResourcePattern(GROUP, "g"), entry(Op.WRITE))
        self.assertIn("cannot name Write", str(caught.exception))
        AclBinding(ResourcePattern(CLUSTER, CLUSTER_NAME), entry(Op.IDEMPOTENT_WRITE))

    def test_super_users_separated_by_semicolons(self) -> None:
        self.assertEqual(parse_super_users("User:admin;User:CN=broker,O=x; "),
                         {"User:admin", "User:CN=broker,O=x"})
        self.assertRaises(AclError, parse_super_users, "admin")


class GroupReadPrincipalsTests(SynchronousTestCase):
    def test_literal_prefixed_wildcard_less_denies(self) -> None:
        group = ResourcePattern(GROUP, "billing")
        acls = {group: {entry(Op.READ), entry(Op.READ, principal="User:eve"),
                        entry(Op.READ, P.DENY, principal="User:eve")},
                ResourcePattern(GROUP, "bill", PREFIXED): {entry(Op.ALL, principal="User:carol")},
                ResourcePattern(GROUP, "*"): {entry(Op.DESCRIBE, principal="User:dan")},
                ResourcePattern(GROUP, "other"): {entry(Op.READ, principal="User:frank")}}
        self.assertEqual(group_read_principals(acls, "billing"), {BOB, "User:carol"})

    def test_a_deny_from_one_host_is_not_decidable_here(self) -> None:
        acls = {ResourcePattern(GROUP, "g"): {entry(Op.READ), entry(Op.READ, P.DENY, host="10.0.0.1")}}
        self.assertEqual(group_read_principals(acls, "g"), {BOB})

    def test_everyone_denied(self) -> None:
        acls = {ResourcePattern(GROUP, "g"): {entry(Op.READ), entry(Op.ALL, P.DENY, principal="User:*")}}
        self.assertEqual(group_read_principals(acls, "g"), set())
