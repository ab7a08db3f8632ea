# -*- test-case-name: tests.cli.test_registry_options -*-
"""How a command reaches its schema registry: the URL, HTTPS trust and basic auth, from its options and its
C{--client-config} file, as Confluent's clients take them.

A password is never taken from the command line: C{--registry-user NAME} reads it from C{--registry-password-file},
or a client config file holds C{basic.auth.user.info=user:password} (with C{basic.auth.credentials.source=USER_INFO},
implied when left out).  The URL is always C{--registry}'s, and a password in it is refused.  An option on the
command line wins over the file.
"""

from __future__ import annotations

import urllib.parse

import attrs

from twlog.cli.tls_options import read_client_config
from twlog.client.tls import TLSSettings
from twlog.errors import TwlogError

__all__ = ["RegistrySettings", "registry_settings"]


@attrs.frozen
class RegistrySettings:
    """The registry's URL (without credentials), its TLS settings (None: the system's CAs) and basic auth."""

    url: str
    tls: TLSSettings | None = None
    user_info: str | None = attrs.field(default=None, repr=False)


def _setting(config: dict[str, str], name: str) -> str | None:
    """C{name} of C{config}, or its C{schema.registry.}-prefixed form (the serializers' name)."""
    return config.get(name) or config.get(f"schema.registry.{name}")


def _password(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as e:
        raise TwlogError(f"cannot read --registry-password-file {path}: {getattr(e, 'strerror', None) or e}") from None
    if not line:
        raise TwlogError(f"--registry-password-file {path} is empty (its first line is the password)")
    return line


def registry_settings(args) -> RegistrySettings | None:
    """The registry a command's options and client config file name, or None (no C{--registry}).

    @raise TwlogError: a password in C{--registry}, an option without its partner, an unreadable file, or a
        credentials source other than USER_INFO or URL (one line each).
    """
    path = getattr(args, "client_config", None)
    config = read_client_config(path) if path else {}
    url = getattr(args, "registry", None)
    if url and urllib.parse.urlsplit(url).username is not None:
        raise TwlogError("--registry: give the registry's user with --registry-user and its password in "
                         "--registry-password-file (or basic.auth.user.info in --client-config), not in the URL: "
                         "a command line is visible to every user of this machine")
    if not url:
        return None
    source = (_setting(config, "basic.auth.credentials.source") or "USER_INFO").upper()
    if source != "USER_INFO":
        raise TwlogError(f"--client-config {path}: basic.auth.credentials.source={source} is not supported by twlog's "
                         "commands (USER_INFO, with basic.auth.user.info=user:password)")
    user_info = _setting(config, "basic.auth.user.info")
    if user_info is not None and ":" not in user_info:
        raise TwlogError(f"--client-config {path}: basic.auth.user.info must be user:password")
    user, password_file = getattr(args, "registry_user", None), getattr(args, "registry_password_file", None)
    if (user is None) != (password_file is None):
        raise TwlogError("--registry-user and --registry-password-file go together (the user and its password)")
    if user is not None:
        user_info = f"{user}:{_password(password_file)}"
    ca = getattr(args, "registry_ca", None) or config.get("schema.registry.ssl.ca.location")
    cert = getattr(args, "registry_cert", None) or config.get("schema.registry.ssl.certificate.location")
    key = getattr(args, "registry_key", None) or config.get("schema.registry.ssl.key.location")
    tls = None
    if ca or cert or key:
        if not url.startswith("https://"):
            raise TwlogError(f"--registry-ca, --registry-cert and --registry-key need an https:// registry, not {url}")
        if (cert is None) != (key is None):
            raise TwlogError("--registry-cert and --registry-key go together (the client's certificate and its key)")
        tls = TLSSettings(ca_file=ca, cert_file=cert, key_file=key)
    return RegistrySettings(url, tls, user_info)
