# -*- test-case-name: tests.cli.test_tls_options,tests.integration.test_tls_cli -*-
"""The client commands' TLS options: C{--tls-ca}, C{--tls-cert}, C{--tls-key}, and C{--client-config FILE}.

A client config file holds C{key=value} lines named as Kafka's client settings
(librdkafka's, which confluent-kafka reads): C{security.protocol} (PLAINTEXT or
SSL), C{ssl.ca.location}, C{ssl.certificate.location}, C{ssl.key.location} and
C{ssl.endpoint.identification.algorithm} (C{https}, the default: the broker's
certificate must name the host; C{none}: not checked).  Blank lines and lines
starting with C{#} are skipped; any other key is refused in one line, so a
setting this twlog does not implement (SASL) is never silently ignored.  An
option on the command line wins over the file.  L{tls_settings} turns both
into the L{TLSSettings} of the command's L{twlog.client.options.ClientOptions}.  The options themselves are
added by L{twlog.cli.tls_parsers} (light, for C{twlog --help}).
"""

from __future__ import annotations

from argparse import ArgumentTypeError

from twlog.cli.options import broker_list
from twlog.cli.registry_parsers import REGISTRY_CONFIG_KEYS
from twlog.client.tls import TLSSettings
from twlog.errors import TwlogError

__all__ = ["CLIENT_CONFIG_KEYS", "read_client_config", "tls_settings"]

#: The Kafka client settings a --client-config file may hold.
CLIENT_CONFIG_KEYS = ("bootstrap.servers", "security.protocol", "ssl.ca.location", "ssl.certificate.location",
                      "ssl.key.location",
                      "ssl.endpoint.identification.algorithm",
                      # SASL (twlog.cli.sasl_options; docs/security.md, "Authentication")
                      "sasl.mechanism", "sasl.username", "sasl.password")
#: security.protocol's values: TLS on with SSL and SASL_SSL; SASL with SASL_PLAINTEXT and SASL_SSL.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def read_client_config(path: str) -> dict[str, str]:
    """The settings of the client config file C{path}.

    @raise TwlogError: it cannot be read, a line is not C{key=value}, or a key is not one of
        L{CLIENT_CONFIG_KEYS} (one line naming the file, the line and what is accepted).
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise TwlogError(f"cannot read --client-config {path}: {getattr(e, 'strerror', None) or e}") from None
    settings: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise TwlogError(f"--client-config {path} line {number}: {line!r} is not key=value")
        if key not in CLIENT_CONFIG_KEYS and key not in REGISTRY_CONFIG_KEYS:  # (the registry's: --registry)
            raise TwlogError(f"--client-config {path} line {number}: unknown setting {key!r} (twlog reads "
                             f"{', '.join(CLIENT_CONFIG_KEYS)})")
        settings[key] = value
    return settings


def tls_settings(args) -> TLSSettings | None:
    """The TLS settings of a command's C{--tls-*} options and C{--client-config} file; None: plaintext.

    TLS is on when C{--tls-ca}, C{--tls-cert} or the file's C{security.protocol} (SSL, SASL_SSL) says so.

    @raise TwlogError: a bad client config file, or an unknown C{security.protocol}.
    """
    path = getattr(args, "client_config", None)
    config = read_client_config(path) if path else {}
    return tls_settings_of(args, config, path)


def tls_settings_of(args, config: dict[str, str], path: str | None) -> TLSSettings | None:
    """L{tls_settings} of C{args} and the settings C{config} read from the file C{path}."""
    protocol = config.get("security.protocol", "").upper()
    if protocol not in ("", *SECURITY_PROTOCOLS):
        raise TwlogError(f"--client-config {path}: security.protocol={config['security.protocol']} is not one of "
                         f"{', '.join(SECURITY_PROTOCOLS)}")
    algorithm = config.get("ssl.endpoint.identification.algorithm", "https").lower()
    if algorithm not in ("https", "none", ""):
        raise TwlogError(f"--client-config {path}: ssl.endpoint.identification.algorithm={algorithm} is not "
                         "https or none")
    ca = getattr(args, "tls_ca", None) or config.get("ssl.ca.location")
    cert = getattr(args, "tls_cert", None) or config.get("ssl.certificate.location")
    key = getattr(args, "tls_key", None) or config.get("ssl.key.location")
    wanted = protocol in ("SSL", "SASL_SSL") or bool(getattr(args, "tls_ca", None) or getattr(args, "tls_cert", None))
    if not wanted:
        if protocol in ("PLAINTEXT", "SASL_PLAINTEXT") and (ca or cert or key):
            raise TwlogError(f"--client-config {path}: ssl.* settings with security.protocol={protocol}")
        if key:
            raise TwlogError("--tls-key needs --tls-cert")
        return None
    return TLSSettings(ca_file=ca, cert_file=cert, key_file=key, check_hostname=algorithm == "https")


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
