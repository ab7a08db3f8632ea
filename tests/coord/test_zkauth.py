"""Tests for ZooKeeper credentials and the znode ACL policy (twlog.coord.zkauth): no ZooKeeper, no reactor."""

from __future__ import annotations

import os

from twisted.internet.defer import Deferred, succeed
from twisted.trial.unittest import SynchronousTestCase

from twlog.coord import paths
from twlog.coord.zkauth import (
    ACL,
    WORLD_ALL,
    WORLD_READ,
    Permissions,
    ZooKeeperCredentials,
    ZooKeeperCredentialsError,
    acl_for,
    credentials_file,
    digest_id,
    ensure_credentials_file,
    group_acl,
    group_root,
    identity_acl,
    is_sensitive,
    node_acl,
    parse_credentials,
    read_credentials_file,
)

CLUSTER = "twlog:69tgNrZ8IXX5O37TLpMELBy/wAU="


class CredentialsTests(SynchronousTestCase):
    def test_digest_id_is_zookeepers(self) -> None:
        """ZooKeeper's DigestAuthenticationProvider.generateDigest("super:test"), as ZooKeeper's administrator's
        guide gives it for zookeeper.DigestAuthenticationProvider.superDigest."""
        self.assertEqual(digest_id("super", "test"), "super:D/InIHSb7yEEbrWz8b9l71RjZJU=")
        self.assertEqual(ZooKeeperCredentials("super", "test").digest_id, "super:D/InIHSb7yEEbrWz8b9l71RjZJU=")

    def test_auth_data_and_no_password_in_repr(self) -> None:
        credentials = ZooKeeperCredentials("twlog", "s3cret:with=colon")
        self.assertEqual(credentials.auth_data, [("digest", "twlog:s3cret:with=colon")])
        self.assertNotIn("s3cret", repr(credentials))

    def test_one_line_or_properties(self) -> None:
        """A file is one line user:password (the password may hold ':'), or username= and password= lines;
        blank lines and # comments are skipped."""
        expected = ZooKeeperCredentials("twlog", "pa:ss=word")
        self.assertEqual(parse_credentials("# cluster\ntwlog:pa:ss=word\n\n"), expected)
        self.assertEqual(parse_credentials("username=twlog\n# x\npassword=pa:ss=word\n"), expected)
        self.assertEqual(parse_credentials("password = pa:ss=word\nusername = twlog"), expected)

    def test_bad_files_are_one_line(self) -> None:
        for text, says in [
            ("", "must hold one line user:password"),
            ("twlog\n", "must hold one line user:password"),
            ("a:b\nc:d\n", "must hold one line user:password"),
            ("username=twlog\n", "needs both username= and password="),
            ("username=twlog\npassword=x\nmechanism=y\n", "'mechanism' is not username= or password="),
            ("twlog:\n", "has an empty password"),
            (":secret\n", "not empty, no ':' and no spaces"),
            ("username=a b\npassword=x\n", "not empty, no ':' and no spaces"),
        ]:
            e = self.assertRaises(ZooKeeperCredentialsError, parse_credentials, text, "F")
            self.assertIn(says, str(e), text)
            self.assertNotIn("\n", str(e))

    def test_read_file(self) -> None:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("twlog:secret\n")
        self.assertEqual(read_credentials_file(path), ZooKeeperCredentials("twlog", "secret"))
        os.remove(path)
        e = self.assertRaises(ZooKeeperCredentialsError, read_credentials_file, path)
        self.assertEqual(str(e), f"cannot read the ZooKeeper credentials file {path}: No such file or directory")

    def test_credentials_file(self) -> None:
        """A path gives its credentials (C{~} expanded); no path, none."""
        self.assertIsNone(credentials_file(None))
        path = self.mktemp()
        with open(path, "w") as f:
            f.write("twlog:secret\n")
        self.assertEqual(credentials_file(path), ZooKeeperCredentials("twlog", "secret"))


