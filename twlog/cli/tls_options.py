# -*- test-case-name: tests.cli.test_tls_options,tests.integration.test_tls_cli -*-
"""The client commands' TLS options: C{--tls-ca}, C{--tls-cert}, C{--tls-key}, and C{--client-config FILE}.

A client config file holds C{key=value} lines named as Kafka's client settings
(librdkafka's, which confluent-kafka reads): C{security.protocol} (PLAINTEXT or
SSL), C{ssl.ca.location}, C{ssl.certificate.location}, C{ssl.key.location} and
C{ssl.endpoint.identification.algorithm} (C{https}, the default: the broker's
certificate must name the host; C{none}: not checked), the Java client's PEM
stores and C{sasl.*} (L{twlog.client.kafka_settings}, whose rules the Spark
source and the mirror share).  Blank lines and lines starting with C{#} are
skipped; any other key is refused in one line, so a setting this twlog does not
implement is never silently ignored.  An
option on the command line wins over the file.  L{tls_settings} turns both
into the L{TLSSettings} of the command's L{twlog.client.options.ClientOptions}.  The options themselves are
added by L{twlog.cli.tls_parsers} (light, for C{twlog --help}).
"""

from __future__ import annotations

from argparse import ArgumentTypeError

from twlog.cli.options import broker_list
from twlog.cli.registry_parsers import REGISTRY_CONFIG_KEYS
from twlog.client.kafka_settings import CLIENT_SETTINGS, SECURITY_PROTOCOLS, parse_security, read_settings_file, tls_of
from twlog.client.tls import TLSSettings
from twlog.errors import TwlogError

__all__ = ["CLIENT_CONFIG_KEYS", "SECURITY_PROTOCOLS", "read_client_config", "tls_settings", "tls_settings_of"]

#: The Kafka client settings a --client-config file may hold (L{twlog.client.kafka_settings}, shared with the
#: Spark source and the mirror), and C{bootstrap.servers}: the brokers of a command given no --broker.
CLIENT_CONFIG_KEYS = ("bootstrap.servers", *CLIENT_SETTINGS)


def read_client_config(path: str) -> dict[str, str]:
    """The settings of the client config file C{path} (L{read_settings_file}; the registry's keys too).

    @raise TwlogError: it cannot be read, a line is not C{key=value}, or a key is not one of
        L{CLIENT_CONFIG_KEYS} (one line naming the file, the line and what is accepted).
    """
    # (the registry's keys: --registry; bootstrap.servers: --broker)
    return read_settings_file(path, "--client-config", also=("bootstrap.servers", *REGISTRY_CONFIG_KEYS))


def tls_settings(args) -> TLSSettings | None:
    """The TLS settings of a command's C{--tls-*} options and C{--client-config} file; None: plaintext.

    TLS is on when C{--tls-ca}, C{--tls-cert} or the file's C{security.protocol} (SSL, SASL_SSL) says so.

    @raise TwlogError: a bad client config file, or an unknown C{security.protocol}.
    """
    path = getattr(args, "client_config", None)
    config = read_client_config(path) if path else {}
    return tls_settings_of(args, config, path)


def tls_settings_of(args, config: dict[str, str], path: str | None) -> TLSSettings | None:
    """L{tls_settings} of C{args} and the settings C{config} read from the file C{path} (the rules:
    L{twlog.client.kafka_settings.tls_of}; the options win over the file)."""
    where = f"--client-config {path}"
    ca, cert = getattr(args, "tls_ca", None), getattr(args, "tls_cert", None)
    return tls_of(parse_security(config, where), where, ca=ca, cert=cert, key=getattr(args, "tls_key", None),
                  forced=bool(ca or cert), key_alone="--tls-key needs --tls-cert")


def apply_bootstrap_servers(args) -> None:
    """A command given no C{--broker}: the brokers of its C{--client-config} file's C{bootstrap.servers}, if any
    (Kafka's name; an option on the command line wins over the file, as for every setting).

    @raise TwlogError: the file cannot be read, or the addresses are not C{HOST:PORT[,...]} (one line).
    """
    servers = read_client_config(args.client_config).get("bootstrap.servers", "").strip()
    if servers:
        try:
            args.broker = broker_list(servers)
        except ArgumentTypeError as e:
            raise TwlogError(f"--client-config {args.client_config}: bootstrap.servers: {e}") from None
