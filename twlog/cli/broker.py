# -*- test-case-name: tests.cli.test_broker,tests.integration.test_cli_broker -*-
"""C{twlog broker}: one broker in the foreground, with the options of C{twistd twlog}.

It logs to stderr, stops cleanly on Ctrl-C or SIGTERM (leave ZooKeeper, stop
listening, flush), and when it cannot start (port in use, log directory
locked by another broker, broker id taken, ZooKeeper unreachable) it prints
one line naming why and exits 1; a bad option is one line and exit 2.  A
final flush that fails makes the exit status 1 too.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from twisted.logger import ILogObserver, textFileLogObserver
from zope.interface import implementer

from twlog.broker.service import BrokerService
from twlog.broker.tap import Options
from twlog.cli.foreground import log_to, serve
from twlog.cli.parsing import parse_usage

#: How long the broker waits for ZooKeeper when it starts.
ZOOKEEPER_CONNECT_TIMEOUT_S = 5.0


class BrokerOptions(Options):
    """C{twistd twlog}'s options, named for C{twlog broker}."""

    synopsis = "Usage: twlog broker [options]"


@implementer(ILogObserver)
class _HeldUntilStarted:
    """Holds log events until the broker has started, then shows them and everything after.

    So a broker that cannot start prints just the one line saying why, not the
    start-up log (and kazoo's retries) that led to it.
    """

    def __init__(self, observer: ILogObserver) -> None:
        self.observer = observer
        self.held: list[dict] | None = []

    def __call__(self, event: dict) -> None:
        if self.held is None:
            self.observer(event)
        else:
            self.held.append(event)

    def started(self, result: object) -> object:
        held, self.held = self.held or [], None
        for event in held:
            self.observer(event)
        return result


def parse(argv: Sequence[str]) -> BrokerOptions | int:
    """The parsed options, or the exit status when there is nothing to run (--help: 0; a bad option: 2)."""
    return parse_usage(BrokerOptions(), "broker", argv)


def main(argv: Sequence[str], reactor=None) -> int:
    """Run a broker until Ctrl-C or SIGTERM; return the exit status."""
    options = parse(argv)
    if isinstance(options, int):
        return options
    if reactor is None:
        from twisted.internet import reactor
    held = _HeldUntilStarted(textFileLogObserver(sys.stderr))
    log_to(held)
    service = BrokerService(options.config, reactor, stop_reactor_on_error=False,
                            zookeeper_connect_timeout_s=ZOOKEEPER_CONNECT_TIMEOUT_S)
    service.listening.addCallback(held.started)
    failure = serve(reactor, service)
    if failure is not None:
        config = options.config
        print(f"twlog broker: cannot start broker {config.broker_id} (port {config.port}, --log-dir "
              f"{config.log.log_dir}): {failure}", file=sys.stderr)
        return 1
    return 1 if service.stopped_cleanly is False else 0
