# -*- test-case-name: tests.console.test_tap -*-
"""C{twistd twlog-console} (and C{twlog console}): the console's options and service (docs/console.md)."""

from __future__ import annotations

from twisted.python import usage

from twlog.client.kafka_settings import read_settings_file, security_settings
from twlog.client.options import ClientOptions
from twlog.console.service import ConsoleService
from twlog.coord.zkauth import read_credentials_file
from twlog.errors import TwlogError
from twlog.schema_registry.service import RegistryTLS
from twlog.usage_values import seconds, whole_number

__all__ = ["DEFAULT_PORT", "Options", "makeService"]

DEFAULT_PORT = 8080
DEFAULT_SAMPLE_INTERVAL_S = 10.0



def parse_super_users(text: str) -> tuple[str, ...]:
    """C{User:alice,User:bob} as C{("alice", "bob")}; @raise usage.UsageError: a part that is not C{User:NAME}."""
    users = []
    for part in (p.strip() for p in text.split(",")):
        kind, sep, name = part.partition(":")
        if not part:
            continue
        if not sep or kind != "User" or not name:
            raise usage.UsageError(f"--super-users takes User:NAME[,User:NAME...], not {part!r}")
        users.append(name)
    return tuple(users)


class Options(usage.Options):
    """Options of C{twistd twlog-console} and C{twlog console}."""

    synopsis = "[options] --zookeeper HOST:PORT[/chroot]"
    longdesc = ("A web console for the twlog cluster named by --zookeeper: topics, the message browser, consumer "
                "groups and lag, brokers, schemas, users and ACLs, with live charts (docs/console.md).")
    optFlags = [
        ["read-only", None, "hide and refuse every change (offset resets, deletions, users, ACLs)"],
        ["login", None, "require a login as one of the cluster's SCRAM users (twlog users)"],
    ]
    optParameters = [
        ["zookeeper", "z", None, "ZooKeeper connect string of the twlog cluster (host:port[,...][/chroot])"],
        ["zookeeper-credentials-file", None, None, "the cluster's ZooKeeper credentials, one line user:password "
         "(or username= and password= lines; docs/security.md, ZooKeeper)"],
        ["port", "p", DEFAULT_PORT, "HTTP port (0: any free port)", whole_number("port", 0, 65535)],
        ["interface", "i", "127.0.0.1", "interface to listen on (0.0.0.0: every interface)"],
        ["registry", None, None, "the schema registry's URL, for the schemas page and Avro in the message browser"],
        ["client-config", None, None, "Kafka client settings for talking to the brokers (security.protocol, ssl.*, "
         "sasl.*; as the other commands' --client-config)"],
        ["sample-interval", None, DEFAULT_SAMPLE_INTERVAL_S, "seconds between the samples the charts draw "
         "(brokers' metrics, topic sizes, group lag)", seconds("sample-interval", low=1, most=3600)],
        ["timeout", None, 5.0, "seconds the console waits for ZooKeeper or a broker before naming it unreachable",
         seconds("timeout", low=0.1, most=300)],
        ["super-users", None, None, "with --login: User:NAME[,User:NAME...] who may make changes whatever the ACLs"],
        ["tls-cert", None, None, "serve HTTPS with this PEM certificate (then its chain), with --tls-key"],
        ["tls-key", None, None, "the PEM private key of --tls-cert"],
    ]

    def postOptions(self) -> None:
        if self["zookeeper"] is None:
            raise usage.UsageError("give --zookeeper HOST:PORT[/chroot]: the twlog cluster's ZooKeeper")
        if (self["tls-cert"] is None) != (self["tls-key"] is None):
            raise usage.UsageError("--tls-cert and --tls-key go together (the console's certificate and its key)")
        self.super_users = parse_super_users(self["super-users"] or "")
        if self.super_users and not self["login"]:
            raise usage.UsageError("--super-users needs --login (they are logged-in users)")
        try:
            credentials = (read_credentials_file(self["zookeeper-credentials-file"])
                           if self["zookeeper-credentials-file"] else None)
            self.client_options = self._client_options(credentials)
        except TwlogError as e:
            raise usage.UsageError(str(e)) from None

    def _client_options(self, credentials) -> ClientOptions:
        tls = sasl = None
        path = self["client-config"]
        if path:  # (the rules of --client-config; bootstrap.servers is not used: the brokers are in ZooKeeper)
            settings = read_settings_file(path, "--client-config", also=("bootstrap.servers",))
            settings.pop("bootstrap.servers", None)
            tls, sasl = security_settings(settings, f"--client-config {path}")
        return ClientOptions(tls=tls, sasl=sasl, zookeeper_credentials=credentials)

    def tls(self) -> RegistryTLS | None:
        return None if self["tls-cert"] is None else RegistryTLS(self["tls-cert"], self["tls-key"])

    def service(self, reactor=None) -> ConsoleService:
        return ConsoleService(
            zookeeper=self["zookeeper"], port=self["port"], interface=self["interface"], reactor=reactor,
            read_only=bool(self["read-only"]), registry_url=self["registry"], options=self.client_options,
            sample_interval_s=self["sample-interval"], timeout_s=self["timeout"], tls=self.tls(),
            login=bool(self["login"]), super_users=self.super_users)


def makeService(options: Options) -> ConsoleService:
    service = options.service()
    service.cannot_start_exit_code = 1  # twistd twlog-console: a console that cannot listen exits 1
    return service
