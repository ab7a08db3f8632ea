# -*- test-case-name: tests.cli.test_sasl_options,tests.integration.test_sasl -*-
"""The client commands' SASL options: C{--user}, C{--password-file}, C{--sasl-mechanism}, and their
C{--client-config} keys C{sasl.username}, C{sasl.password}, C{sasl.mechanism} (librdkafka's names), with
C{security.protocol} C{SASL_PLAINTEXT} or C{SASL_SSL}, or the Java client's C{sasl.jaas.config}
(L{twlog.client.kafka_settings}: the rules the Spark source and the mirror share).

L{twlog.cli.sasl_parsers} adds the options (argparse only: C{twlog --help} imports it); L{sasl_settings} turns them
and the file into the L{SASLSettings} of the command's L{twlog.client.options.ClientOptions}.  The password is
never an option: C{--password-file} (its first line), C{sasl.password} in the config file, or a prompt when
stdin is a terminal.  docs/security.md, "Authentication".
"""

from __future__ import annotations

import getpass
import sys

from twlog.cli.passwords import read_password_file
from twlog.cli.sasl_parsers import DEFAULT_MECHANISM, MECHANISMS
from twlog.client.kafka_settings import parse_security, sasl_needs_tls
from twlog.client.sasl import SASLSettings
from twlog.errors import TwlogError

__all__ = ["sasl_settings"]


def sasl_settings(args, config: dict[str, str], tls: bool, prompt=None):
    """The SASL settings of a command's options and its C{--client-config} settings C{config}; None: no SASL.

    @param tls: whether the command speaks TLS (PLAIN is refused without it).
    @param prompt: C{(user) -> password} when neither a file nor the config gives it (default: ask on the
        terminal, L{twlog.cli.passwords}).
    @raise TwlogError: a password without a user, a SASL protocol without a user, no password to be had, PLAIN
        without TLS (one line each).
    """
    security = parse_security(config, f"--client-config {getattr(args, 'client_config', None)}")
    protocol = security.protocol
    user = getattr(args, "user", None) or security.user
    password_file = getattr(args, "password_file", None)
    mechanism = (getattr(args, "sasl_mechanism", None) or security.mechanism or DEFAULT_MECHANISM).upper()
    if user is None:
        if password_file or getattr(args, "sasl_mechanism", None):
            raise TwlogError("--password-file and --sasl-mechanism need --user (or sasl.username in --client-config)")
        if protocol.startswith("SASL_"):
            raise TwlogError(f"security.protocol={protocol} needs sasl.username in --client-config (or --user)")
        return None
    if mechanism not in MECHANISMS:
        raise TwlogError(f"sasl.mechanism={mechanism} is not one of {', '.join(MECHANISMS)}")
    sasl_needs_tls(mechanism, tls, "--sasl-mechanism PLAIN sends the password in the clear: it needs TLS "
                   "(--tls-ca, or security.protocol=SASL_SSL); SCRAM does not")
    if password_file:
        password = read_password_file(password_file)
    elif security.password:
        password = security.password
    else:
        password = (prompt or _ask)(user)
    return SASLSettings(mechanism, user, password)


def _ask(user: str) -> str:
    if not sys.stdin.isatty():
        raise TwlogError(f"--user {user} needs --password-file FILE (or sasl.password in --client-config): a "
                         "password is never taken from the command line, and is asked only on a terminal")
    return getpass.getpass(f"password for {user}: ")
