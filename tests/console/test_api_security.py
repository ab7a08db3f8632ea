"""The users' and ACLs' routes over HTTP (docs/console.md, "Security"), on a FakeZooKeeper."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.console.web import call
from tests.fakezk import FakeZooKeeper
from twlog.console import auth
from twlog.console.app import make_site
from twlog.console.context import ConsoleContext
from twlog.coord.acls import read_acls
from twlog.coord.users import UserStore, user_path
from twlog.security.acls import AccessControlEntry, Operation, Permission, ResourcePattern, ResourceType
from twlog.security.credentials import check_plain, parse_user_config

BOB_READS = {"principal": "User:bob", "operation": "read", "resource_type": "topic", "resource_name": "clicks"}


class SecurityApiTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.zk = FakeZooKeeper()
        self.zk.start()
        self.clock = Clock()
        self.context = ConsoleContext(zk=self.zk, zookeeper="fake:2181", reactor=self.clock)
        self.site = make_site(self.context)

    def request(self, method: str, path: str, body=None, status: int = 200, **kwargs):
        answer = call(self.site, method, path, body, **kwargs)
        self.assertEqual(answer.status, status, answer.body)
        return answer.json

    def test_users(self) -> None:
        self.assertEqual(self.request("GET", "/api/users"), {"users": []})
        added = self.request("POST", "/api/users", {"user": "alice", "password": "wonderland"})
        self.assertEqual(added, {"users": [{"user": "alice", "mechanisms": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}]})
        value, _ = self.successResultOf(self.zk.get(user_path("alice")))
        credential = parse_user_config(value)["SCRAM-SHA-512"]
        self.assertTrue(check_plain(credential, "SCRAM-SHA-512", "wonderland"))  # (as twlog users add stores it)
        self.request("POST", "/api/users", {"user": "bob", "password": "x", "mechanism": "SCRAM-SHA-256"})
        self.assertEqual(self.request("GET", "/api/users")["users"][1],
                         {"user": "bob", "mechanisms": ["SCRAM-SHA-256"]})
        self.assertEqual(self.request("DELETE", "/api/users/bob")["users"], added["users"])
        self.assertEqual(self.request("DELETE", "/api/users/bob", status=404)["error"], "user 'bob' does not exist")

    def test_user_parameters(self) -> None:
        for body, name in (({"user": "a/b", "password": "x"}, "user"), ({"password": "x"}, "user"),
                           ({"user": "a"}, "password"), ({"user": "a", "password": ""}, "password"),
                           ({"user": "a", "password": "x", "mechanism": "PLAIN"}, "mechanism"), ("x", "body")):
            error = self.request("POST", "/api/users", body, status=400)["error"]
            self.assertTrue(error.startswith(f"parameter {name}: "), error)
        self.assertEqual(self.request("POST", "/api/users", {"user": "a", "password": "x"}, status=403,
                                      change=False)["error"], "a change must carry the header X-Twlog-Console: 1")
        self.context.read_only = True
        self.request("DELETE", "/api/users/a", status=403)
        self.request("POST", "/api/acls", BOB_READS, status=403)
        self.assertEqual(self.successResultOf(UserStore(self.zk).list()), [])

    def test_acls(self) -> None:
        answer = self.request("POST", "/api/acls", BOB_READS)
        bob = {"principal": "User:bob", "host": "*", "operation": "Read", "permission": "Allow",
               "resource_type": "Topic", "resource_name": "clicks", "pattern_type": "LITERAL"}
        self.assertEqual(answer, {"acls": [bob]})
        self.assertEqual(self.successResultOf(read_acls(self.zk)), {
            ResourcePattern(ResourceType.TOPIC, "clicks"): {AccessControlEntry("User:bob", Permission.ALLOW,
                                                                               Operation.READ)}})
        prefixed = {"principal": "User:ann", "operation": "All", "permission": "deny", "resource_type": "Group",
                    "resource_name": "etl-", "pattern_type": "prefixed", "host": "10.0.0.1"}
        self.request("POST", "/api/acls", prefixed)
        self.request("POST", "/api/acls", {"principal": "User:ann", "operation": "Alter", "resource_type": "Cluster"})
        self.assertEqual(self.request("GET", "/api/acls")["total"], 3)
        self.assertEqual(self.request("GET", "/api/acls?principal=User:bob")["acls"], [bob])
        listed = self.request("GET", "/api/acls?resource_type=group&resource_name=etl-daily")["acls"]
        self.assertEqual([(a["resource_name"], a["permission"], a["host"]) for a in listed],
                         [("etl-", "Deny", "10.0.0.1")])
        self.assertEqual(self.request("GET", "/api/acls?limit=1&offset=2")["acls"][0]["resource_type"], "Topic")
        self.assertEqual(self.request("DELETE", "/api/acls", BOB_READS), {"acls": []})
        self.assertIn("no ACL", self.request("DELETE", "/api/acls", BOB_READS, status=404)["error"])

    def test_acl_parameters(self) -> None:
        for change, name in ((dict(principal="bob"), "principal"), (dict(operation="Produce"), "operation"),
                             (dict(resource_type="Broker"), "resource_type"), (dict(permission="Maybe"), "permission"),
                             (dict(pattern_type="regex"), "pattern_type"), (dict(resource_name="a/b"), "resource_name"),
                             (dict(operation="ClusterAction"), "operation"),
                             (dict(resource_type="Cluster", resource_name="x"), "resource_name")):
            error = self.request("POST", "/api/acls", {**BOB_READS, **change}, status=400)["error"]
            self.assertTrue(error.startswith(f"parameter {name}: "), (change, error))
        self.assertTrue(self.request("GET", "/api/acls?resource_type=x", status=400)["error"].startswith(
            "parameter resource_type: "))

    def test_with_a_login_changes_need_alter_on_the_cluster(self) -> None:
        self.request("POST", "/api/users", {"user": "alice", "password": "wonderland"})
        self.request("POST", "/api/users", {"user": "root", "password": "toor"})
        login = auth.enable_login(self.context, ["User:root"])
        self.addCleanup(login.stop)
        self.assertEqual(self.request("GET", "/api/users", status=401)["error"], "log in first")

        def cookie(user: str, password: str) -> dict[str, str]:
            answer = call(self.site, "POST", "/api/login", {"user": user, "password": password})
            return {"Cookie": answer.cookie().split(";")[0]}

        alice, root = cookie("alice", "wonderland"), cookie("root", "toor")
        self.assertEqual(self.request("GET", "/api/acls", headers=alice, status=403)["error"],
                         "User:alice may not Describe the cluster (the cluster's ACLs: twlog acls)")
        self.request("POST", "/api/acls", {"principal": "User:alice", "operation": "Describe",
                                           "resource_type": "Cluster"}, headers=root)
        self.assertEqual(self.request("GET", "/api/acls", headers=alice)["total"], 1)
        self.assertEqual(self.request("POST", "/api/acls", BOB_READS, headers=alice, status=403)["error"],
                         "User:alice may not Alter the cluster (the cluster's ACLs: twlog acls)")
        self.request("DELETE", "/api/users/alice", headers=alice, status=403)
        self.request("DELETE", "/api/users/alice", headers=root)
