# -*- test-case-name: tests.console.test_http -*-
"""The console's JSON API: routes, requests, answers and errors (docs/console.md, "API").

Each API module gives L{Route}s: a method, a path pattern under C{/api/} whose C{{name}} segments are
parameters (C{"topics/{topic}/messages"}), and a handler C{handler(ApiRequest)} returning (or a coroutine
or Deferred of) a JSON value.  L{ApiResource} routes to them and answers:

  - 200 with the value as JSON;
  - an L{ApiError}'s status with C{{"error": "one line", "unreachable": [...]}} (what could not be reached,
    for the page's banner: C{"zookeeper 127.0.0.1:2181"}, C{"broker 1 (127.0.0.1:9092)"});
  - 500 with a one-line error (the traceback goes to the log, never to the page).

A change (any method but GET and HEAD) must carry the header C{X-Twlog-Console: 1}, which a form on
another site cannot send without the browser asking first (CORS), so it is refused with 403 otherwise;
it is refused with 403 too when the console is read-only, and logged with who made it when done.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger
from twisted.web import resource, server

from twlog.errors import TwlogError

#: The header a change must carry (its value: C{1}).
CHANGE_HEADER = b"X-Twlog-Console"

#: The routes answered without a login (C{--login}), and not refused read-only: who you are, and logging in or out.
OPEN_ROUTES = frozenset({"session", "login", "logout"})

#: The largest request body taken (a change is a small JSON object).
MAX_BODY_BYTES = 64 * 1024

_log = Logger(namespace="twlog.console")


class ApiError(TwlogError):
    """An answer other than 200: C{status}, one line, and what could not be reached."""

    def __init__(self, status: int, message: str, unreachable: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.unreachable = list(unreachable)

    def body(self) -> dict:
        return {"error": self.message, "unreachable": self.unreachable}


def not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} does not exist")


def bad_parameter(name: str, problem: str) -> ApiError:
    return ApiError(400, f"parameter {name}: {problem}")


@attrs.frozen
class Route:
    """C{method} C{/api/<pattern>} answered by C{handler(ApiRequest)}; C{change} routes are refused read-only."""

    method: str
    pattern: str
    handler: Callable[[ApiRequest], Any]

    @property
    def change(self) -> bool:
        return self.method not in ("GET", "HEAD")

    def match(self, method: str, parts: Sequence[str]) -> dict[str, str] | None:
        segments = self.pattern.split("/") if self.pattern else []
        if method != self.method or len(segments) != len(parts):
            return None
        params: dict[str, str] = {}
        for segment, part in zip(segments, parts):
            if segment.startswith("{") and segment.endswith("}"):
                if not part:
                    return None
                params[segment[1:-1]] = part
            elif segment != part:
                return None
        return params


class ApiRequest:
    """One API request: its path parameters, its query arguments (typed, each checked), its JSON body, and who
    made it."""

    def __init__(self, request, params: dict[str, str], context) -> None:
        self.request = request
        self.params = params
        self.context = context

    # -- query arguments --------------------------------------------------------------------

    def arg(self, name: str, default: str | None = None) -> str | None:
        values = self.request.args.get(name.encode())
        if not values:
            return default
        return values[-1].decode("utf-8", errors="replace")

    def has(self, name: str) -> bool:
        return bool(self.request.args.get(name.encode()))

    def int_arg(self, name: str, default: int | None = None, *, low: int | None = None,
                high: int | None = None) -> int | None:
        """A whole-number argument within [low, high] (C{12,000} and C{12_000} too).

        @raise ApiError: 400 naming the parameter.
        """
        text = self.arg(name)
        if text is None or text == "":
            return default
        try:
            value = int(text.replace("_", "").replace(",", ""))
        except ValueError:
            raise bad_parameter(name, f"{text[:40]!r} is not a whole number") from None
        if low is not None and value < low:
            raise bad_parameter(name, f"{value} is below {low}")
        if high is not None and value > high:
            raise bad_parameter(name, f"{value} is above {high}")
        return value

    def choice(self, name: str, choices: Iterable[str], default: str) -> str:
        allowed = list(choices)
        value = self.arg(name, default)
        if value not in allowed:
            raise bad_parameter(name, f"{value[:40]!r} is not one of {', '.join(allowed)}")
        return value

    # -- the body and the user --------------------------------------------------------------

    def json(self) -> Any:
        """The request's JSON body (None when empty).  @raise ApiError: 400 when it is not JSON."""
        raw = self.request.content.read() if self.request.content is not None else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the request body is not JSON: {e}") from None

    @property
    def user(self) -> str | None:
        """The logged-in user, or None (no login)."""
        return self.context.user_of(self.request)

    def who(self) -> str:
        """Who made this request, for the log: C{alice from 127.0.0.1}, C{anonymous from 127.0.0.1}."""
        peer = self.request.getClientAddress()
        host = getattr(peer, "host", "?")
        return f"{self.user or 'anonymous'} from {host}"

    def changed(self, what: str) -> None:
        """Log a change this request made, with who made it (docs/console.md, "Changes")."""
        _log.info("console change by {who}: {what}", who=self.who(), what=what)


