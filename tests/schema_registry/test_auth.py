"""The registry's basic auth, as Confluent's registry answers it: Jetty's password file, 401 with a challenge and
Confluent's JSON body, 403 for a user without an allowed role, refusals logged without the password.

Requests go through the real twisted.web stack (an HTTPChannel on a StringTransport), so the status line, the
headers and the body are what a client reads."""

from __future__ import annotations

import base64
import hashlib
import json

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from tests.schema_registry.support import FakeJournal, Topic
from twlog.errors import TwlogError
from twlog.schema_registry.auth import DEFAULT_REALM, BasicAuth, read_password_file
from twlog.schema_registry.core import SchemaRegistry
from twlog.schema_registry.web import make_site

SCHEMA = json.dumps({"schema": json.dumps({"type": "record", "name": "U", "fields": [
    {"name": "n", "type": "string"}]})}).encode()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class PasswordFileTests(SynchronousTestCase):
    def write(self, text: str) -> str:
        path = self.mktemp()
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def test_jetty_format(self) -> None:
        """Jetty's PropertyUserStore lines: `user: password[,role...]`, `=` too, comments, MD5:."""
        md5 = hashlib.md5(b"s3cret").hexdigest()
        users = read_password_file(self.write(
            "# Confluent's example\n! also a comment\n\nfret: letmein,developer,admin\n"
            f"barney = MD5:{md5.upper()}, user\nplain:pass\n"))
        self.assertEqual(sorted(users), ["barney", "fret", "plain"])
        self.assertEqual(users["fret"].roles, ("developer", "admin"))
        self.assertEqual(users["barney"].roles, ("user",))
        self.assertEqual(users["plain"].roles, ())
        self.assertTrue(users["fret"].check(b"letmein"))
        self.assertFalse(users["fret"].check(b"letmein "))
        self.assertTrue(users["barney"].check(b"s3cret"))
        self.assertFalse(users["barney"].check(md5.encode()))  # the digest is not the password
        self.assertNotIn("letmein", repr(users["fret"]))

    def test_refused_lines(self) -> None:
        for text, why in [("fret: CRYPT:adpexzg3FUZAk,admin\n", "line 1: user 'fret' has a CRYPT: password"),
                          ("# x\nfret: OBF:1v2j1uum1xtv1zej1zer1xtn1uvk1v1v\n", "line 2: user 'fret' has a OBF:"),
                          ("fret: MD5:abc\n", "line 1: user 'fret' has an MD5: password that is not 32 hex digits"),
                          ("fret\n", "line 1: not 'user: password[,role...]'"),
                          ("a: b\na: c\n", "line 2: user 'a' is given twice"),
                          ("# nobody\n", "names no user")]:
            path = self.write(text)
            with self.assertRaises(TwlogError) as raised:
                read_password_file(path)
            self.assertIn(why, str(raised.exception))
            self.assertIn(f"--basic-auth-file {path}", str(raised.exception))
            self.assertNotIn("\n", str(raised.exception))
        with self.assertRaises(TwlogError) as raised:
            read_password_file("/nonexistent/passwords")
        self.assertEqual(str(raised.exception),
                         "cannot read --basic-auth-file /nonexistent/passwords: No such file or directory")


