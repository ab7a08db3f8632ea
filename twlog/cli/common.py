# -*- test-case-name: tests.cli.test_common,tests.integration.test_cli -*-
"""What the client commands share: running a command under C{task.react}, and parsing broker and time options.

Each command is a coroutine function C{(reactor, args)}; L{run} runs it and
turns the errors a user can act on (a broker that is down, a bad offset, a
missing file) into one line on stderr and exit status 1.
"""

from __future__ import annotations

import sys

from twisted.internet.defer import Deferred
from twisted.internet.task import react

from twlog.client.discovery import parse_brokers
from twlog.consumer.simple import EARLIEST, LATEST
from twlog.errors import TwlogError


async def reporting_errors(main, reactor, args) -> None:
    """Await C{main(reactor, args)}; a user's error ends it with one line on stderr and C{SystemExit(1)}."""
    try:
        await main(reactor, args)
    except TwlogError as e:
        print(f"twlog: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    except (BrokenPipeError, KeyboardInterrupt):  # `twlog ... | head`, Ctrl-C: stop quietly
        raise SystemExit(1) from None
    except OSError as e:  # a file that is not there, a directory we cannot write
        print(f"twlog: {e.strerror}: {e.filename}" if e.filename else f"twlog: {e}", file=sys.stderr)
        raise SystemExit(1) from None


def run(main, args) -> int:
    """Run C{main(reactor, args)} (a coroutine function) under react; return the exit status."""
    try:
        react(lambda reactor: Deferred.fromCoroutine(reporting_errors(main, reactor, args)))
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def parse_time(text: str) -> int:
    """C{latest}, C{earliest}, or milliseconds since the epoch, as OFFSETS wants it."""
    if text == "latest":
        return LATEST
    if text == "earliest":
        return EARLIEST
    return int(text)


def single_broker(text: str) -> tuple[str, int]:
    """The one C{HOST:PORT} a single-partition command talks to."""
    brokers = parse_brokers(text)
    if len(brokers) != 1:
        raise TwlogError(f"name one broker (HOST:PORT), not {text!r}")
    return brokers[0]
