# -*- test-case-name: tests.integration.test_schema_registry -*-
"""L{RegistryService}: the registry process: the journal on the twlog cluster, the state, the HTTP listener.

At start it listens at once and replays C{twlog-schemas} (while the cluster answers, every request
also reads the topic to its end before it is answered, so a request never sees less than what was
acknowledged; while it does not, reads are answered from memory: L{twlog.schema_registry.core}).
"""

from __future__ import annotations

import atexit
import errno
import socket

import attrs
from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from twlog.client.options import ClientOptions
from twlog.client.tls import openssl_reason, server_certificate_options
from twlog.coord.zkauth import ZooKeeperCredentials
from twlog.errors import TwlogError
from twlog.protocol.twisted_internals import exit_now, forget_exit_signal
from twlog.schema_registry.auth import DEFAULT_REALM, BasicAuth
from twlog.schema_registry.core import DEFAULT_REQUEST_TIMEOUT_S, SchemaRegistry
from twlog.schema_registry.journal import TOPIC, Journal
from twlog.schema_registry.web import DEFAULT_MAX_BODY_BYTES, make_site

DEFAULT_PORT = 8081


class RegistryService(Service):
    """Serves the registry on C{interface:port}, its records in the cluster at C{brokers} or C{zookeeper}."""

    _log = Logger()

    def __init__(self, *, brokers: str | None = None, zookeeper: str | None = None, port: int = DEFAULT_PORT,
                 interface: str = "127.0.0.1", max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S, reactor=None,
                 cannot_start_exit_code: int | None = None, tls: RegistryTLS | None = None,
                 basic_auth_file: str | None = None, basic_auth_realm: str = DEFAULT_REALM,
                 basic_auth_roles: str | None = None, basic_auth_read_only_roles: str | None = None,
                 zookeeper_credentials: ZooKeeperCredentials | None = None) -> None:
        """@param cannot_start_exit_code: when set (C{twistd twlog-registry} sets 1), a registry that cannot
            listen logs one critical line naming the option to change, stops the reactor, and the process
            exits with this status (twistd itself would exit 0).  C{twlog registry} and tests leave it None
            and read L{listening}.
        @param tls: serve HTTPS with these files (L{RegistryTLS}); None: HTTP.
        @param basic_auth_file: require basic auth of the users of this file (L{twlog.schema_registry.auth}).
        @param zookeeper_credentials: the cluster's, with C{zookeeper} (docs/security.md, "ZooKeeper").
        """
        if reactor is None:
            from twisted.internet import reactor
        self._reactor = reactor
        self.port = port
        self.interface = interface
        self.journal = Journal(brokers=brokers, zookeeper=zookeeper, reactor=reactor,
                               options=ClientOptions(zookeeper_credentials=zookeeper_credentials))
        self.registry = SchemaRegistry(self.journal, reactor=reactor, timeout_s=request_timeout_s)
        self.site = make_site(self.registry, max_body_bytes)
        self.tls = tls
        self._auth = (basic_auth_file, basic_auth_realm, basic_auth_roles, basic_auth_read_only_roles)
        self.where = brokers if brokers is not None else f"ZooKeeper {zookeeper}"
        self._listener = None
        self.cannot_start_exit_code = cannot_start_exit_code
        #: Fires with the listening port once the HTTP listener is up (or errbacks if it cannot be).
        self.listening: Deferred = Deferred()

    def startService(self) -> None:
        super().startService()
        try:
            tls_options = self._secure()
            if tls_options is None:
                self._listener = self._reactor.listenTCP(self.port, self.site, interface=self.interface)
            else:
                self._listener = self._reactor.listenSSL(self.port, self.site, tls_options, interface=self.interface)
        except Exception as e:  # (CannotListenError: the port is taken; TwlogError: a TLS or password file)
            if self.cannot_start_exit_code is not None:
                self._log.critical("cannot start the schema registry: {error}",
                                   error=listen_error(self.interface, self.port, e, str(e)))
                self._reactor.callWhenRunning(self._reactor.stop)
                forget_exit_signal(self._reactor)
                atexit.register(exit_now, self.cannot_start_exit_code)
            self.listening.errback(e)
            return
        address = self._listener.getHost()
        self._log.info("schema registry on {scheme}://{host}:{port}/{auth}, records in topic {topic} of {where}",
                       scheme="http" if self.tls is None else "https", host=address.host, port=address.port,
                       auth=self._auth_note, topic=TOPIC, where=self.where)
        self.registry.start().addCallback(self._replayed)
        self.listening.callback(address.port)

    _auth_note = ""

    def _secure(self):
        """Load the TLS files and the password file, before listening: the TLS options (None: HTTP).

        @raise TwlogError: one of them cannot be used (one line naming it).
        """
        tls_options = self.tls.options() if self.tls is not None else None
        path, realm, roles, read_only = self._auth
        if path is not None:
            auth = BasicAuth.from_file(path, realm, roles, read_only)
            self.site.resource = auth.protect(self.site.resource)
            self._auth_note = (f" (basic auth: {len(auth.users)} user(s) of {path}, realm {realm}"
                               f"{', roles ' + ', '.join(auth.roles) if auth.roles else ''}"
                               f"{', read-only roles ' + ', '.join(auth.read_only) if auth.read_only else ''})")
            self._auth = (None, realm, roles, read_only)  # (protected once, even if started again)
        return tls_options

    def _replayed(self, replayed: bool) -> None:
        if replayed:  # (if not, the registry said why, in one line)
            state = self.registry.state
            self._log.info("replayed {topic}: {schemas} schema(s), {subjects} subject(s)", topic=TOPIC,
                           schemas=len(state.schemas), subjects=len(state.subjects))

    def stopService(self) -> Deferred | None:
        super().stopService()
        self.registry.stop()
        listener, self._listener = self._listener, None
        stopped = listener.stopListening() if listener is not None else None

        async def stop() -> None:
            if stopped is not None:
                await stopped
            await self.journal.close()

        return Deferred.fromCoroutine(stop())


