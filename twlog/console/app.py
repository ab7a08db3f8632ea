# -*- test-case-name: tests.console.test_http -*-
"""The console's site: its pages, its static files and its API (docs/console.md).

Every page address (L{PAGES}) answers the same HTML shell, C{static/index.html}, whose script draws the page
the address names from the API; so each page can be bookmarked, linked and reloaded, and no dev server or
build step is needed.  C{/static/} serves the files of this package's C{static/} directory (the chart library
among them: docs/console.md, "Rebuilding the bundled files"); C{/api/} the JSON API of L{twlog.console.http}.
"""

from __future__ import annotations

import urllib.parse
from importlib import resources
from pathlib import Path

from twisted.web import resource, server, static

from twlog import __version__
from twlog.console import api_cluster, api_groups, api_schemas, api_security, auth
from twlog.console.context import ConsoleContext
from twlog.console.http import ApiRequest, ApiResource, Route, bad_parameter

#: The page addresses, as patterns (C{{name}}: one path segment).  Each answers the HTML shell.
PAGES = (
    "",
    "topics",
    "topics/{topic}",
    "topics/{topic}/messages",
    "groups",
    "groups/{group}",
    "brokers",
    "schemas",
    "schemas/{subject}",
    "security",
    "login",
)

#: The most series one history request may ask for, and the longest window (minutes).
MAX_SERIES_PER_REQUEST = 200
MAX_MINUTES = 60

STATIC_DIR = Path(str(resources.files("twlog.console") / "static"))


def _page_matches(parts: list[str]) -> bool:
    for page in PAGES:
        segments = page.split("/") if page else []
        if len(segments) == len(parts) and all(
                (s.startswith("{") and p) or s == p for s, p in zip(segments, parts)):
            return True
    return False


class PageResource(resource.Resource):
    """Every page address: the HTML shell (200), or a plain 404 page for an address that is no page."""

    isLeaf = True

    def __init__(self, shell: bytes) -> None:
        super().__init__()
        self.shell = shell

    def render_GET(self, request) -> bytes:
        path = request.path.split(b"?", 1)[0].decode("utf-8", errors="replace")
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        request.setHeader(b"Content-Type", b"text/html; charset=utf-8")
        request.setHeader(b"Cache-Control", b"no-store")
        if not _page_matches(parts):
            request.setResponseCode(404)
            return (b"<!doctype html><title>twlog console: not found</title><p>No page at this address. "
                    b"<a href=\"/\">The overview</a>.</p>")
        return self.shell


class RootResource(resource.Resource):
    """C{/}: C{/api/...} to the API, C{/static/...} to the files, anything else to the pages."""

    def __init__(self, api: ApiResource, shell: bytes) -> None:
        super().__init__()
        self.putChild(b"api", api)
        files = static.File(str(STATIC_DIR))
        files.directoryListing = lambda: resource.NoResource("no listing")
        self.putChild(b"static", files)
        self.pages = PageResource(shell)

    def getChild(self, path: bytes, request) -> resource.Resource:
        return self.pages

    def render_GET(self, request) -> bytes:
        return self.pages.render_GET(request)


def session_routes(context: ConsoleContext) -> list[Route]:
    """C{GET /api/session} (who, the mode, what is configured) and C{GET /api/history} (the charts' samples)."""

    def session(api: ApiRequest) -> dict:
        return {"version": __version__, "user": api.user, "read_only": context.read_only,
                "login_required": context.login_required, "registry": context.registry_url is not None,
                "zookeeper": context.zookeeper, "zookeeper_connected": bool(context.zk.connected)}

    def history(api: ApiRequest) -> dict:
        names = [n for n in (api.arg("series") or "").split(",") if n]
        prefix = api.arg("prefix")
        if prefix:
            names += context.history.names(prefix)
        if not names:
            raise bad_parameter("series", "name at least one series (series=NAME[,NAME...] or prefix=)")
        if len(names) > MAX_SERIES_PER_REQUEST:
            raise bad_parameter("series", f"{len(names)} series asked for; at most {MAX_SERIES_PER_REQUEST}")
        minutes = api.int_arg("minutes", MAX_MINUTES, low=1, high=MAX_MINUTES)
        since = context.now() - minutes * 60
        return {"now": context.now(), "series": {
            name: [[t, v] for t, v in context.history.series(name, since)] for name in names}}

    return [Route("GET", "session", session), Route("GET", "history", history)]


def make_site(context: ConsoleContext) -> server.Site:
    """The console's site over C{context}."""
    routes = [*session_routes(context), *auth.routes(context), *api_cluster.routes(context),
              *api_groups.routes(context), *api_schemas.routes(context), *api_security.routes(context)]
    shell = (STATIC_DIR / "index.html").read_bytes()
    site = server.Site(RootResource(ApiResource(routes, context), shell))
    site.displayTracebacks = False
    return site
