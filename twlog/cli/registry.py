# -*- test-case-name: tests.schema_registry.test_tap,tests.integration.test_schema_registry -*-
"""C{twlog registry}: the schema registry in the foreground, with the options of C{twistd twlog-registry}.

It logs to stderr (from the moment it listens) and stops on Ctrl-C or SIGTERM; a port or interface
it cannot listen on is one line naming the option to change, and exit 1; a bad option is one line
and exit 2.  A twlog cluster that cannot be reached does not stop it: reads are answered from
memory and writes 500 until the cluster answers (docs/registry.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from twlog.cli.foreground import run_plugin
from twlog.schema_registry.service import listen_error
from twlog.schema_registry.tap import Options


class RegistryOptions(Options):
    """C{twistd twlog-registry}'s options, named for C{twlog registry}."""

    synopsis = "Usage: twlog registry [options] (--zookeeper HOST:PORT[/chroot] | --broker HOST:PORT[,...])"


def main(argv: Sequence[str], reactor=None) -> int:
    """Run the registry until Ctrl-C or SIGTERM; return the exit status."""
    return run_plugin(RegistryOptions(), "registry", argv,
                      lambda options, service, error, text: cannot_listen(options, error, text), reactor)


def cannot_listen(options: RegistryOptions, error: BaseException | None, text: str) -> str:
    """Why the registry cannot listen, as one line naming the option to change (L{listen_error})."""
    return listen_error(options["interface"], options["port"], error, text)