class EnsureCredentialsFileTests(SynchronousTestCase):
    def test_made_once_then_read(self) -> None:
        """A missing file is made (0600, a random password), then read as it is."""
        path = self.mktemp()
        made = ensure_credentials_file(path)
        self.assertEqual(made.user, "twlog-cluster")
        self.assertGreaterEqual(len(made.password), 24)
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        self.assertEqual(read_credentials_file(path), made)
        self.assertEqual(ensure_credentials_file(path, "other"), made)
        self.assertNotEqual(ensure_credentials_file(self.mktemp()).password, made.password)


class PolicyTests(SynchronousTestCase):
    def test_paths(self) -> None:
        self.assertTrue(is_sensitive("/config/users"))
        self.assertTrue(is_sensitive("/config/users/bob"))
        self.assertTrue(is_sensitive("/twlog/zookeeper-digests/bob"))
        self.assertFalse(is_sensitive("/config/usersx"))
        self.assertFalse(is_sensitive("/config/topics/t"))
        self.assertEqual(group_root("/consumers/g/offsets/t/0-0"), "/consumers/g")
        self.assertEqual(group_root("/consumers/g"), "/consumers/g")
        self.assertIsNone(group_root("/consumers"))
        self.assertIsNone(group_root("/consumersx/g"))

    def test_node_acls(self) -> None:
        """The cluster's identity has every permission; everyone may read, except credentials."""
        own = ACL("digest", CLUSTER, Permissions.ALL)
        for path in (paths.broker_id_path(1), paths.broker_topic_path("t", 1), paths.CONTROLLER,
                     paths.CONTROLLER_EPOCH, paths.partition_state_path("t", 0), paths.replicated_topic_path("t"),
                     paths.CONSUMERS, "/config/topics/t", "/kafka-acl/Topic/t", "/kafka-acl-changes/x"):
            self.assertEqual(node_acl(path, CLUSTER), [own, ACL("world", "anyone", Permissions.READ)], path)
        for path in ("/config/users/bob", "/twlog/zookeeper-digests/bob"):
            self.assertEqual(node_acl(path, CLUSTER), [own], path)

    def test_group_acl(self) -> None:
        alice, bob = digest_id("alice", "a"), digest_id("bob", "b")
        self.assertEqual(group_acl(CLUSTER, [alice, bob, alice, CLUSTER]),
                         [identity_acl(CLUSTER), identity_acl(alice), identity_acl(bob), WORLD_READ])
        self.assertEqual(group_acl(CLUSTER, [], everyone=True), [identity_acl(CLUSTER), WORLD_ALL])

    def acl_for(self, path: str, acls: dict[str, list[ACL]]) -> list[ACL]:
        reads: list[str] = []

        def read_acl(at: str) -> Deferred:
            reads.append(at)
            return succeed(acls.get(at))

        result = self.successResultOf(Deferred.fromCoroutine(acl_for(read_acl, path, CLUSTER)))
        self.reads = reads
        return result

    def test_acl_for_group_nodes_is_the_roots(self) -> None:
        """A node under a group's root takes the root's ACL; the root and other nodes, the policy's."""
        root_acl = group_acl(CLUSTER, [digest_id("alice", "a")])
        self.assertEqual(self.acl_for(paths.offset_path("g", "t", "0-0"), {"/consumers/g": root_acl}), root_acl)
        self.assertEqual(self.reads, ["/consumers/g"])
        self.assertEqual(self.acl_for("/consumers/g", {}), node_acl("/consumers/g", CLUSTER))
        self.assertEqual(self.acl_for(paths.consumer_ids_path("g", "c"), {}), node_acl("/consumers/g", CLUSTER))
        self.assertEqual(self.acl_for(paths.broker_id_path(1), {}), node_acl(paths.broker_id_path(1), CLUSTER))
        self.assertEqual(self.reads, [])
