# -*- test-case-name: tests.cli.test_mirror,tests.integration.test_mirror -*-
"""C{twlog mirror}: copy topics from source clusters into a target (L{twlog.mirror}) until Ctrl-C or SIGTERM.

A refusal (a cluster unreachable, a source that is the target) is one line
and exit status 1; a bad regular expression is a usage error (2), found by
the parser.  Ctrl-C or SIGTERM stops cleanly: the target's acknowledgements
of what is in flight are awaited (bounded), their offsets committed.
"""

from __future__ import annotations

import sys
from contextlib import suppress

from twisted.logger import LogLevel, formatEvent, globalLogPublisher

from twlog.cli.common import stop_on_shutdown
from twlog.client.kafka_settings import read_settings_file, security_settings
from twlog.mirror.mirror import Mirror, MirrorSettings


def security_of(path: str | None, option: str):
    """The TLS and SASL settings of the Kafka client settings file C{path} given as C{option} (the rules of
    C{--client-config}: L{twlog.client.kafka_settings}); C{(None, None)} without a file.

    @raise TwlogError: the file cannot be read or holds a setting twlog cannot use (one line).
    """
    if path is None:
        return None, None
    settings = read_settings_file(path, option, also=("bootstrap.servers",))
    if settings.pop("bootstrap.servers", None) is not None:  # (a twlog local --secure client.properties has it)
        zookeeper = "--from" if option.startswith("--from") else "--to"
        print(f"mirror: {option} {path}: bootstrap.servers is not used (the mirror finds the brokers in the "
              f"ZooKeeper of {zookeeper})", file=sys.stderr, flush=True)
    return security_settings(settings, f"{option} {path}")


def settings_from(args) -> MirrorSettings:
    """The mirror's settings from the parsed options."""
    source_tls, source_sasl = security_of(getattr(args, "from_client_config", None), "--from-client-config")
    target_tls, target_sasl = security_of(getattr(args, "to_client_config", None), "--to-client-config")
    return MirrorSettings(
        sources=tuple(args.sources), target=args.target, whitelist=args.whitelist, blacklist=args.blacklist,
        group=args.group, streams=args.streams, batch_size=args.batch_size,
        max_in_flight=max(args.max_in_flight, args.batch_size), status_s=args.status_interval,
        source_credentials=getattr(args, "from_zookeeper_credentials", None),
        target_credentials=getattr(args, "to_zookeeper_credentials", None),
        source_tls=source_tls, source_sasl=source_sasl, target_tls=target_tls, target_sasl=target_sasl,
    )


def log_observer(debug: bool):
    """Print the mirror's warnings and errors (with --debug, its informational lines too) as lines on stderr."""
    lowest = LogLevel.info if debug else LogLevel.warn

    def observe(event: dict) -> None:
        level = event.get("log_level")
        namespace = str(event.get("log_namespace", ""))
        if not namespace.startswith("twlog") or ("_ToTwistedLog" in namespace and not debug):
            return  # (kazoo's reconnection attempts: only with --debug)
        if level is not None and level >= lowest:
            text = formatEvent(event)
            if event.get("log_failure") is not None and debug:
                text += "\n" + event["log_failure"].getTraceback()
            print(f"mirror: {text}", file=sys.stderr, flush=True)

    return observe


async def mirror(reactor, args) -> None:
    """Run the mirror until Ctrl-C/SIGTERM (or an error that stops it)."""
    settings = settings_from(args)
    globalLogPublisher.addObserver(log_observer(getattr(args, "debug", False)))
    copier = Mirror(settings, reactor=reactor)
    try:
        await copier.start()
    except BaseException:
        await copier.stop()
        raise
    trigger = stop_on_shutdown(reactor, copier.stop, copier.done)
    sources = ", ".join(settings.sources)
    print(f"mirror: from {sources} to {settings.target} as group {settings.group_name}; Ctrl-C stops it",
          file=sys.stderr, flush=True)
    await copier.done
    with suppress(ValueError, KeyError):
        reactor.removeSystemEventTrigger(trigger)
    if copier.error is not None:
        raise copier.error
    print("mirror: stopped; offsets acknowledged by the target are committed", file=sys.stderr, flush=True)
