"""Tests for users' digest identities, group ACLs and securing a tree (twlog.coord.zksecure), on the fake
ZooKeeper (which keeps ACLs without enforcing them: tests.integration.test_zk_acls has ZooKeeper enforce them)."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper, FakeZooKeeperServer
from twlog.coord import paths
from twlog.coord.zkauth import WORLD_ALL, WORLD_READ, ZooKeeperCredentials, identity_acl, node_acl
from twlog.coord.zksecure import (
    ZooKeeperSecurityError,
    digest_path,
    forget_user_digest,
    record_user_digest,
    secure_tree,
    set_group_acl,
    user_digest_ids,
)

CLUSTER = ZooKeeperCredentials("twlog", "cluster")
ALICE = ZooKeeperCredentials("alice", "a")


def run(coroutine):
    return Deferred.fromCoroutine(coroutine)


class SecureTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.server = FakeZooKeeperServer()
        self.zk = FakeZooKeeper(self.server, credentials=CLUSTER)
        self.zk.start()
        self.anonymous = FakeZooKeeper(self.server)
        self.anonymous.start()

    def acl(self, path: str):
        return self.successResultOf(self.zk.get_acls(path))

    def test_record_and_forget_a_users_digest(self) -> None:
        self.assertEqual(self.successResultOf(run(record_user_digest(self.zk, "alice", "a"))), ALICE.digest_id)
        self.assertEqual(self.successResultOf(self.zk.get(digest_path("alice")))[0], ALICE.digest_id.encode())
        self.assertEqual(self.successResultOf(run(user_digest_ids(self.zk, ["alice"]))), {"alice": ALICE.digest_id})
        self.assertTrue(self.successResultOf(run(forget_user_digest(self.zk, "alice"))))
        self.assertFalse(self.successResultOf(run(forget_user_digest(self.zk, "alice"))))
        e = self.failureResultOf(run(user_digest_ids(self.zk, ["alice"])), ZooKeeperSecurityError).value
        self.assertEqual(str(e), "user alice has no ZooKeeper identity recorded (twlog users add records it with "
                                 "the user's password)")

    def test_needs_the_clusters_credentials(self) -> None:
        for attempt in (record_user_digest(self.anonymous, "alice", "a"), set_group_acl(self.anonymous, "g", []),
                        secure_tree(self.anonymous)):
            e = self.failureResultOf(run(attempt), ZooKeeperSecurityError).value
            self.assertIn("needs the cluster's ZooKeeper credentials (--zookeeper-credentials-file)", str(e))

    def test_group_acl_covers_the_subtree(self) -> None:
        self.successResultOf(run(record_user_digest(self.zk, "alice", "a")))
        self.successResultOf(self.anonymous.create(paths.offset_path("g", "t", "0-0"), b"5", makepath=True))
        count = self.successResultOf(run(set_group_acl(self.zk, "g", ["User:alice"])))
        self.assertEqual(count, 4)  # /consumers/g, offsets, offsets/t, offsets/t/0-0
        expected = [identity_acl(CLUSTER.digest_id), identity_acl(ALICE.digest_id), WORLD_READ]
        for path in ("/consumers/g", paths.offset_path("g", "t"), paths.offset_path("g", "t", "0-0")):
            self.assertEqual(self.acl(path), expected, path)
        self.assertEqual(self.acl(paths.CONSUMERS), [WORLD_ALL])  # (not the group's)

    def test_group_acl_makes_the_root_and_opens_to_everyone(self) -> None:
        self.assertEqual(self.successResultOf(run(set_group_acl(self.zk, "new", ["User:*"]))), 1)
        self.assertEqual(self.acl("/consumers/new"), [identity_acl(CLUSTER.digest_id), WORLD_ALL])
        self.successResultOf(run(set_group_acl(self.zk, "new", ["User:ANONYMOUS"])))
        self.assertEqual(self.acl("/consumers/new"), [identity_acl(CLUSTER.digest_id), WORLD_ALL])

    def test_group_acl_refuses_unknown_users_and_other_principals(self) -> None:
        e = self.failureResultOf(run(set_group_acl(self.zk, "g", ["User:bob"])), ZooKeeperSecurityError).value
        self.assertIn("user bob has no ZooKeeper identity recorded", str(e))
        e = self.failureResultOf(run(set_group_acl(self.zk, "g", ["Group:ops"])), ZooKeeperSecurityError).value
        self.assertEqual(str(e), "group g: only User: principals have ZooKeeper identities, not Group:ops")

    def test_secure_tree(self) -> None:
        """Every node but ZooKeeper's own gets the policy's ACL; a group keeps the members its root names."""
        for path in (paths.broker_id_path(1), "/config/users/alice", "/zookeeper/quota",
                     paths.offset_path("g", "t", "0-0")):
            self.successResultOf(self.anonymous.create(path, b"", makepath=True))
        self.successResultOf(self.anonymous.set_acls("/consumers/g", [identity_acl(ALICE.digest_id), WORLD_READ]))
        self.assertEqual(self.successResultOf(run(secure_tree(self.zk))), 11)
        for path in ("/brokers", paths.broker_id_path(1), paths.CONSUMERS, "/config"):
            self.assertEqual(self.acl(path), node_acl(path, CLUSTER.digest_id), path)
        self.assertEqual(self.acl("/config/users/alice"), [identity_acl(CLUSTER.digest_id)])
        group = [identity_acl(CLUSTER.digest_id), identity_acl(ALICE.digest_id), WORLD_READ]
        self.assertEqual(self.acl(paths.offset_path("g", "t", "0-0")), group)
        self.assertEqual(self.acl("/zookeeper/quota"), [WORLD_ALL])
        self.successResultOf(run(secure_tree(self.zk, unsecure=True)))
        self.assertEqual(self.acl(paths.broker_id_path(1)), [WORLD_ALL])
