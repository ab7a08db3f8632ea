# -*- test-case-name: tests.cli.test_registry_options -*-
"""The options of the commands that reach a schema registry (C{--registry}): HTTPS and basic auth.

Light on purpose (argparse only): C{twlog --help} imports it.  L{twlog.cli.registry_settings} reads them, and the
registry's settings of a C{--client-config} file (L{REGISTRY_CONFIG_KEYS}, named as Confluent's clients name
them).
"""

from __future__ import annotations

__all__ = ["REGISTRY_CONFIG_KEYS", "add_registry_options"]

#: The schema registry settings a --client-config file may hold (Confluent's serializers' and Python client's
#: names; the unprefixed basic.auth.* are the Python client's, the schema.registry.* ones the serializers').
REGISTRY_CONFIG_KEYS = ("schema.registry.ssl.ca.location",
                        "schema.registry.ssl.certificate.location", "schema.registry.ssl.key.location",
                        "basic.auth.credentials.source", "basic.auth.user.info",
                        "schema.registry.basic.auth.credentials.source", "schema.registry.basic.auth.user.info")


def add_registry_options(command) -> None:
    """Add the registry's HTTPS and basic auth options to C{command} (which has C{--registry})."""
    command.add_argument("--registry-ca", default=None, metavar="FILE",
                         help="trust the https:// registry's certificate if a CA of this PEM file signed it "
                         "(schema.registry.ssl.ca.location; default: the system's CAs)")
    command.add_argument("--registry-cert", default=None, metavar="FILE",
                         help="this client's certificate (PEM) for a registry that requires one (mutual TLS)")
    command.add_argument("--registry-key", default=None, metavar="FILE", help="the private key of --registry-cert")
    command.add_argument("--registry-user", default=None, metavar="NAME",
                         help="basic auth to the registry as NAME, the password from --registry-password-file")
    command.add_argument("--registry-password-file", default=None, metavar="FILE",
                         help="the file whose first line is --registry-user's password")
