# -*- test-case-name: tests.client.test_kafka_settings,tests.cli.test_tls_options,tests.cli.test_sasl_options -*-
"""Kafka's client security settings (a dict of C{security.protocol}, C{ssl.*}, C{sasl.*}) as twlog's
L{TLSSettings} and L{SASLSettings}: the one set of rules the CLI's C{--client-config}, the Spark source's
C{kafka.*} options and the mirror's C{--from-client-config}/C{--to-client-config} share.

The names are librdkafka's (C{ssl.ca.location}, C{ssl.certificate.location}, C{ssl.key.location},
C{sasl.username}, C{sasl.password}) and the Java client's (C{ssl.truststore.location} and
C{ssl.keystore.location} with their C{.type} PEM, Kafka 2.7's PEM stores; C{sasl.jaas.config} with Kafka's
C{ScramLoginModule} or C{PlainLoginModule}); C{security.protocol}, C{ssl.endpoint.identification.algorithm}
and C{sasl.mechanism} are both's.  What twlog cannot do (a JKS or PKCS12 store, Kerberos, OAuth) is refused in
one line, never ignored.  Every error names where the settings came from (C{where}) and the key as the user
wrote it (C{prefix}: C{kafka.} for Spark's).  docs/security.md, "Spark, the mirror and groups".
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from twlog.client.sasl import DEFAULT_MECHANISM, MECHANISMS, SASLSettings
from twlog.client.tls import TLSSettings
from twlog.errors import TwlogError

__all__ = ["CLIENT_SETTINGS", "SECURITY_PROTOCOLS", "KafkaSecurity", "parse_security", "property_lines",
           "read_settings_file", "sasl_needs_tls", "security_settings", "tls_of"]

#: The Kafka client settings twlog reads.
CLIENT_SETTINGS = ("security.protocol", "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
                   "ssl.endpoint.identification.algorithm",
                   "ssl.truststore.location", "ssl.truststore.type", "ssl.keystore.location", "ssl.keystore.type",
                   "sasl.mechanism", "sasl.username", "sasl.password", "sasl.jaas.config")
#: security.protocol's values: TLS on with SSL and SASL_SSL; SASL with SASL_PLAINTEXT and SASL_SSL.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Kafka's login modules twlog speaks, and the mechanisms each goes with.
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.scram.ScramLoginModule": ("SCRAM-SHA-256", "SCRAM-SHA-512"),
    "org.apache.kafka.common.security.plain.PlainLoginModule": ("PLAIN",),
}
_JAAS = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);?\s*$", re.DOTALL)
_JAAS_OPTION = re.compile(r'\s*([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')


def property_lines(path: str, option: str) -> list[tuple[int, str]]:
    """The lines of the file C{path} that say something, stripped, with their numbers: blank lines and comments
    (lines starting with C{#} or C{!}, as in Java properties files) are left out.

    @param option: the option that named the file, for the error.
    @raise TwlogError: it cannot be read as UTF-8 (one line naming the option and the file).
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise TwlogError(f"cannot read {option} {path}: {getattr(e, 'strerror', None) or e}") from None
    stripped = ((number, line.strip()) for number, line in enumerate(lines, 1))
    return [(number, line) for number, line in stripped if line and not line.startswith(("#", "!"))]


def read_settings_file(path: str, option: str = "--client-config", also: tuple[str, ...] = ()) -> dict[str, str]:
    """The settings of the file C{path} of C{key=value} lines (Java properties' plain form): blank lines and
    lines starting with C{#} or C{!} are skipped.

    @param option: the option that named the file, for the errors.
    @param also: keys accepted besides L{CLIENT_SETTINGS}.
    @raise TwlogError: it cannot be read, a line is not C{key=value}, or a key is unknown (one line naming the
        file, the line and what is accepted).
    """
    settings: dict[str, str] = {}
    for number, line in property_lines(path, option):
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise TwlogError(f"{option} {path} line {number}: {line!r} is not key=value")
        if key not in CLIENT_SETTINGS and key not in also:
            raise TwlogError(f"{option} {path} line {number}: unknown setting {key!r} (twlog reads "
                             f"{', '.join(CLIENT_SETTINGS)})")
        settings[key] = value
    return settings


@attrs.frozen
class KafkaSecurity:
    """The security settings found, checked but not yet combined (a command's options may override them).

    @ivar protocol: C{security.protocol} upper-cased; C{""}: not given.
    @ivar mechanism: C{sasl.mechanism} upper-cased, or the one C{sasl.jaas.config}'s module implies; None: not
        given.
    """

    protocol: str = ""
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    check_hostname: bool = True
    user: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    mechanism: str | None = None


def parse_security(config: Mapping[str, str], where: str, prefix: str = "") -> KafkaSecurity:
    """The security settings of C{config} (keys without C{prefix}).

    @param where: where C{config} came from (C{--client-config FILE}, C{the twlog source}), for the errors.
    @param prefix: how the user wrote the keys' start (C{kafka.}), for the errors.
    @raise TwlogError: an unknown protocol or identification algorithm, a store that is not PEM, a setting
        given twice over (C{ssl.ca.location} and a truststore), a JAAS config twlog cannot use, an unknown
        mechanism (one line each).
    """
    def fail(text: str) -> TwlogError:
        return TwlogError(f"{where}: {text}")

    protocol = config.get("security.protocol", "").strip().upper()
    if protocol not in ("", *SECURITY_PROTOCOLS):
        raise fail(f"{prefix}security.protocol={config['security.protocol']} is not one of "
                   f"{', '.join(SECURITY_PROTOCOLS)}")
    algorithm = config.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", "none", ""):
        raise fail(f"{prefix}ssl.endpoint.identification.algorithm={algorithm} is not https or none")
    ca = _store(config, "truststore", where, prefix) or None
    if ca and config.get("ssl.ca.location"):
        raise fail(f"{prefix}ssl.ca.location and {prefix}ssl.truststore.location both given: give one")
    ca = ca or config.get("ssl.ca.location") or None
    cert = config.get("ssl.certificate.location") or None
    key = config.get("ssl.key.location") or None
    keystore = _store(config, "keystore", where, prefix)
    if keystore and (cert or key):
        raise fail(f"{prefix}ssl.keystore.location and {prefix}ssl.certificate.location/{prefix}ssl.key.location "
                   "both given: give one")
    if keystore:
        cert = key = keystore  # (Kafka's PEM keystore: the key and the certificate chain in one file)
    user = config.get("sasl.username") or None
    password = config.get("sasl.password") or None
    mechanism = config.get("sasl.mechanism", "").strip().upper() or None
    jaas = config.get("sasl.jaas.config", "").strip()
    if jaas:
        if user or password:
            raise fail(f"{prefix}sasl.jaas.config and {prefix}sasl.username/{prefix}sasl.password both given: "
                       "give one")
        module, user, password = _parse_jaas(jaas, where, prefix)
        allowed = _LOGIN_MODULES[module]
        if mechanism is not None and mechanism not in allowed:
            raise fail(f"{prefix}sasl.mechanism={mechanism} does not go with {prefix}sasl.jaas.config's "
                       f"{module.rsplit('.', 1)[-1]} ({' or '.join(allowed)})")
        mechanism = mechanism or (allowed[0] if len(allowed) == 1 else DEFAULT_MECHANISM)
    if mechanism is not None and mechanism not in MECHANISMS:
        raise fail(f"{prefix}sasl.mechanism={mechanism} is not one of {', '.join(MECHANISMS)}")
    return KafkaSecurity(protocol, ca, cert, key, algorithm == "https", user, password, mechanism)


def _store(config: Mapping[str, str], store: str, where: str, prefix: str) -> str | None:
    """The location of Kafka's C{ssl.<store>.location} (a PEM store), or None."""
    location = config.get(f"ssl.{store}.location") or None
    kind = config.get(f"ssl.{store}.type", "").strip().upper()
    if location is None:
        return None
    if kind != "PEM":
        raise TwlogError(f"{where}: {prefix}ssl.{store}.location is a {kind or 'JKS (the default)'} store: twlog "
                         f"reads PEM files only: set {prefix}ssl.{store}.type=PEM with a PEM file"
                         + (f" (or {prefix}ssl.ca.location)" if store == "truststore" else
                            f" (or {prefix}ssl.certificate.location and {prefix}ssl.key.location)"))
    return location


def _parse_jaas(text: str, where: str, prefix: str) -> tuple[str, str, str]:
    """The login module, user name and password of the JAAS config C{text} (one module, Kafka's form:
    C{<module> required username="bob" password="...";})."""
    refused = TwlogError(f"{where}: {prefix}sasl.jaas.config: twlog takes "
                         "org.apache.kafka.common.security.scram.ScramLoginModule or "
                         "org.apache.kafka.common.security.plain.PlainLoginModule with username=\"...\" and "
                         "password=\"...\"")
    found = _JAAS.fullmatch(text)
    if found is None or found.group(1) not in _LOGIN_MODULES:
        raise refused
    options: dict[str, str] = {}
    rest = found.group(3)
    while rest.strip():
        option = _JAAS_OPTION.match(rest)
        if option is None:
            raise refused
        quoted, bare = option.group(2), option.group(3)
        options[option.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        rest = rest[option.end():]
    if not options.get("username") or not options.get("password") or set(options) - {"username", "password"}:
        raise refused
    return found.group(1), options["username"], options["password"]


def tls_of(security: KafkaSecurity, where: str, prefix: str = "", *, ca: str | None = None, cert: str | None = None,
           key: str | None = None, forced: bool = False, key_alone: str | None = None) -> TLSSettings | None:
    """The L{TLSSettings} of C{security} (C{ca}, C{cert}, C{key}: a command's options, which win); None: no TLS.

    TLS is on with C{security.protocol} SSL or SASL_SSL, or C{forced} (a command's C{--tls-ca}/C{--tls-cert}).
    Without it, C{ssl.*} settings are an error beside an explicit PLAINTEXT or SASL_PLAINTEXT, and so is a key
    (C{key_alone}: that error's text), else they are left unused (Kafka's PLAINTEXT default).
    """
    ca, cert, key = ca or security.ca, cert or security.cert, key or security.key
    if not (forced or security.protocol in ("SSL", "SASL_SSL")):
        if security.protocol in ("PLAINTEXT", "SASL_PLAINTEXT") and (ca or cert or key):
            raise TwlogError(f"{where}: {prefix}ssl.* settings with {prefix}security.protocol={security.protocol}")
        if key:
            raise TwlogError(key_alone or f"{where}: {prefix}ssl.key.location needs {prefix}security.protocol=SSL "
                                          "or SASL_SSL")
        return None
    return TLSSettings(ca_file=ca, cert_file=cert, key_file=key, check_hostname=security.check_hostname)


def sasl_needs_tls(mechanism: str, tls: bool, text: str) -> None:
    """Refuse PLAIN without TLS (C{text}: the error), as the brokers do."""
    if mechanism == "PLAIN" and not tls:
        raise TwlogError(text)


def security_settings(config: Mapping[str, str], where: str,
                      prefix: str = "") -> tuple[TLSSettings | None, SASLSettings | None]:
    """The TLS and SASL settings of the Kafka client settings C{config} alone (no command-line options: the
    Spark source's, the mirror's).

    @raise TwlogError: as L{parse_security}, and: a SASL protocol without a user, a user without a password,
        SASL settings without a SASL protocol, PLAIN without TLS (one line each).
    """
    security = parse_security(config, where, prefix)
    tls = tls_of(security, where, prefix)
    sasl_protocol = security.protocol.startswith("SASL_")
    if not sasl_protocol:
        if security.user or security.password:
            raise TwlogError(f"{where}: SASL credentials need {prefix}security.protocol=SASL_PLAINTEXT or SASL_SSL")
        return tls, None
    if security.user is None:
        raise TwlogError(f"{where}: {prefix}security.protocol={security.protocol} needs {prefix}sasl.jaas.config "
                         f"(or {prefix}sasl.username and {prefix}sasl.password)")
    if security.password is None:
        raise TwlogError(f"{where}: {prefix}sasl.username={security.user} needs {prefix}sasl.password")
    mechanism = security.mechanism or DEFAULT_MECHANISM
    sasl_needs_tls(mechanism, tls is not None, f"{where}: {prefix}sasl.mechanism=PLAIN sends the password in the "
                   f"clear: it needs {prefix}security.protocol=SASL_SSL")
    return tls, SASLSettings(mechanism, security.user, security.password)
