# -*- test-case-name: tests.console.test_tap,tests.integration.test_console_cluster -*-
"""C{twlog console}: the web console in the foreground, with the options of C{twistd twlog-console}.

It logs to stderr (from the moment it listens) and stops on Ctrl-C or SIGTERM; a port or interface it cannot
listen on is one line naming the option to change, and exit 1; a bad option is one line and exit 2.  A ZooKeeper
that cannot be reached does not stop it: the API answers 503 naming it until it can (docs/console.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from twlog.cli.foreground import run_plugin
from twlog.console.service import cannot_listen
from twlog.console.tap import Options


class ConsoleOptions(Options):
    """C{twistd twlog-console}'s options, named for C{twlog console}."""

    synopsis = "Usage: twlog console [options] --zookeeper HOST:PORT[/chroot]"


def main(argv: Sequence[str], reactor=None) -> int:
    """Run the console until Ctrl-C or SIGTERM; return the exit status."""
    return run_plugin(ConsoleOptions(), "console", argv,
                      lambda options, service, error, text: cannot_listen(service, error, text), reactor)
