# -*- test-case-name: tests.cli.test_common,tests.integration.test_cli -*-
"""What the client commands share: running a command under C{task.react}, one-line errors, option parsing.

Each command is a coroutine function C{(reactor, args)}; L{run} runs it and
turns every error into one line on stderr: exit status 2 for a usage error
(L{UsageError}: a value the command cannot use), 1 for anything that went
wrong at run time (a broker that is down, an unknown topic, a bad offset, a
missing file).  A bug is one line too, naming C{--debug}, which shows the
traceback.

The option parsers are in L{twlog.cli.options}.
"""

from __future__ import annotations

import logging
import sys
import traceback

from twisted.internet.defer import Deferred
from twisted.internet.task import react

from twlog.cli.sasl_options import sasl_settings
from twlog.cli.suggest import suggest_topic
from twlog.cli.tls_options import read_client_config, tls_settings_of
from twlog.cli.zk_options import zookeeper_credentials
from twlog.client.async_discovery import discover_async
from twlog.client.discovery import parse_brokers
from twlog.client.options import ClientOptions
from twlog.coord.layout import PartitionLocation, describe_offline
from twlog.coord.zk import NoAuthError
from twlog.errors import ConnectionFailed, PartitionsOffline, TwlogError, UnknownTopic
from twlog.partition import address_text
from twlog.partition import resolve_partition as partition_named

#: The connection settings of the commands: an unreachable broker is said within a few seconds.
CLIENT_OPTIONS = ClientOptions(timeout_s=30.0, connect_timeout_s=3.0, connect_attempts=2)



def client_options(args) -> ClientOptions:
    """The connection settings of a command: L{CLIENT_OPTIONS} with its TLS and SASL options (L{tls_settings_of},
    L{sasl_settings}) and its C{--client-config} file's, and its ZooKeeper credentials
    (C{--zookeeper-credentials-file}).

    With TLS and C{--zookeeper}, the brokers are reached at the TLS listeners they register
    (L{twlog.coord.endpoints}).
    """
    path = getattr(args, "client_config", None)
    config = read_client_config(path) if path else {}
    tls = tls_settings_of(args, config, path)
    sasl = sasl_settings(args, config, tls is not None)  # (SASL: docs/security.md, "Authentication")
    options = CLIENT_OPTIONS if tls is None and sasl is None else ClientOptions.build(CLIENT_OPTIONS, tls=tls,
                                                                                        sasl=sasl)
    credentials = zookeeper_credentials(args)
    return options if credentials is None else ClientOptions.build(options, zookeeper_credentials=credentials)


#: How long finding a topic's partitions (METADATA or ZooKeeper) may take before the command says why not.
DISCOVERY_TIMEOUT_S = 5.0


class UsageError(TwlogError):
    """A value the command cannot use (found after parsing): one line, exit status 2."""


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


