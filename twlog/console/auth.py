# -*- test-case-name: tests.console.test_auth -*-
"""The console's login (C{twlog console --login}) and the authorization of its changes (docs/console.md, "Login
and changes").

The users are the cluster's SCRAM users (C{twlog users add}, kept in ZooKeeper at C{/config/users/<user>}:
L{twlog.coord.users}).  C{POST /api/login} checks the password against the user's stored credential, as a
broker checks SASL PLAIN (L{twlog.security.credentials.check_plain}: the salted password's client key hashed and
compared with the stored key in constant time), and answers with a session cookie: a random token, HttpOnly,
SameSite=Strict (and Secure over HTTPS), that expires after L{SESSION_S}.  Failed logins are logged and limited per
address (L{MAX_FAILURES} in L{FAILURE_WINDOW_S}; then 429 until the window passes).

With a login, every change is authorized as a broker with C{--acls} authorizes (L{twlog.coord.acls.AclCache},
Kafka's rules: a matching Deny refuses, else a matching Allow allows, else refused; the super users may do
anything): the user is the principal C{User:<name>}, connected from the request's address.  A reset needs Read
on the group and Describe on its topics, a delete Delete on the group, a change of users or ACLs Alter on the
Cluster.  Without a login there is nobody to authorize (the console is as open as its address: C{--interface}).
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Iterable, Sequence

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twlog.console.http import ApiError, ApiRequest, Route, bad_parameter
from twlog.coord.acls import AclCache
from twlog.coord.users import UserCache
from twlog.security.acls import Operation, ResourceType
from twlog.security.credentials import SCRAM_MECHANISMS, check_plain, make_credential

__all__ = ["AUTHORIZER", "LOGIN", "Login", "authorize", "enable_login", "routes"]

#: Where the authorizer of changes, and the login, are kept in C{context.parts}.
AUTHORIZER = "auth.authorizer"
LOGIN = "auth.login"

#: The session cookie's name, and how long a session lasts (seconds).
COOKIE = b"twlog_console_session"
SESSION_S = 8 * 3600.0

#: The failed logins allowed from one address per window (seconds) before it is refused (429) until the window
#: passes; and the most addresses remembered.
MAX_FAILURES = 5
FAILURE_WINDOW_S = 60.0
MAX_TRACKED_ADDRESSES = 10_000

#: The most sessions kept at once (the oldest go first).
MAX_SESSIONS = 10_000

_log = Logger(namespace="twlog.console")

#: A credential no password matches, checked for an unknown user so that a failure takes as long either way.
_NOBODY = make_credential(SCRAM_MECHANISMS[0], secrets.token_urlsafe(16))


async def authorize(api: ApiRequest, checks: Sequence[tuple[str, str, str]]) -> None:
    """Refuse (403) a change unless the request's user may do each C{(operation, resource type, name)} under the
    cluster's ACLs; without a login there is nobody to authorize, and every change is allowed."""
    authorizer = api.context.parts.get(AUTHORIZER)
    if authorizer is not None:
        await authorizer(api, checks)


def _host(request) -> str:
    return getattr(request.getClientAddress(), "host", "?")


