# -*- test-case-name: tests.schema_registry.test_tap -*-
"""C{twistd twlog-registry} (and C{twlog registry}): the registry's options and service."""

from __future__ import annotations

from twisted.python import usage

from twlog.client.discovery import parse_brokers
from twlog.coord.zkauth import read_credentials_file
from twlog.errors import TwlogError
from twlog.schema_registry.auth import DEFAULT_REALM
from twlog.schema_registry.core import DEFAULT_REQUEST_TIMEOUT_S
from twlog.schema_registry.service import DEFAULT_PORT, RegistryService, RegistryTLS
from twlog.schema_registry.web import DEFAULT_MAX_BODY_BYTES
from twlog.usage_values import seconds, whole_number

__all__ = ["Options", "RegistryService", "makeService"]



class Options(usage.Options):
    """Options of C{twistd twlog-registry} and C{twlog registry}."""

    synopsis = "[options] (--zookeeper HOST:PORT[/chroot] | --broker HOST:PORT[,...])"
    longdesc = (
        "A schema registry speaking Confluent Schema Registry's REST API for Avro, its schemas kept in the "
        "twlog topic twlog-schemas of the cluster named by --zookeeper or --broker (docs/registry.md)."
    )
    optParameters = [
        ["zookeeper", "z", None, "ZooKeeper connect string of the twlog cluster (host:port[,...][/chroot])"],
        ["broker", "b", None, "a broker of the twlog cluster, host:port[,...] (instead of --zookeeper)"],
        ["zookeeper-credentials-file", None, None, "with --zookeeper: the cluster's ZooKeeper credentials, one line "
         "user:password (or username= and password= lines; docs/security.md, ZooKeeper)"],
        ["port", "p", DEFAULT_PORT, "HTTP port (0: any free port)", whole_number("port", 0, 65535)],
        ["interface", "i", "127.0.0.1", "interface to listen on"],
        ["max-body-bytes", None, DEFAULT_MAX_BODY_BYTES, "largest request body taken (larger: 413)",
         whole_number("max-body-bytes", 1, 2**31 - 1)],
        ["request-timeout", None, DEFAULT_REQUEST_TIMEOUT_S, "seconds a request waits for the twlog cluster (a write "
         "then fails with 500, 50002; reads are answered from memory while the cluster is down)",
         seconds("request-timeout", above=True, most=3600)],
        # HTTPS and basic auth (docs/registry.md, "Security"; the files are read at start)
        ["tls-cert", None, None, "serve HTTPS with this PEM certificate (then its chain), with --tls-key"],
        ["tls-key", None, None, "the PEM private key of --tls-cert"],
        ["tls-client-ca", None, None, "require a client certificate signed by a CA of this PEM file (mutual TLS, "
         "Confluent's ssl.client.authentication=REQUIRED)"],
        ["basic-auth-file", None, None, "require HTTP basic auth of the users of this file: 'user: password[,role...]' "
         "lines, the password plain or MD5:<hex> (Confluent's authentication.method=BASIC with Jetty's "
         "PropertyFileLoginModule)"],
        ["basic-auth-realm", None, DEFAULT_REALM, "the realm of basic auth's challenge (authentication.realm)"],
        ["basic-auth-roles", None, None, "ROLE[,ROLE...]: only users with one of these roles may use the registry "
         "(authentication.roles; default *: any user of --basic-auth-file)"],
        ["basic-auth-read-only-roles", None, None, "ROLE[,ROLE...]: users whose only allowed roles are these may "
         "read but not register, delete or set compatibility (403)"],
    ]

    def postOptions(self) -> None:
        if (self["tls-cert"] is None) != (self["tls-key"] is None):
            raise usage.UsageError("--tls-cert and --tls-key go together (the registry's certificate and its key)")
        if self["tls-client-ca"] is not None and self["tls-cert"] is None:
            raise usage.UsageError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is over HTTPS)")
        for name in ("basic-auth-realm", "basic-auth-roles", "basic-auth-read-only-roles"):
            if self[name] != self.defaults[name] and self["basic-auth-file"] is None:
                raise usage.UsageError(f"--{name} needs --basic-auth-file (the users)")
        if (self["zookeeper"] is None) == (self["broker"] is None):
            raise usage.UsageError("give one of --zookeeper and --broker: where the twlog cluster is")
        if self["broker"] is not None:
            try:
                parse_brokers(self["broker"])
            except ValueError as e:
                raise usage.UsageError(f"--broker: {e}") from None
        self.zookeeper_credentials = None
        if self["zookeeper-credentials-file"]:
            if self["zookeeper"] is None:
                raise usage.UsageError("--zookeeper-credentials-file needs --zookeeper")
            try:
                self.zookeeper_credentials = read_credentials_file(self["zookeeper-credentials-file"])
            except TwlogError as e:
                raise usage.UsageError(str(e)) from None

    def service(self, reactor=None) -> RegistryService:
        return RegistryService(brokers=self["broker"], zookeeper=self["zookeeper"], port=self["port"],
                               interface=self["interface"], max_body_bytes=self["max-body-bytes"],
                               request_timeout_s=self["request-timeout"], reactor=reactor, tls=self.tls(),
                               basic_auth_file=self["basic-auth-file"], basic_auth_realm=self["basic-auth-realm"],
                               basic_auth_roles=self["basic-auth-roles"],
                               basic_auth_read_only_roles=self["basic-auth-read-only-roles"],
                               zookeeper_credentials=getattr(self, "zookeeper_credentials", None))

    def tls(self) -> RegistryTLS | None:
        """The registry's HTTPS files, or None (HTTP)."""
        if self["tls-cert"] is None:
            return None
        return RegistryTLS(self["tls-cert"], self["tls-key"], self["tls-client-ca"])


def makeService(options: Options) -> RegistryService:
    service = options.service()
    service.cannot_start_exit_code = 1  # twistd twlog-registry: a registry that cannot listen exits 1
    return service
