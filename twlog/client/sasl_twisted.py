# -*- test-case-name: tests.client.test_sasl -*-
"""A L{BrokerConnection}'s SASL exchanges (L{Authenticator}): one per connection, awaited by every request on it.

The exchange itself is L{twlog.client.sasl.SaslExchange}'s; this module sends its requests on the connection's
L{ClientProtocol} and shares its outcome with every request waiting for the connection, in their order (so
requests keep their write order).  A failed exchange drops the connection: the next request connects and
authenticates again.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, fail, succeed
from twisted.python.failure import Failure

from twlog.client.options import ClientOptions
from twlog.client.protocol import ClientProtocol
from twlog.client.sasl import SaslExchange
from twlog.errors import ProtocolViolation, TwlogError
from twlog.protocol import codec

__all__ = ["Authenticator"]


class _Outcome:
    """One connection's exchange: its waiters, fired in order once it ends."""

    def __init__(self, protocol: ClientProtocol) -> None:
        self.protocol = protocol
        self.ended = False
        self.result: Failure | None = None
        self._waiters: list[Deferred[None]] = []

    def wait(self) -> Deferred[None]:
        if self.ended:
            return succeed(None) if self.result is None else fail(self.result)
        d: Deferred[None] = Deferred()
        self._waiters.append(d)
        return d

    def end(self, result: Failure | None) -> None:
        self.ended, self.result = True, result
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            d.callback(None) if result is None else d.errback(result)


class Authenticator:
    """A L{BrokerConnection}'s SASL exchanges: L{of} a connection runs its exchange once, and waits for it."""

    def __init__(self, options: ClientOptions, address: str) -> None:
        self._options = options
        self._address = address
        self._current: _Outcome | None = None

    def done(self, protocol: ClientProtocol) -> bool:
        """Whether C{protocol} has authenticated."""
        current = self._current
        return current is not None and current.protocol is protocol and current.ended and current.result is None

    def of(self, protocol: ClientProtocol) -> Deferred[None]:
        """Fires once C{protocol} has authenticated (its exchange started by the first caller); fails with the
        exchange's error (L{twlog.errors.SaslAuthenticationFailed}, a connection error)."""
        current = self._current
        if current is None or current.protocol is not protocol:
            current = self._current = _Outcome(protocol)
            d = Deferred.fromCoroutine(self._exchange(protocol))
            d.addCallbacks(lambda _: current.end(None), current.end)
        return current.wait()

    async def _exchange(self, protocol: ClientProtocol) -> None:
        assert self._options.sasl is not None
        exchange = SaslExchange(self._options.sasl, self._options.tls is not None, self._address)
        steps = exchange.requests()
        try:
            request = next(steps)
            while True:
                frame = await protocol.request(request, timeout_s=self._options.timeout_s)
                response = codec.decode_response(request, frame)
                try:
                    request = steps.send(response)
                except StopIteration:
                    return
        except ProtocolViolation as e:
            error = exchange.failure(f"the broker's answer is not SASL's: {e}")
            protocol.abort(error)
            raise error from None
        except TwlogError as e:
            protocol.abort(e)
            raise
