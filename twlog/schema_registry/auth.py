# -*- test-case-name: tests.schema_registry.test_auth -*-
"""Basic auth for the registry, as Confluent's does it (C{authentication.method=BASIC}).

Users come from a file in the format of Jetty's C{PropertyFileLoginModule}, the one Confluent's registry reads
(C{--basic-auth-file}): one C{user: password[,role...]} line per user (C{=} also separates; C{#} and C{!} start
comments).  A password is plain text or C{MD5:} and the hex MD5 of the password; Jetty's C{CRYPT:} and C{OBF:}
forms are refused at start, in one line naming the line.

Twisted's guard does the HTTP: L{BasicAuthWrapper} is its C{HTTPAuthSessionWrapper} with a
C{BasicCredentialFactory}, a C{Portal} over L{PasswordFileChecker} and L{RegistryRealm}.  A request without
credentials, with a wrong password or an unknown user is answered 401 with C{WWW-Authenticate: basic realm="..."}
and Confluent's body, C{{"error_code":401,"message":"Unauthorized"}}; a user with none of C{--basic-auth-roles}
(Confluent's C{authentication.roles}), 403 with C{{"error_code":403,"message":"Forbidden"}}, and a write by a
user of C{--basic-auth-read-only-roles} only, 403 too.  Each refusal is logged in one line naming the user and
the address, never the password.
"""

from __future__ import annotations

import hashlib
import hmac
import json

import attrs
from twisted.cred import error
from twisted.cred.checkers import ICredentialsChecker
from twisted.cred.credentials import IUsernamePassword
from twisted.cred.portal import IRealm, Portal
from twisted.internet.defer import fail, succeed
from twisted.logger import Logger
from twisted.web import resource
from twisted.web.guard import BasicCredentialFactory, HTTPAuthSessionWrapper
from zope.interface import implementer

from twlog.client.kafka_settings import property_lines
from twlog.errors import TwlogError

__all__ = ["DEFAULT_REALM", "BasicAuth", "BasicAuthWrapper", "PasswordFileChecker", "RegistryRealm", "User",
           "read_password_file"]

#: The realm of Confluent's documentation (C{authentication.realm=SchemaRegistry-Props}, the JAAS section its
#: examples name); rest-utils' own default is empty, which names no JAAS section.
DEFAULT_REALM = "SchemaRegistry-Props"
#: The content type of the refusals, as the registry's other answers.
_CONTENT_TYPE = b"application/vnd.schemaregistry.v1+json"


@attrs.frozen
class User:
    """One line of the password file: the user, how its password is checked, and its roles."""

    name: str
    scheme: str  # "plain" or "md5"
    secret: str = attrs.field(repr=False)
    roles: tuple[str, ...] = ()

    def check(self, password: bytes) -> bool:
        """Whether C{password} is this user's (compared in constant time)."""
        if self.scheme == "md5":
            given = hashlib.md5(password, usedforsecurity=False).hexdigest()
            return hmac.compare_digest(given, self.secret.lower())
        return hmac.compare_digest(password, self.secret.encode("utf-8"))


def _split(line: str) -> tuple[str, str] | None:
    """A properties line's key and value: split at the first C{:} or C{=}, else at the first blank."""
    for index, char in enumerate(line):
        if char in ":=":
            return line[:index].strip(), line[index + 1:].strip()
        if char.isspace():
            rest = line[index:].strip()
            if rest[:1] in (":", "="):
                rest = rest[1:].strip()
            return line[:index], rest
    return None


def read_password_file(path: str) -> dict[str, User]:
    """The users of the password file C{path} (Jetty's C{PropertyFileLoginModule} format).

    @raise TwlogError: the file cannot be read, or a line is not C{user: password[,role...]}, or its password is
        in a form not supported (one line naming the file and the line).
    """
    users: dict[str, User] = {}
    for number, line in property_lines(path, "--basic-auth-file"):
        where = f"--basic-auth-file {path} line {number}"
        parts = _split(line)
        if parts is None or not parts[0] or not parts[1]:
            raise TwlogError(f"{where}: not 'user: password[,role...]'")
        name, value = parts
        credential, *roles = [part.strip() for part in value.split(",")]
        upper = credential.upper()
        if upper.startswith(("CRYPT:", "OBF:")):
            raise TwlogError(f"{where}: user {name!r} has a {credential.split(':', 1)[0]}: password, which twlog "
                             "does not read (give the password in plain text or as MD5:<hex digest>)")
        if upper.startswith("MD5:"):
            digest = credential[4:].strip()
            if len(digest) != 32 or any(c not in "0123456789abcdefABCDEF" for c in digest):
                raise TwlogError(f"{where}: user {name!r} has an MD5: password that is not 32 hex digits")
            user = User(name, "md5", digest, tuple(r for r in roles if r))
        else:
            user = User(name, "plain", credential, tuple(r for r in roles if r))
        if name in users:
            raise TwlogError(f"{where}: user {name!r} is given twice")
        users[name] = user
    if not users:
        raise TwlogError(f"--basic-auth-file {path} names no user (lines 'user: password[,role...]')")
    return users