class ApiResource(resource.Resource):
    """C{/api/...}: routes each request to its L{Route}'s handler and answers JSON."""

    isLeaf = True

    def __init__(self, routes: Iterable[Route], context) -> None:
        super().__init__()
        self.routes = list(routes)
        self.context = context

    def render(self, request) -> Any:
        request.setHeader(b"Content-Type", b"application/json; charset=utf-8")
        request.setHeader(b"Cache-Control", b"no-store")
        try:
            answer = self._route(request)
        except ApiError as e:
            return self._body(request, e.status, e.body())
        deferred = ensureDeferred(answer) if not isinstance(answer, Deferred) and _awaitable(answer) else answer
        if isinstance(deferred, Deferred):
            deferred.addCallbacks(lambda value: self._finish(request, 200, value),
                                  lambda failure: self._failed(request, failure))
            if not request.finished:  # (answered already when the handler's Deferred fired at once)
                request.notifyFinish().addErrback(lambda _: deferred.cancel())
            return server.NOT_DONE_YET
        return self._body(request, 200, deferred)

    def _route(self, request) -> Any:
        path = request.path.split(b"?", 1)[0].decode("utf-8", errors="replace")
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")][1:]  # (after "api")
        method = request.method.decode("ascii", errors="replace")
        if method == "HEAD":
            method = "GET"
        allowed = []
        for route in self.routes:
            params = route.match(method, parts)
            if params is None:
                if route.match(route.method, parts) is not None:
                    allowed.append(route.method)
                continue
            if (self.context.login_required and route.pattern not in OPEN_ROUTES
                    and self.context.user_of(request) is None):
                raise ApiError(401, "log in first")
            if route.change:
                self._check_change(request, route)
            return route.handler(ApiRequest(request, params, self.context))
        if allowed:
            request.setHeader(b"Allow", ", ".join(sorted(set(allowed))).encode())
            raise ApiError(405, f"{method} is not allowed on /api/{'/'.join(parts)} (allowed: "
                                f"{', '.join(sorted(set(allowed)))})")
        raise ApiError(404, f"no such API path: /api/{'/'.join(parts)}")

    def _check_change(self, request, route: Route) -> None:
        if self.context.read_only and route.pattern not in OPEN_ROUTES:
            raise ApiError(403, "the console is read-only (--read-only): it changes nothing")
        if request.getHeader(CHANGE_HEADER) != b"1":
            raise ApiError(403, f"a change must carry the header {CHANGE_HEADER.decode()}: 1")
        length = request.getHeader(b"Content-Length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            raise ApiError(413, f"the request body is over {MAX_BODY_BYTES} bytes")

    def _body(self, request, status: int, value: Any) -> bytes:
        request.setResponseCode(status)
        return json.dumps(value, separators=(",", ":")).encode()

    def _finish(self, request, status: int, value: Any) -> None:
        if getattr(request, "_disconnected", False) or request.finished:
            return
        request.write(self._body(request, status, value))
        request.finish()

    def _failed(self, request, failure) -> None:
        if failure.check(ApiError):
            error = failure.value
        elif failure.check(TwlogError, ValueError):
            error = ApiError(409 if failure.check(ValueError) else 502, str(failure.value).splitlines()[0])
        else:
            _log.failure("console request {method} {path} failed", failure,
                         method=request.method, path=request.path)
            error = ApiError(500, f"the console failed: {failure.getErrorMessage().splitlines()[0]}")
        self._finish(request, error.status, error.body())


def _awaitable(value: Any) -> bool:
    return hasattr(value, "__await__") or hasattr(value, "cr_frame")
