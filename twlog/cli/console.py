# -*- test-case-name: tests.console.test_tap,tests.integration.test_console_cluster -*-
"""C{twlog console}: the web console in the foreground, with the options of C{twistd twlog-console}.

It logs to stderr (from the moment it listens) and stops on Ctrl-C or SIGTERM; a port or interface it cannot
listen on is one line naming the option to change, and exit 1; a bad option is one line and exit 2.  A ZooKeeper
that cannot be reached does not stop it: the API answers 503 naming it until it can (docs/console.md).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from twisted.logger import textFileLogObserver

from twlog.cli.foreground import log_to, serve
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
    refused: list[BaseException] = []

    def listening(port):  # (logging starts here: a console that cannot start says one line, not two)
        log_to(textFileLogObserver(sys.stderr))
        return port

    def not_listening(failure):
        refused.append(failure.value)
        return failure

    service.listening.addCallbacks(listening, not_listening)
    failure = serve(reactor, service)
    if failure is not None:
        print(f"twlog console: {cannot_listen(service, refused[0] if refused else None, failure)}", file=sys.stderr)
        return 1
    return 0
