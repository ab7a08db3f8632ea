# -*- test-case-name: tests.console.test_tap,tests.integration.test_console_cluster -*-
"""C{twlog console}: the web console in the foreground, with the options of C{twistd twlog-console}.

It logs to stderr (from the moment it listens) and stops on Ctrl-C or SIGTERM; a port or interface it cannot
listen on is one line naming the option to change, and exit 1; a bad option is one line and exit 2.  A ZooKeeper
that cannot be reached does not stop it: the API answers 503 naming it until it can (docs/console.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from twlog.cli.foreground import run_listening
from twlog.cli.parsing import parse_usage
from twlog.console.service import cannot_listen
from twlog.console.tap import Options


class ConsoleOptions(Options):
    """C{twistd twlog-console}'s options, named for C{twlog console}."""

    synopsis = "Usage: twlog console [options] --zookeeper HOST:PORT[/chroot]"


def parse(argv: Sequence[str]) -> ConsoleOptions | int:
    """The parsed options, or the exit status when there is nothing to run (--help: 0; a bad option: 2)."""
    return parse_usage(ConsoleOptions(), "console", argv)


def main(argv: Sequence[str], reactor=None) -> int:
    """Run the console until Ctrl-C or SIGTERM; return the exit status."""
    options = parse(argv)
    if isinstance(options, int):
        return options
    if reactor is None:
        from twisted.internet import reactor
    service = options.service(reactor)
    return run_listening(reactor, service, "console", lambda error, text: cannot_listen(service, error, text))
