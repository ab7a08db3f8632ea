# -*- test-case-name: tests.schema_registry.test_tap,tests.integration.test_schema_registry -*-
"""C{twlog registry}: the schema registry in the foreground, with the options of C{twistd twlog-registry}.

It logs to stderr and stops on Ctrl-C or SIGTERM; a port it cannot listen on is one line and exit
1; a bad option is one line and exit 2.  A twlog cluster that cannot be reached does not stop it:
requests are answered 500 (Confluent's 50001) until the cluster answers.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from twisted.logger import textFileLogObserver

from twlog.cli.foreground import log_to, serve
from twlog.cli.parsing import parse_usage
from twlog.schema_registry.tap import Options


class RegistryOptions(Options):
    """C{twistd twlog-registry}'s options, named for C{twlog registry}."""

    synopsis = "Usage: twlog registry [options] (--zookeeper HOST:PORT[/chroot] | --broker HOST:PORT[,...])"


def parse(argv: Sequence[str]) -> RegistryOptions | int:
    """The parsed options, or the exit status when there is nothing to run (--help: 0; a bad option: 2)."""
    return parse_usage(RegistryOptions(), "registry", argv)


def main(argv: Sequence[str], reactor=None) -> int:
    """Run the registry until Ctrl-C or SIGTERM; return the exit status."""
    options = parse(argv)
    if isinstance(options, int):
        return options
    if reactor is None:
        from twisted.internet import reactor
    log_to(textFileLogObserver(sys.stderr))
    failure = serve(reactor, options.service(reactor))
    if failure is not None:
        print(f"twlog registry: cannot listen on {options['interface']}:{options['port']}: {failure}", file=sys.stderr)
        return 1
    return 0
