"""C{twlog acls}' options (kafka-acls' vocabulary) and what they make, without ZooKeeper
(tests/integration/test_acls.py runs the command against the suite's ZooKeeper)."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.fakezk import FakeZooKeeper
from twlog.cli.acls import _bindings, _selected, confirm, parse_operation, secure_groups
from twlog.cli.common import UsageError
from twlog.cli.main import build_parser
from twlog.coord.acls import change_acls
from twlog.coord.zkauth import ZooKeeperCredentials, group_acl
from twlog.coord.zksecure import record_user_digest
from twlog.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)


def args(*argv: str):
    return build_parser().parse_args(["acls", *argv])


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class OptionTests(SynchronousTestCase):
    def test_add_makes_every_combination(self) -> None:
        """Each principal x host x operation, allowed and denied, on each resource."""
        patterns, entries = _bindings(args(
            "add", "--allow-principal", "User:bob", "--allow-principal", "User:carol", "--allow-host", "10.0.0.1",
            "--operation", "Read", "--operation", "write", "--deny-principal", "User:eve", "--topic", "clicks",
            "--topic", "logs-", "--resource-pattern-type", "prefixed"))
        self.assertEqual(patterns, [ResourcePattern(ResourceType.TOPIC, "clicks", PatternType.PREFIXED),
                                    ResourcePattern(ResourceType.TOPIC, "logs-", PatternType.PREFIXED)])
        self.assertEqual(len(entries), 6)
        self.assertIn(AccessControlEntry("User:carol", Permission.ALLOW, Operation.WRITE, "10.0.0.1"), entries)
        self.assertIn(AccessControlEntry("User:eve", Permission.DENY, Operation.READ, "*"), entries)

    def test_operation_defaults_to_all(self) -> None:
        patterns, entries = _bindings(args("add", "--allow-principal", "User:bob", "--group", "g", "--cluster"))
        self.assertEqual(patterns, [ResourcePattern(ResourceType.GROUP, "g"),
                                    ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME)])
        self.assertEqual(entries, {AccessControlEntry("User:bob", Permission.ALLOW, Operation.ALL)})

    def test_operation_names(self) -> None:
        self.assertIs(parse_operation("ClusterAction"), Operation.CLUSTER_ACTION)
        self.assertIs(parse_operation("cluster_action"), Operation.CLUSTER_ACTION)
        self.assertIs(parse_operation("IDEMPOTENTWRITE"), Operation.IDEMPOTENT_WRITE)
        self.assertRaises(AclError, parse_operation, "Produce")

    def test_mistakes(self) -> None:
        for argv, message in (
                (["add", "--allow-principal", "User:bob"], "needs a resource: --topic, --group or --cluster"),
                (["add", "--allow-host", "1.2.3.4", "--deny-principal", "User:x", "--topic", "t"],
                 "--allow-host needs --allow-principal"),
                (["add", "--allow-principal", "bob", "--topic", "t"], "principal 'bob' is not TYPE:NAME"),
                (["add", "--allow-principal", "User:bob", "--operation", "Write", "--group", "g"],
                 "a Group ACL cannot name Write: it takes All, Delete, Describe, Read"),
                (["add", "--allow-principal", "User:bob", "--operation", "Write", "--cluster"],
                 "a Cluster ACL cannot name Write"),
                (["remove", "--topic", "*", "--resource-pattern-type", "prefixed"], "a prefixed pattern cannot be '*'"),
        ):
            with self.assertRaises((UsageError, AclError)) as caught:
                _bindings(args(*argv))
            self.assertIn(message, str(caught.exception))

    def test_help_of_each(self) -> None:
        for action in ("add", "remove", "list"):
            out = io.StringIO()
            with self.assertRaises(SystemExit), redirect_stdout(out):
                build_parser().parse_args(["acls", action, "--help"])
            self.assertIn(f"usage: twlog acls {action}", out.getvalue())
        self.assertEqual(args().run, "twlog.cli.acls:list_acls")
        self.assertEqual(args("list", "--resource-pattern-type", "MATCH").resource_pattern_type, "match")


class ConfirmTests(SynchronousTestCase):
    def test_refused_without_a_terminal(self) -> None:
        with self.assertRaises(UsageError) as caught:
            confirm("Remove?", io.StringIO("y\n"))
        self.assertEqual(str(caught.exception),
                         "twlog acls remove asks before removing, and stdin is not a terminal: add --force")

    def test_asks(self) -> None:
        self.assertTrue(confirm("Remove?", Terminal("y\n")))
        self.assertFalse(confirm("Remove?", Terminal("n\n")))
        self.assertFalse(confirm("Remove?", Terminal("")))


class ListFilterTests(SynchronousTestCase):
    literal = ResourcePattern(ResourceType.TOPIC, "logs-1")
    prefixed = ResourcePattern(ResourceType.TOPIC, "logs-", PatternType.PREFIXED)
    wildcard = ResourcePattern(ResourceType.TOPIC, "*")
    group = ResourcePattern(ResourceType.GROUP, "logs-1")

    def selected(self, wanted, how) -> list[ResourcePattern]:
        return [p for p in (self.literal, self.prefixed, self.wildcard, self.group) if _selected(p, wanted, how)]

    def test_filters(self) -> None:
        topic = [ResourcePattern(ResourceType.TOPIC, "logs-1")]
        self.assertEqual(self.selected([], None), [self.literal, self.prefixed, self.wildcard, self.group])
        self.assertEqual(self.selected([], "prefixed"), [self.prefixed])
        self.assertEqual(self.selected(topic, None), [self.literal])
        self.assertEqual(self.selected(topic, "match"), [self.literal, self.prefixed, self.wildcard])
        self.assertEqual(self.selected([ResourcePattern(ResourceType.TOPIC, "logs-")], "any"), [self.prefixed])


class SecureGroupsTests(TestCase):
    """`twlog acls add|remove --group` in a secured ZooKeeper: the group's znodes get the ACL its Read ACLs make."""

    def setUp(self) -> None:
        self.cluster = ZooKeeperCredentials("twlog-cluster", "secret")
        self.zk = FakeZooKeeper(credentials=self.cluster)
        self.zk.start()

    async def test_literal_and_prefixed(self) -> None:
        alice = await record_user_digest(self.zk, "alice", "a-pw")
        await self.zk.create("/consumers/etl-2/ids", makepath=True)  # an existing group the prefix covers
        read = AccessControlEntry("User:alice", Permission.ALLOW, Operation.READ)
        etl = ResourcePattern(ResourceType.GROUP, "etl")
        await change_acls(self.zk, etl, add={read})
        out = io.StringIO()
        with redirect_stdout(out):
            await secure_groups(self.zk, [etl])
        self.assertEqual(out.getvalue(), "ZooKeeper ACL of group etl's nodes (1): writable by the cluster and "
                                         "User:alice\n")
        self.assertEqual(self.zk.server.nodes["/consumers/etl"].acl,
                         group_acl(self.cluster.digest_id, [alice]))
        prefix = ResourcePattern(ResourceType.GROUP, "etl-", PatternType.PREFIXED)
        await change_acls(self.zk, prefix, add={AccessControlEntry("User:*", Permission.ALLOW, Operation.READ)})
        with redirect_stdout(io.StringIO()):
            await secure_groups(self.zk, [prefix])
        self.assertEqual(self.zk.server.nodes["/consumers/etl-2/ids"].acl,
                         group_acl(self.cluster.digest_id, [], everyone=True))

    async def test_nothing_without_credentials_or_groups(self) -> None:
        open_zk = FakeZooKeeper(self.zk.server)
        open_zk.start()
        await secure_groups(open_zk, [ResourcePattern(ResourceType.GROUP, "etl")])
        await secure_groups(self.zk, [ResourcePattern(ResourceType.TOPIC, "etl")])
        self.assertNotIn("/consumers/etl", self.zk.server.nodes)
