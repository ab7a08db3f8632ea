# -*- test-case-name: tests.cli.test_sasl_options -*-
"""The client commands' SASL options, added to their parsers (read by L{twlog.cli.sasl_options.sasl_settings}).

Light on purpose (argparse only): C{twlog --help} imports it.
"""

from __future__ import annotations

import argparse

__all__ = ["DEFAULT_MECHANISM", "MECHANISMS", "add_sasl_options"]

#: The mechanism of C{--user} without C{--sasl-mechanism} (twlog.client.sasl.DEFAULT_MECHANISM).
DEFAULT_MECHANISM = "SCRAM-SHA-512"
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")


def add_sasl_options(command, inherit: bool = False) -> None:
    """Add the SASL options to C{command} (with C{inherit}, an action's: left out, the command's value stays)."""
    default = argparse.SUPPRESS if inherit else None
    command.add_argument("--user", default=default, metavar="NAME",
                         help="authenticate to the brokers as this user (SASL; brokers started with --sasl-mechanisms)")
    command.add_argument("--password-file", default=default, metavar="FILE",
                         help="the first line of FILE is --user's password (default: asked on the terminal)")
    command.add_argument("--sasl-mechanism", default=default, choices=MECHANISMS, type=str.upper,
                         help=f"how --user authenticates (default: {DEFAULT_MECHANISM}; PLAIN over TLS only)")