class Login:
    """The sessions, the users' credentials and the cluster's ACLs, as read from ZooKeeper (kept current by
    watches), for one console."""

    def __init__(self, context, super_users: Iterable[str] = ()) -> None:
        self.context = context
        self.users = UserCache(context.zk)
        self.acls = AclCache(context.zk, super_users)
        #: token -> (user, expiry time).
        self.sessions: dict[str, tuple[str, float]] = {}
        self._failures: dict[str, deque[float]] = {}
        self._read: Deferred | None = None

    def start(self) -> Deferred:
        """Read the users and the ACLs, and follow them."""
        async def read() -> None:
            await self.users.start()
            await self.acls.start()

        self._read = Deferred.fromCoroutine(read())
        self._read.addErrback(lambda f: _log.warn("the console cannot read the users and ACLs in ZooKeeper yet "
                                                  "({error}); it reads them once the session is back",
                                                  error=f.getErrorMessage()))
        return self._read

    def stop(self) -> None:
        self.users.stop()
        self.acls.stop()

    def user_of(self, request) -> str | None:
        """The logged-in user of C{request} (its session cookie), or None."""
        token = request.getCookie(COOKIE)
        if not token:
            return None
        session = self.sessions.get(token.decode("ascii", "replace"))
        if session is None:
            return None
        user, expires = session
        if self.context.now() >= expires:
            del self.sessions[token.decode("ascii", "replace")]
            return None
        return user

    async def login(self, api: ApiRequest) -> dict:
        if self._read is not None and not self._read.called:  # (the users are being read: the first login waits)
            await self._read
        body = api.json()
        if not isinstance(body, dict):
            raise bad_parameter("body", "a JSON object {\"user\", \"password\"} is needed")
        user, password = body.get("user"), body.get("password")
        if not isinstance(user, str) or not user:
            raise bad_parameter("user", "a user name is needed")
        if not isinstance(password, str):
            raise bad_parameter("password", "a password is needed")
        host = _host(api.request)
        now = self.context.now()
        failures = self._failures.get(host)
        if failures is not None:
            while failures and failures[0] <= now - FAILURE_WINDOW_S:
                failures.popleft()
            if len(failures) >= MAX_FAILURES:
                wait = int(failures[0] + FAILURE_WINDOW_S - now) + 1
                api.request.setHeader(b"Retry-After", str(wait).encode())
                _log.warn("console login refused for {user!r} from {host}: too many failed logins", user=user,
                          host=host)
                raise ApiError(429, f"too many failed logins from {host}: try again in {wait} s")
        if not self._check(user, password):
            if host not in self._failures and len(self._failures) >= MAX_TRACKED_ADDRESSES:
                del self._failures[next(iter(self._failures))]
            self._failures.setdefault(host, deque()).append(now)
            _log.warn("console login failed for {user!r} from {host}", user=user, host=host)
            raise ApiError(401, "wrong user or password")
        token = secrets.token_urlsafe(32)
        while len(self.sessions) >= MAX_SESSIONS:
            del self.sessions[next(iter(self.sessions))]
        self.sessions[token] = (user, now + SESSION_S)
        secure = "; Secure" if api.request.isSecure() else ""
        api.request.setHeader(b"Set-Cookie", f"{COOKIE.decode()}={token}; Path=/; HttpOnly; SameSite=Strict; "
                                             f"Max-Age={int(SESSION_S)}{secure}".encode())
        _log.info("console login by {user} from {host}", user=user, host=host)
        return {"user": user}

    def _check(self, user: str, password: str) -> bool:
        credentials = self.users.lookup(user) or {}
        if not credentials:
            check_plain(_NOBODY, SCRAM_MECHANISMS[0], password)
            return False
        mechanism = sorted(credentials)[0]  # (every mechanism's was made from the same password)
        return check_plain(credentials[mechanism], mechanism, password)

    def logout(self, api: ApiRequest) -> dict:
        token = api.request.getCookie(COOKIE)
        if token:
            session = self.sessions.pop(token.decode("ascii", "replace"), None)
            if session is not None:
                _log.info("console logout by {user} from {host}", user=session[0], host=_host(api.request))
        api.request.setHeader(b"Set-Cookie", f"{COOKIE.decode()}=; Path=/; HttpOnly; SameSite=Strict; "
                                             "Max-Age=0".encode())
        return {}

    async def authorize(self, api: ApiRequest, checks: Sequence[tuple[str, str, str]]) -> None:
        """@raise ApiError: 403 naming the first operation the cluster's ACLs do not allow the user."""
        principal = f"User:{api.user}"
        host = _host(api.request)
        for operation, resource_type, name in checks:
            if not self.acls.authorize(principal, host, Operation(operation), ResourceType(resource_type), name):
                shown = "the cluster" if resource_type == "Cluster" else f"{resource_type.lower()} {name!r}"
                _log.warn("console change refused: {principal} from {host} may not {operation} {what}",
                          principal=principal, host=host, operation=operation, what=shown)
                raise ApiError(403, f"{principal} may not {operation} {shown} (the cluster's ACLs: twlog acls)")


def enable_login(context, super_users: Iterable[str] = ()) -> Login:
    """Make C{context}'s console ask for a login (C{twlog console --login}), with C{super_users} (principals,
    C{User:admin}) allowed every change; called once its ZooKeeper session is made.  C{.stop()} on what it
    returns stops following the users and ACLs."""
    login = Login(context, super_users)
    context.login_required = True
    context.user_of = login.user_of
    context.parts[LOGIN] = login
    context.parts[AUTHORIZER] = login.authorize
    login.start()
    return login


def routes(context) -> list[Route]:
    """C{POST /api/login} and C{POST /api/logout}: 404 when the console has no login."""

    def login_of() -> Login:
        login = context.parts.get(LOGIN)
        if login is None:
            raise ApiError(404, "the console has no login (start it with --login)")
        return login

    return [Route("POST", "login", lambda api: login_of().login(api)),
            Route("POST", "logout", lambda api: login_of().logout(api))]