async def reporting_errors(main, reactor, args) -> None:
    """Await C{main(reactor, args)}; any error ends it with one line on stderr and C{SystemExit(1 or 2)}."""
    try:
        await main(reactor, args)
    except UsageError as e:
        print(f"twlog: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except (TwlogError, ValueError) as e:
        if getattr(args, "debug", False):
            traceback.print_exc()
        print(f"twlog: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    except NoAuthError as e:  # a secured cluster's znodes
        print(f"twlog: {e}: give the credentials of an identity allowed to (--zookeeper-credentials-file; "
              "docs/security.md, ZooKeeper)", file=sys.stderr)
        raise SystemExit(1) from None
    except (BrokenPipeError, KeyboardInterrupt):  # `twlog ... | head`, Ctrl-C: stop quietly
        raise SystemExit(1) from None
    except OSError as e:  # a file that is not there, a directory we cannot write
        print(f"twlog: {e.strerror}: {e.filename}" if e.filename else f"twlog: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    except SystemExit:
        raise
    except Exception as e:  # a bug: still one line, unless --debug asks for the traceback
        if getattr(args, "debug", False):
            traceback.print_exc()
        else:
            print(f"twlog: unexpected error: {_describe(e)} (--debug shows the traceback)", file=sys.stderr)
        raise SystemExit(1) from None


async def bounded(reactor, d: Deferred, timeout_s: float) -> bool:
    """Wait for C{d} at most C{timeout_s} seconds; return whether it fired in time (its errors are swallowed)."""
    finished: Deferred = Deferred()
    timer = reactor.callLater(timeout_s, lambda: finished.called or finished.callback(False))

    def fired(_: object) -> None:
        if not finished.called:
            timer.cancel()
            finished.callback(True)

    d.addBoth(fired)
    return await finished


def run(main, args) -> int:
    """Run C{main(reactor, args)} (a coroutine function) under react; return the exit status.

    Warnings of twlog's blocking-style loggers (a bad registration skipped by the cluster layout) go to stderr
    as C{twlog: warning: ...} lines.
    """
    _warnings_to_stderr()
    try:
        react(lambda reactor: Deferred.fromCoroutine(reporting_errors(main, reactor, args)))
    except SystemExit as e:
        return int(e.code or 0)
    return 0


class _LineFormatter(logging.Formatter):
    """C{twlog: warning: <message>}."""

    def format(self, record: logging.LogRecord) -> str:
        return f"twlog: {record.levelname.lower()}: {record.getMessage()}"


def _warnings_to_stderr() -> None:
    """Send the C{twlog} loggers' warnings to stderr, one line each (once per process)."""
    logger = logging.getLogger("twlog")
    if not any(getattr(handler, "twlog_cli", False) for handler in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(_LineFormatter())
        handler.twlog_cli = True
        logger.addHandler(handler)


def single_broker(text: str) -> tuple[str, int]:
    """The one C{HOST:PORT} a single-broker command talks to."""
    brokers = parse_brokers(text)
    if len(brokers) != 1:
        raise TwlogError(f"name one broker (HOST:PORT), not {text!r}")
    return brokers[0]


# -- partitions ----------------------------------------------------------------------------------------------------


def where(args) -> str:
    """The cluster the command asks, as messages name it."""
    if getattr(args, "zookeeper", None):
        return f"the brokers registered in ZooKeeper at {args.zookeeper}"
    return ", ".join(address_text(h, p) for h, p in parse_brokers(args.broker))


async def find_partitions(args, topic: str, reactor=None, offline: list | None = None) -> list[PartitionLocation]:
    """Every partition of C{topic} in the cluster that C{--zookeeper} or C{--broker} names, sorted; with
    C{--partition}, that one alone.

    Asked on the reactor (L{discover_async}): no thread.  Bad registrations are skipped, with a warning each.
    A partition whose broker is down is never left out in silence: the command fails naming the broker and
    its partitions, unless C{--allow-partial}, when one stderr line says what is left out.  With
    C{--partition}, only that partition's broker matters.  Given an C{offline} list, the partitions whose
    broker is down are put there instead, for the caller to show (C{topics describe}).

    @raise TwlogError: the topic does not exist there, the brokers (ZooKeeper) cannot be reached, or a
        partition's broker is down.
    @raise UsageError: C{--partition} names no partition of the topic.
    """
    source = {"zookeeper": args.zookeeper} if getattr(args, "zookeeper", None) else {"brokers": args.broker}
    options = ClientOptions.build(client_options(args), timeout_s=DISCOVERY_TIMEOUT_S)
    wanted = getattr(args, "partition", None)
    try:
        found = await discover_async([topic], options=options, reactor=reactor, **source)
    except UnknownTopic:
        hint = await suggest_topic(topic, source, options, reactor)
        raise TwlogError(f"topic {topic!r} does not exist on {where(args)}{hint}") from None
    except PartitionsOffline as e:
        if wanted is not None:
            return [_one_of(e.available, e.offline, wanted)]
        if offline is not None:
            offline.extend(e.offline)
            return e.available
        if not getattr(args, "allow_partial", False) or not e.available:
            hint = "" if getattr(args, "allow_partial", True) else " (--allow-partial reads the rest)"
            raise TwlogError(f"{e}{hint}") from None
        print(f"twlog: warning: leaving out {len(e.offline)} of {len(e.offline) + len(e.available)} partitions "
              f"of {topic!r}: {e}", file=sys.stderr)
        return e.available
    except ConnectionFailed as e:
        raise TwlogError(str(e)) from None
    return found if wanted is None else [resolve_partition(found, wanted)]


def _one_of(available: list[PartitionLocation], offline: list, wanted: str) -> PartitionLocation:
    """The partition C{wanted} names among a topic's readable and offline partitions.

    @raise TwlogError: it is offline, naming its broker.
    @raise UsageError: it is neither.
    """
    by_partition: dict = {location.tp: location for location in available}
    by_partition.update((tp, None) for tp in offline)
    try:
        tp = partition_named(wanted, list(by_partition))
    except ValueError as e:
        raise UsageError(str(e)) from None
    if by_partition[tp] is None:
        raise TwlogError(f"cannot read {tp}: {describe_offline([tp])}")
    return by_partition[tp]


def resolve_partition(locations: list[PartitionLocation], wanted: str) -> PartitionLocation:
    """The partition C{wanted} names (L{twlog.partition.resolve_partition}: C{<broker id>-<partition>} or an index).

    @raise UsageError: no such partition, listing the valid ones.
    """
    by_partition = {location.tp: location for location in locations}
    try:
        return by_partition[partition_named(wanted, list(by_partition))]
    except ValueError as e:
        raise UsageError(str(e)) from None


def stop_on_shutdown(reactor, finish, closing: Deferred):
    """On the reactor's shutdown (Ctrl-C, SIGTERM), call C{finish()} and hold the shutdown until C{closing} fires.

    Returns the trigger's id, for C{reactor.removeSystemEventTrigger} once the command has closed by itself.
    """

    def stop() -> Deferred:
        finish()
        return closing

    return reactor.addSystemEventTrigger("before", "shutdown", stop)
