# -*- test-case-name: tests.broker.test_listeners,tests.integration.test_tls -*-
"""The broker's listening ports: plaintext on C{--port}, TLS on C{--tls-port}, one L{BrokerFactory} behind both.

TLS is Twisted's: a TCP endpoint whose factory is wrapped in a C{TLSMemoryBIOFactory} with C{CertificateOptions} built
from the PEM files of the configuration (L{server_tls_options}); with
C{--tls-client-ca} the handshake requires a client certificate that one of
those CAs signed (mutual TLS).  A connection over TLS reaches the same
protocol as a plaintext one; only its transport differs, so log bytes go
through the process instead of sendfile (L{twlog.protocol.sendfile.can_sendfile}
is false for a TLS transport).
"""

from __future__ import annotations

import errno

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint
from twisted.internet.error import CannotListenError
from twisted.protocols.tls import TLSMemoryBIOFactory

from twlog.client.tls import openssl_reason, server_certificate_options
from twlog.config import BrokerConfig
from twlog.errors import TwlogError

__all__ = ["Listeners", "listen", "listen_error", "server_tls_options", "tcp_endpoint"]


def tcp_endpoint(reactor, interface: str, port: int, backlog: int = 50):
    """A TCP server endpoint on C{interface} (IPv6 when it has a colon) and C{port}, with a listen C{backlog}."""
    endpoint_class = TCP6ServerEndpoint if ":" in interface else TCP4ServerEndpoint
    return endpoint_class(reactor, port, backlog=backlog, interface=interface)


def server_tls_options(config: BrokerConfig):
    """Twisted's server C{CertificateOptions} for C{config}'s TLS port: its certificate (and chain) and key, TLS
    1.2 at least, and with C{tls_client_ca} a client certificate required and verified against those CAs.

    @raise TLSSetupError: a file cannot be read or used (one line naming it).
    """
    assert config.tls_cert is not None and config.tls_key is not None
    return server_certificate_options(config.tls_cert, config.tls_key, config.tls_client_ca,
                                      what="broker's --tls-cert")


def listen_error(interface: str, port: int, error: BaseException, option: str = "--port") -> str:
    """Why the broker could not listen on C{interface:port}, in one line naming the option to change."""
    socket_error = getattr(error, "socketError", None) if isinstance(error, CannotListenError) else None
    code = getattr(socket_error, "errno", None)
    if code == errno.EADDRINUSE:
        return f"port {port} is in use (another broker?): choose another with {option}"
    if code == errno.EACCES:
        return f"port {port} needs privileges this process lacks: choose one above 1023 with {option}"
    if code == errno.EADDRNOTAVAIL:
        return f"--interface {interface} is no address of this machine: choose another with --interface"
    reason = getattr(socket_error, "strerror", None) or str(error)
    return f"cannot listen on {interface}:{port} (--interface, {option}): {reason}"


@attrs.define
class Listeners:
    """The broker's listening ports, once listening: C{plain} (None with C{--no-plaintext}) and C{tls} (None
    without C{--tls-port})."""

    plain: object | None = None
    tls: object | None = None

    def describe(self, interface: str) -> str:
        """C{127.0.0.1:9092, 127.0.0.1:9093 (TLS)}: where the broker listens, for its log."""
        return ", ".join(f"{interface}:{port.getHost().port}{' (TLS)' if port is self.tls else ''}"
                         for port in (self.plain, self.tls) if port is not None)

    def stop(self) -> list[Deferred]:
        """Stop listening on both; the Deferreds of the stops."""
        stops = [port.stopListening() for port in (self.plain, self.tls) if port is not None]
        self.plain = self.tls = None
        return stops


async def listen(reactor, config: BrokerConfig, factory) -> Listeners:
    """Listen with C{factory} on C{config}'s plaintext port (unless C{plaintext} is off) and TLS port (if any).

    @raise TwlogError: a port cannot be listened on, or the TLS files cannot be used (one line each); a port
        already listening is closed first.
    """
    listeners = Listeners()
    interface, backlog = config.interface, config.listen_backlog
    try:
        if config.plaintext:
            try:
                listeners.plain = await tcp_endpoint(reactor, interface, config.port, backlog).listen(factory)
            except CannotListenError as e:
                raise TwlogError(listen_error(interface, config.port, e)) from None
        if config.tls_port is not None:
            try:
                options = server_tls_options(config)
            except Exception as e:  # (TLSSetupError, or whatever else OpenSSL makes of the files: one line)
                raise TwlogError(f"cannot serve TLS: {openssl_reason(e)}") from None
            endpoint = tcp_endpoint(reactor, interface, config.tls_port, backlog)
            wrapped = TLSMemoryBIOFactory(options, False, factory)
            wrapped.noisy = False  # (the service logs where it listens, as for the plaintext port)
            try:
                listeners.tls = await endpoint.listen(wrapped)
            except CannotListenError as e:
                raise TwlogError(listen_error(interface, config.tls_port, e, "--tls-port")) from None
    except BaseException:
        await Deferred.fromCoroutine(_stopped(listeners))
        raise
    return listeners


async def _stopped(listeners: Listeners) -> None:
    for d in listeners.stop():
        await d