@attrs.frozen
class RegistryTLS:
    """The registry's HTTPS: its certificate and key (C{--tls-cert}, C{--tls-key}), and with C{client_ca} the CAs
    whose client certificates it requires (C{--tls-client-ca}: Confluent's C{ssl.client.authentication=REQUIRED})."""

    cert: str
    key: str
    client_ca: str | None = None

    def options(self):
        """Twisted's C{CertificateOptions} of these files.

        @raise TwlogError: a file cannot be used (one line naming it).
        """
        try:
            return server_certificate_options(self.cert, self.key, self.client_ca, what="registry's --tls-cert")
        except Exception as e:  # (TLSSetupError, or whatever else OpenSSL makes of the files: one line)
            raise TwlogError(f"cannot serve HTTPS: {openssl_reason(e)}") from None


def listen_error(interface: str, port: int, error: BaseException | None, text: str) -> str:
    """Why the registry cannot listen on C{interface:port}, as one line naming the option to change."""
    if isinstance(error, TwlogError):  # (a TLS or password file: it names itself)
        return str(error)
    where = f"{interface}:{port}"
    cause = getattr(error, "socketError", error)
    code = getattr(cause, "errno", None)
    if code == errno.EADDRINUSE:
        return f"cannot listen on {where}: the port is taken (another registry?): give another --port (0: any free one)"
    if code == errno.EACCES:
        return f"cannot listen on {where}: permission denied: give a --port above 1023"
    if code == errno.EADDRNOTAVAIL or isinstance(cause, socket.gaierror):
        return (f"cannot listen on {where}: --interface {interface} is not an address of this host "
                "(127.0.0.1: this host only; 0.0.0.0: every interface)")
    return f"cannot listen on {where}: {text}: check --port and --interface"

