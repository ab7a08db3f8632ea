"""The console's login (SCRAM users in ZooKeeper, session cookies, failed logins limited) and its changes
authorized by the cluster's ACLs (docs/console.md, "Login and changes")."""

from __future__ import annotations

from twisted.logger import globalLogPublisher

from tests.console.test_api_groups import GroupsApiTestCase
from tests.console.web import call
from tests.fakelog import FakeLog
from twlog.console import auth
from twlog.coord.acls import change_acls
from twlog.coord.users import UserStore
from twlog.security.acls import AccessControlEntry, Operation, Permission, ResourcePattern, ResourceType
from twlog.security.credentials import make_credential


class LoginTestCase(GroupsApiTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.ok(UserStore(self.zk).add("alice", {m: make_credential(m, "wonderland")
                                                 for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}))
        self.ok(UserStore(self.zk).add("root", {"SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "toor")}))
        self.login = auth.enable_login(self.context, ["User:root"])
        self.addCleanup(self.login.stop)

    def log_in(self, user: str = "alice", password: str = "wonderland", status: int = 200, peer: str = "127.0.0.1"):
        answer = call(self.site, "POST", "/api/login", {"user": user, "password": password}, peer=peer)
        self.assertEqual(answer.status, status, answer.body)
        return answer

    def cookie_of(self, answer) -> dict[str, str]:
        return {"Cookie": answer.cookie().split(";")[0]}

    def allow(self, principal: str, operation: Operation, resource_type: ResourceType, name: str) -> None:
        self.ok(change_acls(self.zk, ResourcePattern(resource_type, name),
                            add=[AccessControlEntry(principal, Permission.ALLOW, operation)]))


class LoginTests(LoginTestCase):
    def test_every_route_but_the_session_needs_a_login(self) -> None:
        for method, path in (("GET", "/api/groups"), ("GET", "/api/groups/etl"), ("GET", "/api/history?series=a"),
                             ("POST", "/api/groups/etl/reset"), ("DELETE", "/api/groups/etl")):
            answer = call(self.site, method, path, {"to": "earliest"} if method == "POST" else None)
            self.assertEqual((answer.status, answer.error), (401, "log in first"), path)
        session = call(self.site, "GET", "/api/session").json
        self.assertEqual((session["user"], session["login_required"]), (None, True))

    def test_login_and_logout(self) -> None:
        answer = self.log_in()
        self.assertEqual(answer.json, {"user": "alice"})
        cookie = answer.cookie()
        self.assertRegex(cookie, r"^twlog_console_session=[A-Za-z0-9_-]{40,}; Path=/; HttpOnly; SameSite=Strict; "
                                 r"Max-Age=28800$")  # (no Secure over plain HTTP)
        headers = self.cookie_of(answer)
        self.assertEqual(call(self.site, "GET", "/api/session", headers=headers).json["user"], "alice")
        self.assertEqual(call(self.site, "GET", "/api/groups", headers=headers).status, 200)
        logout = call(self.site, "POST", "/api/logout", headers=headers)
        self.assertEqual((logout.status, logout.json), (200, {}))
        self.assertIn("Max-Age=0", logout.cookie())
        self.assertEqual(call(self.site, "GET", "/api/groups", headers=headers).status, 401)

    def test_sessions_expire(self) -> None:
        headers = self.cookie_of(self.log_in())
        self.clock.advance(auth.SESSION_S - 1)
        self.assertEqual(call(self.site, "GET", "/api/groups", headers=headers).status, 200)
        self.clock.advance(1)
        self.assertEqual(call(self.site, "GET", "/api/groups", headers=headers).status, 401)
        forged = {"Cookie": "twlog_console_session=made-up"}
        self.assertEqual(call(self.site, "GET", "/api/groups", headers=forged).status, 401)

    def test_wrong_passwords_and_users(self) -> None:
        events = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        self.assertEqual(self.log_in(password="Wonderland", status=401).error, "wrong user or password")
        self.assertIsNone(self.log_in(password="Wonderland", status=401).cookie())
        self.assertEqual(self.log_in(user="bob", status=401).error, "wrong user or password")
        self.assertEqual(self.log_in("root", "toor").json, {"user": "root"})  # (a SCRAM-SHA-512 credential alone)
        failed = [e for e in events if e.get("log_format", "").startswith("console login failed")]
        self.assertEqual([(e["user"], e["host"]) for e in failed],
                         [("alice", "127.0.0.1"), ("alice", "127.0.0.1"), ("bob", "127.0.0.1")])

    def test_bad_parameters(self) -> None:
        for body, name in (({"password": "x"}, "user"), ({"user": "alice"}, "password"), ([], "body")):
            answer = call(self.site, "POST", "/api/login", body)
            self.assertEqual(answer.status, 400)
            self.assertTrue(answer.error.startswith(f"parameter {name}:"), answer.error)
        self.assertEqual(call(self.site, "POST", "/api/login", {"user": "alice", "password": "wonderland"},
                              change=False).status, 403)  # (a form on another site cannot log anyone in)

    def test_failed_logins_are_limited_per_address(self) -> None:
        for _ in range(auth.MAX_FAILURES):
            self.log_in(password="guess", status=401)
        refused = self.log_in(status=429)  # even the right password, until the window passes
        self.assertEqual(refused.error, "too many failed logins from 127.0.0.1: try again in 61 s")
        self.assertEqual(refused.headers.getRawHeaders(b"retry-after"), [b"61"])
        self.log_in(peer="10.0.0.2")  # another address is not limited
        self.clock.advance(auth.FAILURE_WINDOW_S)
        self.log_in()

    def test_read_only_console_still_logs_in(self) -> None:
        self.context.read_only = True
        headers = self.cookie_of(self.log_in())
        answer = call(self.site, "DELETE", "/api/groups/etl", headers=headers)
        self.assertEqual(answer.status, 403)
        self.assertIn("read-only", answer.error)

    def test_without_login(self) -> None:
        self.context.parts.pop(auth.LOGIN)
        answer = call(self.site, "POST", "/api/login", {"user": "alice", "password": "wonderland"})
        self.assertEqual((answer.status, answer.error), (404, "the console has no login (start it with --login)"))


class AuthorizationTests(LoginTestCase):
    def test_changes_need_the_acls(self) -> None:
        """A reset needs Read on the group and Describe on the topic; a delete, Delete on the group; a super user
        needs nothing; changes are logged with the user."""
        alice = self.cookie_of(self.log_in())
        body = {"topic": "clicks", "to": "earliest", "dry_run": False}
        answer = call(self.site, "POST", "/api/groups/etl/reset", body, headers=alice)
        self.assertEqual((answer.status, answer.error),
                         (403, "User:alice may not Read group 'etl' (the cluster's ACLs: twlog acls)"))
        self.allow("User:alice", Operation.READ, ResourceType.GROUP, "etl")
        answer = call(self.site, "POST", "/api/groups/etl/reset", body, headers=alice)
        self.assertEqual((answer.status, answer.error),
                         (403, "User:alice may not Describe topic 'clicks' (the cluster's ACLs: twlog acls)"))
        self.allow("User:alice", Operation.READ, ResourceType.TOPIC, "clicks")  # (Read implies Describe)
        events = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        answer = call(self.site, "POST", "/api/groups/etl/reset", body, headers=alice)
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(self.committed("etl", "0-0"), 0)
        [change] = [e for e in events if e.get("log_format", "").startswith("console change")]
        self.assertEqual(change["who"], "alice from 127.0.0.1")
        answer = call(self.site, "DELETE", "/api/groups/etl", headers=alice)
        self.assertEqual((answer.status, answer.error),
                         (403, "User:alice may not Delete group 'etl' (the cluster's ACLs: twlog acls)"))
        root = self.cookie_of(self.log_in("root", "toor"))
        self.assertEqual(call(self.site, "DELETE", "/api/groups/etl", headers=root).status, 200)

    def test_every_topic_of_a_group_reset(self) -> None:
        """A reset of all the group's topics needs Describe on each."""
        self.commit("etl", "0-0", 0, topic="views")
        self.ok(self.zk.create("/brokers/topics/views/0", b"1", ephemeral=True, makepath=True))
        self.brokers.add(("127.0.0.1", 9092), "views", 0, FakeLog([b"v"]))
        self.allow("User:alice", Operation.READ, ResourceType.GROUP, "etl")
        self.allow("User:alice", Operation.DESCRIBE, ResourceType.TOPIC, "clicks")
        alice = self.cookie_of(self.log_in())
        answer = call(self.site, "POST", "/api/groups/etl/reset", {"to": "latest"}, headers=alice)
        self.assertEqual((answer.status, answer.error),
                         (403, "User:alice may not Describe topic 'views' (the cluster's ACLs: twlog acls)"))
