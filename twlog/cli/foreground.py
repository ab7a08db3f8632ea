# -*- test-case-name: tests.cli.test_foreground,tests.integration.test_cli_broker -*-
"""A Twisted service run in the foreground of a C{twlog} command (C{twlog broker}, C{twlog registry}, C{twlog console}).

Its log goes to stderr (info and above); it starts once the reactor runs and
stops before the reactor shuts down (Ctrl-C, SIGTERM); when it cannot start,
the reactor stops and the command gets the one line saying why.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from twisted.application.service import IService
from twisted.logger import (
    FilteringLogObserver,
    ILogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    PredicateResult,
    globalLogBeginner,
    textFileLogObserver,
)
from twisted.python import usage

from twlog.cli.parsing import parse_usage

#: Where Twisted's ClientService logs each reconnection attempt ("Scheduling retry N to connect ...").
CLIENT_SERVICE_NAMESPACE = "twisted.application._client_service"


def no_reconnect_lines(event: dict) -> PredicateResult:
    """Drop Twisted's ClientService line for each reconnection attempt: a follower of a leader that died, or a
    client of a broker that is down, would write one every second or so.  twlog's own line says what failed."""
    if str(event.get("log_namespace", "")).startswith(CLIENT_SERVICE_NAMESPACE) and \
            str(event.get("log_format", "")).startswith("Scheduling retry"):
        return PredicateResult.no
    return PredicateResult.maybe


def log_to(observer: ILogObserver) -> None:
    """Send the log's events of level info and above to C{observer} (stdout and stderr left as they are), but
    Twisted's lines for each reconnection attempt (L{no_reconnect_lines})."""
    globalLogBeginner.beginLoggingTo(
        [FilteringLogObserver(observer, [LogLevelFilterPredicate(LogLevel.info), no_reconnect_lines])],
        redirectStandardIO=False)


def serve(reactor, service: IService) -> str | None:
    """Run C{reactor} with C{service} started in it, until the reactor stops; why the service could not start, or None.

    C{service.listening} is a Deferred that fails when the service cannot start (then the reactor is stopped).
    A service stopped (Ctrl-C, SIGTERM) before it finished starting is stopped, not one that cannot start: the
    start it abandons fails (a broker's ZooKeeper session closed under its registration: ConnectionLoss), and
    that failure is not reported.
    """
    failures: list[str] = []
    stopping: list[bool] = []

    def cannot_start(failure) -> None:
        if stopping:
            return None  # the start was abandoned by the stop
        failures.append(failure.getErrorMessage() or failure.type.__name__)
        if reactor.running:
            reactor.stop()

    def stop():
        stopping.append(True)
        return service.stopService() if service.running else None

    service.listening.addErrback(cannot_start)
    reactor.callWhenRunning(service.startService)
    reactor.addSystemEventTrigger("before", "shutdown", stop)
    reactor.run()
    return failures[0] if failures else None


def run_listening(reactor, service, command: str, cannot_listen: Callable[[BaseException | None, str], str]) -> int:
    """Run C{service} (one with a C{listening} Deferred: the registry, the console) until Ctrl-C or SIGTERM.

    Its log goes to stderr from the moment it listens, so a service that cannot start says one line, not two:
    C{twlog COMMAND: <cannot_listen(error, text)>}, naming the option to change, and the status is 1; else 0.
    """
    refused: list[BaseException] = []

    def listening(port):
        log_to(textFileLogObserver(sys.stderr))
        return port

    def not_listening(failure):
        refused.append(failure.value)
        return failure

    service.listening.addCallbacks(listening, not_listening)
    failure = serve(reactor, service)
    if failure is not None:
        print(f"twlog {command}: {cannot_listen(refused[0] if refused else None, failure)}", file=sys.stderr)
        return 1
    return 0


def run_plugin(options: usage.Options, command: str, argv: Sequence[str],
               cannot_listen: Callable[[usage.Options, object, BaseException | None, str], str], reactor=None) -> int:
    """C{twlog COMMAND}: a twistd plugin's C{options} (one with a C{service(reactor)} method: the registry, the
    console) parsed from C{argv}, and its service run in the foreground (L{run_listening}) until Ctrl-C or SIGTERM.

    @param cannot_listen: C{(options, service, error, text)} to the one line saying why the service cannot listen.
    @return: the exit status: 0 after C{--help} or a clean stop, 1 when it cannot start, 2 for a bad option.
    """
    parsed = parse_usage(options, command, argv)
    if isinstance(parsed, int):
        return parsed
    if reactor is None:
        from twisted.internet import reactor
    service = parsed.service(reactor)
    return run_listening(reactor, service, command, lambda error, text: cannot_listen(parsed, service, error, text))
