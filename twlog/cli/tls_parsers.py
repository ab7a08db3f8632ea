# -*- test-case-name: tests.cli.test_tls_options -*-
"""The client commands' TLS options, added to their parsers (read by L{twlog.cli.tls_options.tls_settings}).

Light on purpose (argparse only): C{twlog --help} imports it.
"""

from __future__ import annotations

import argparse

__all__ = ["add_tls_options"]


def add_tls_options(command, inherit: bool = False) -> None:
    """Add the TLS options to C{command} (with C{inherit}, an action's: left out, the command's value stays)."""
    default = argparse.SUPPRESS if inherit else None
    command.add_argument("--tls-ca", default=default, metavar="FILE",
                         help="speak TLS to the brokers' --tls-port, trusting the CAs of this PEM file")
    command.add_argument("--tls-cert", default=default, metavar="FILE",
                         help="this client's certificate (PEM), for brokers that require one (mutual TLS)")
    command.add_argument("--tls-key", default=default, metavar="FILE", help="the private key of --tls-cert (PEM)")
    command.add_argument("--client-config", default=default, metavar="FILE",
                         help="Kafka client settings, key=value lines: security.protocol=SSL, ssl.ca.location, "
                         "ssl.certificate.location, ssl.key.location, ssl.endpoint.identification.algorithm")