class BasicAuthTests(SynchronousTestCase):
    def setUp(self) -> None:
        path = self.mktemp()
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"fret: letmein,developer\nbarney: MD5:{hashlib.md5(b'rubble').hexdigest()},reader\n"
                    "norole: x\n")
        self.path = path
        self.logged: list[dict] = []
        globalLogPublisher.addObserver(self.logged.append)
        self.addCleanup(globalLogPublisher.removeObserver, self.logged.append)

    def site(self, **auth):
        site = make_site(SchemaRegistry(FakeJournal(Topic()), reactor=Clock()))
        site.timeOut = None
        site.resource = BasicAuth.from_file(self.path, **auth).protect(site.resource)
        return site

    def request(self, site, method: str, path: str, authorization: str | None = None, body: bytes = b""):
        """(status, headers, body) of one HTTP/1.1 request."""
        peer = IPv4Address("TCP", "127.0.0.1", 40000)
        channel = site.buildProtocol(peer)
        transport = StringTransport(peerAddress=peer, hostAddress=IPv4Address("TCP", "127.0.0.1", 8081))
        channel.makeConnection(transport)
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}",
                 "Content-Type: application/vnd.schemaregistry.v1+json", "Connection: close"]
        if authorization is not None:
            lines.append(f"Authorization: {authorization}")
        channel.dataReceived(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head, _, payload = transport.value().partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode().split("\r\n")
        headers: dict[str, list[str]] = {}
        for line in header_lines:
            name, _, value = line.partition(": ")
            headers.setdefault(name.lower(), []).append(value)
        if "chunked" in headers.get("transfer-encoding", []):
            payload = _unchunk(payload)
        channel.connectionLost(None)
        return int(status_line.split()[1]), headers, payload

    def refused_lines(self) -> list[str]:
        return [formatEvent(e) for e in self.logged if "refused" in formatEvent(e)]

    def test_no_credentials(self) -> None:
        status, headers, payload = self.request(self.site(), "GET", "/subjects")
        self.assertEqual(status, 401)
        self.assertEqual(headers["www-authenticate"], [f'basic realm="{DEFAULT_REALM}"'])
        self.assertEqual(json.loads(payload), {"error_code": 401, "message": "Unauthorized"})
        self.assertEqual(headers["content-type"], ["application/vnd.schemaregistry.v1+json"])
        self.assertEqual(self.refused_lines(), [])  # a first request without credentials is not worth a line

    def test_right_password(self) -> None:
        site = self.site()
        status, _, payload = self.request(site, "POST", "/subjects/u-value/versions", basic("fret", "letmein"),
                                          SCHEMA)
        self.assertEqual((status, json.loads(payload)), (200, {"id": 1}))
        status, _, payload = self.request(site, "GET", "/subjects", basic("barney", "rubble"))
        self.assertEqual((status, json.loads(payload)), (200, ["u-value"]))
        status, _, payload = self.request(site, "GET", "/", basic("norole", "x"))
        self.assertEqual((status, json.loads(payload)), (200, {}))

    def test_wrong_password_and_unknown_user(self) -> None:
        site = self.site(realm="twlog")
        for authorization, reason in [(basic("fret", "letmeout"), "wrong password for user 'fret'"),
                                      (basic("wilma", "letmein"), "unknown user 'wilma'"),
                                      ("Basic not-base64!", "a malformed Basic Authorization header"),
                                      ("Bearer abc", "an Authorization header that is not Basic")]:
            status, headers, payload = self.request(site, "GET", "/subjects", authorization)
            self.assertEqual(status, 401, authorization)
            self.assertEqual(headers["www-authenticate"], ['basic realm="twlog"'])
            self.assertEqual(json.loads(payload), {"error_code": 401, "message": "Unauthorized"})
            line = self.refused_lines()[-1]
            self.assertEqual(line, f"schema registry: refused GET /subjects from 127.0.0.1: {reason}")
        self.assertFalse(any("letme" in line for line in self.refused_lines()))  # never the password

    def test_roles(self) -> None:
        """Confluent's authentication.roles: only users with one of them; the others are authenticated, then 403."""
        site = self.site(roles="developer,admin")
        status, _, _ = self.request(site, "GET", "/subjects", basic("fret", "letmein"))
        self.assertEqual(status, 200)
        for user, password, held in [("barney", "rubble", "reader"), ("norole", "x", "none")]:
            status, headers, payload = self.request(site, "GET", "/subjects", basic(user, password))
            self.assertEqual((status, json.loads(payload)), (403, {"error_code": 403, "message": "Forbidden"}))
            self.assertNotIn("www-authenticate", headers)
            self.assertIn(f"user '{user}' has none of the roles developer, admin (--basic-auth-roles; it has {held})",
                          self.refused_lines()[-1])
        self.assertEqual(self.request(self.site(roles="*"), "GET", "/subjects", basic("norole", "x"))[0], 200)

    def test_read_only_roles(self) -> None:
        """--basic-auth-read-only-roles: reads (lookups and compatibility checks too) answered, writes 403."""
        for roles in ("developer", None):
            site = self.site(roles=roles, read_only="reader")
            self.assertEqual(self.request(site, "POST", "/subjects/u-value/versions", basic("fret", "letmein"),
                                          SCHEMA)[0], 200)
            reader = basic("barney", "rubble")
            self.assertEqual(self.request(site, "GET", "/subjects", reader)[:1], (200,))
            self.assertEqual(self.request(site, "POST", "/subjects/u-value", reader, SCHEMA)[0], 200)  # a lookup
            self.assertEqual(self.request(site, "POST", "/compatibility/subjects/u-value/versions/latest", reader,
                                          SCHEMA)[0], 200)
            for method, path in [("POST", "/subjects/u-value/versions"), ("DELETE", "/subjects/u-value"),
                                 ("PUT", "/config")]:
                status, _, payload = self.request(site, method, path, reader, SCHEMA)
                self.assertEqual((status, json.loads(payload)), (403, {"error_code": 403, "message": "Forbidden"}))
                self.assertEqual(self.refused_lines()[-1], f"schema registry: refused {method} {path} from "
                                 "127.0.0.1: user 'barney' may only read (--basic-auth-read-only-roles)")
        # a user without roles: allowed when no --basic-auth-roles is given, refused when it is
        self.assertEqual(self.request(self.site(read_only="reader"), "GET", "/", basic("norole", "x"))[0], 200)
        self.assertEqual(self.request(self.site(roles="developer", read_only="reader"), "GET", "/",
                                      basic("norole", "x"))[0], 403)
        self.assertIn("has none of the roles developer, reader (--basic-auth-roles, --basic-auth-read-only-roles; "
                      "it has none)", self.refused_lines()[-1])

    def test_head(self) -> None:
        status, headers, payload = self.request(self.site(), "HEAD", "/subjects")
        self.assertEqual((status, payload), (401, b""))


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_text, _, data = data.partition(b"\r\n")
        size = int(size_text, 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2:]
    return out
