"""Driving the console's site in trial, without sockets: a real L{twisted.web.server.Request} over a dummy
channel, answered at once or when its Deferreds fire (a FakeZooKeeper and fake brokers answer at once)."""

from __future__ import annotations

import json
from io import BytesIO

import attrs
from twisted.internet.address import IPv4Address
from twisted.web import server
from twisted.web.http_headers import Headers
from twisted.web.test.requesthelper import DummyChannel

from twlog.console.http import CHANGE_HEADER


@attrs.frozen
class Answer:
    status: int
    headers: Headers
    body: bytes
    finished: bool

    @property
    def json(self):
        return json.loads(self.body)

    @property
    def error(self) -> str:
        return self.json["error"]

    def cookie(self) -> str | None:
        values = self.headers.getRawHeaders(b"set-cookie")
        return values[-1].decode() if values else None


def call(site: server.Site, method: str, path: str, body=None, *, change: bool | None = None,
         headers: dict[str, str] | None = None, peer: str = "127.0.0.1") -> Answer:
    """C{method path} on C{site}; a change (not GET) carries the console's header unless C{change=False}; a
    C{body} that is not bytes is sent as JSON."""
    channel = DummyChannel(IPv4Address("TCP", peer, 50000))
    channel.site = site
    request = server.Request(channel)
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    request.content = BytesIO(raw)
    request.requestHeaders.setRawHeaders(b"content-length", [str(len(raw)).encode()])
    if change if change is not None else method != "GET":
        request.requestHeaders.setRawHeaders(CHANGE_HEADER, [b"1"])
    for name, value in (headers or {}).items():
        request.requestHeaders.setRawHeaders(name.encode(), [value.encode()])
    request.parseCookies()  # (as the channel does once the headers are in)
    request.requestReceived(method.encode(), path.encode(), b"HTTP/1.0")
    written = channel.transport.written.getvalue()
    return Answer(request.code, request.responseHeaders, written.split(b"\r\n\r\n", 1)[-1] if request.finished
                  else b"", bool(request.finished))