@implementer(ICredentialsChecker)
class PasswordFileChecker:
    """Checks a user name and password against the users of the password file."""

    credentialInterfaces = (IUsernamePassword,)

    def __init__(self, users: dict[str, User]) -> None:
        self.users = users

    def requestAvatarId(self, credentials):
        name = credentials.username.decode("utf-8", errors="replace")
        user = self.users.get(name)
        if user is None:  # (the name is the client's: at most 100 characters of it in the log)
            return fail(error.UnauthorizedLogin(f"unknown user {name[:100]!r}"))
        if not user.check(credentials.password):
            return fail(error.UnauthorizedLogin(f"wrong password for user {name!r}"))
        return succeed(name)


def _challenge(factories, request) -> list[bytes]:
    """The C{WWW-Authenticate} values of C{factories} (Basic: C{basic realm="..."}, as Jetty and the guard send)."""
    values = []
    for factory in factories:
        pairs = []
        for key, value in factory.getChallenge(request).items():
            key = key.encode("ascii") if isinstance(key, str) else key
            value = value.encode("utf-8") if isinstance(value, str) else value
            pairs.append(key + b'="' + value.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"')
        values.append(factory.scheme + b" " + b", ".join(pairs))
    return values


class Refusal(resource.Resource):
    """A refusal in Confluent's JSON body: 401 (with the C{WWW-Authenticate} challenge) or 403."""

    isLeaf = True
    _log = Logger()

    def __init__(self, status: int, reason: str | None, factories=()) -> None:
        """@param reason: why, for the log line (None: nothing logged, as for a request without credentials)."""
        super().__init__()
        self.status, self.reason, self.factories = status, reason, factories

    def render(self, request) -> bytes:
        request.setResponseCode(self.status)
        request.setHeader(b"Content-Type", _CONTENT_TYPE)
        for value in _challenge(self.factories, request) if self.status == 401 else ():
            request.responseHeaders.addRawHeader(b"WWW-Authenticate", value)
        if self.reason is not None:
            peer = request.getClientAddress()
            self._log.warn("schema registry: refused {method} {path} from {peer}: {reason}",
                           method=request.method.decode("ascii", errors="replace"),
                           path=request.path.decode("utf-8", errors="replace")[:200],
                           peer=getattr(peer, "host", peer), reason=self.reason)
        if request.method == b"HEAD":
            return b""
        message = "Unauthorized" if self.status == 401 else "Forbidden"
        return json.dumps({"error_code": self.status, "message": message}).encode()

    def getChildWithDefault(self, path, request):
        return self


def is_write(method: bytes, path: bytes) -> bool:
    """Whether a request changes the registry: registering a version, deleting, or setting a compatibility level
    (POST to a subject itself is a lookup, and POST to /compatibility a check: both reads)."""
    if method in (b"GET", b"HEAD", b"OPTIONS"):
        return False
    parts = [p for p in path.split(b"?", 1)[0].split(b"/") if p]
    if method == b"POST":
        return len(parts) == 3 and parts[0] == b"subjects" and parts[2] == b"versions"
    return True  # PUT, DELETE and anything else


class ReadOnly(resource.Resource):
    """The registry for a user of a read-only role: reads answered, writes refused with a 403."""

    isLeaf = True

    def __init__(self, registry: resource.IResource, user: str) -> None:
        super().__init__()
        self.registry, self.user = registry, user

    def render(self, request):
        if is_write(request.method, request.path):
            refusal = Refusal(403, f"user {self.user!r} may only read (--basic-auth-read-only-roles)")
            return refusal.render(request)
        return self.registry.render(request)


@implementer(IRealm)
class RegistryRealm:
    """Gives a user the registry, or a read-only view of it, or a 403, by its roles.

    A user may write when it has one of C{roles} (when None: any user with a role outside C{read_only}, or with
    no role); else it may read when it has one of C{read_only}; else it is refused.
    """

    def __init__(self, registry: resource.IResource, users: dict[str, User], roles: tuple[str, ...] | None,
                 read_only: tuple[str, ...] = ()) -> None:
        self.registry, self.users, self.roles, self.read_only = registry, users, roles, read_only

    def requestAvatar(self, avatar_id, mind, *interfaces):
        if resource.IResource not in interfaces:
            raise NotImplementedError("the registry's realm gives web resources only")
        name = avatar_id.decode("utf-8", errors="replace") if isinstance(avatar_id, bytes) else avatar_id
        user = self.users.get(name)
        held = set(user.roles) if user is not None else set()
        if self.roles is None:
            writer = not held or bool(held - set(self.read_only))
        else:
            writer = bool(held & set(self.roles))
        if writer:
            avatar = self.registry
        elif held & set(self.read_only):
            avatar = ReadOnly(self.registry, name)
        else:
            wanted = ", ".join((*(self.roles or ()), *self.read_only))
            avatar = Refusal(403, f"user {name!r} has none of the roles {wanted} (--basic-auth-roles"
                                  f"{', --basic-auth-read-only-roles' if self.read_only else ''}; it has "
                                  f"{', '.join(user.roles) if user is not None and user.roles else 'none'})")
        return resource.IResource, avatar, lambda: None


class BasicAuthWrapper(HTTPAuthSessionWrapper):
    """Twisted's guard, its refusals answered in Confluent's JSON (L{Refusal}) and logged without the password.

    It overrides two of C{HTTPAuthSessionWrapper}'s hooks (C{_authorizedResource}, C{_loginFailed}), whose
    refusal is otherwise a text/plain C{Unauthorized}: setup.cfg bounds Twisted's versions, and
    tests/schema_registry/test_auth.py checks every refusal through the real HTTP stack.
    """

    def _authorizedResource(self, request):
        header = request.getHeader(b"authorization")
        if header:
            factory, response = self._selectParseHeader(header)
            if factory is None:
                return Refusal(401, "an Authorization header that is not Basic", self._credentialFactories)
            try:
                factory.decode(response, request)
            except error.LoginFailed:
                return Refusal(401, "a malformed Basic Authorization header", self._credentialFactories)
        return super()._authorizedResource(request)

    def _loginFailed(self, result):
        if result.check(error.UnhandledCredentials):  # no credentials (the anonymous login): not worth a line
            return Refusal(401, None, self._credentialFactories)
        if result.check(error.Unauthorized, error.LoginFailed):
            return Refusal(401, result.getErrorMessage(), self._credentialFactories)
        return super()._loginFailed(result)


@attrs.frozen
class BasicAuth:
    """The registry's basic auth: its users (C{--basic-auth-file}), realm, the roles allowed (None: any) and the
    read-only roles (L{RegistryRealm})."""

    users: dict[str, User] = attrs.field(repr=False)
    realm: str = DEFAULT_REALM
    roles: tuple[str, ...] | None = None
    read_only: tuple[str, ...] = ()

    @classmethod
    def from_file(cls, path: str, realm: str = DEFAULT_REALM, roles: str | None = None,
                  read_only: str | None = None) -> BasicAuth:
        """From the password file C{path}, C{roles} as Confluent's C{authentication.roles} (comma-separated;
        None, empty or C{*}: any user) and C{read_only}, the roles that may only read (comma-separated).

        @raise TwlogError: see L{read_password_file}.
        """
        wanted = _roles(roles)
        return cls(read_password_file(path), realm, None if not wanted or "*" in wanted else wanted, _roles(read_only))

    def protect(self, registry: resource.IResource) -> resource.IResource:
        """C{registry} behind basic auth."""
        checker = PasswordFileChecker(self.users)
        portal = Portal(RegistryRealm(registry, self.users, self.roles, self.read_only), [checker])
        return BasicAuthWrapper(portal, [BasicCredentialFactory(self.realm.encode("utf-8"))])


def _roles(text: str | None) -> tuple[str, ...]:
    return tuple(r.strip() for r in (text or "").split(",") if r.strip())
