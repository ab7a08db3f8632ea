# -*- test-case-name: tests.cli.test_mirror_parsers -*-
"""The parsers of C{twlog mirror} and C{twlog audit}, and the audit options of C{produce} and C{consume}.

Light on purpose (argparse only): the commands' modules are imported when they run, so C{--help} stays fast.
"""

from __future__ import annotations

import argparse
import re
import time

from twlog.cli.options import parse_time, topic_name, zookeeper_address
from twlog.cli.parsing import positive_int, positive_option, subcommand
from twlog.cli.zk_options import add_mirror_credentials_options

_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def regex_option(text: str) -> re.Pattern:
    """A regular expression a whole topic name must match."""
    try:
        return re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {e}") from None


def seconds_option(text: str) -> float:
    """A positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


def grace_option(text: str) -> float:
    """A number of seconds, 0 or more."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    return seconds_option(text)


def since_option(text: str) -> int:
    """C{--since}: a duration ago (C{15m}, C{2h}, C{1d}, C{30s}), milliseconds since the epoch, or an ISO date/time
    (UTC unless it says); as milliseconds since the epoch."""
    ago = _AGO.match(text.strip())
    if ago:
        return int((time.time() - float(ago.group(1)) * _UNITS[ago.group(2)]) * 1000)
    if text in ("latest", "earliest"):
        raise argparse.ArgumentTypeError(f"--since {text!r}: give a time (2024-05-01T12:00), ms, or a duration (15m)")
    try:
        return parse_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--since {text!r} is not a duration ago (30s, 15m, 2h, 1d), milliseconds since the epoch, or a "
            "date/time like 2024-05-01T12:00") from None


def add_produce_audit_option(produce) -> None:
    """C{twlog produce --audit [--audit-origin NAME] [--audit-window-s S]}."""
    produce.add_argument("--audit", action="store_true",
                         help="instrument for the audit trail: wrap each message in an envelope (origin, creation "
                         "time, sequence) and publish per-window counts to the topic twlog-audit (see `twlog audit`)")
    produce.add_argument("--audit-origin", default=None, metavar="NAME",
                         help="the origin named in the envelopes (with --audit; default: this host's name)")
    produce.add_argument("--audit-window-s", type=seconds_option, default=60.0, metavar="S",
                         help="the window of the monitoring events, in seconds (with --audit; default: 60)")


def add_consume_audit_option(consume) -> None:
    """C{twlog consume --audit}."""
    consume.add_argument("--audit", action="store_true",
                         help="the messages carry audit envelopes (produced with --audit): print the original payloads")


def add_mirror_commands(commands, debug_option) -> None:
    """C{twlog mirror} and C{twlog audit}."""
    mirror = subcommand(
        commands, "mirror", "twlog.cli.mirror:mirror",
        "copy topics from source clusters into a target cluster, continuously",
        "Copy every topic of each --from cluster whose name matches --whitelist (default: all; or all "
        "but --blacklist) into the --to cluster, with embedded group consumers (one group per source: --group, "
        "default named after the target), picking up topics created meanwhile. A source offset is committed only "
        "after the target flushed every message before it, so a mirror killed and restarted loses nothing "
        "(at-least-once). When the target is down the mirror says so once, and once more when it takes messages "
        "again. At --max-in-flight it stops fetching until the target acknowledges: those pauses, normal in a bulk "
        "copy, are counted in the status line, and one that lasts longer than --status-interval is one line. Several "
        "mirrors with the same --group share the partitions. Runs until Ctrl-C or SIGTERM; prints a status line "
        "every --status-interval seconds.", react=True,
    )
    mirror.add_argument("--from", dest="sources", action="append", required=True, type=zookeeper_address,
                        metavar="ZK_SOURCE", help="a source cluster's ZooKeeper, HOST:PORT[/chroot] (repeatable)")
    mirror.add_argument("--to", dest="target", required=True, type=zookeeper_address, metavar="ZK_TARGET",
                        help="the target cluster's ZooKeeper, HOST:PORT[/chroot]")
    add_mirror_credentials_options(mirror)
    chosen = mirror.add_mutually_exclusive_group()
    chosen.add_argument("--whitelist", type=regex_option, default=None, metavar="REGEX",
                        help="copy only topics whose whole name matches REGEX (default: every topic, twlog-audit too)")
    chosen.add_argument("--blacklist", type=regex_option, default=None, metavar="REGEX",
                        help="copy every topic except those whose whole name matches REGEX")
    mirror.add_argument("--group", "-g", default=None,
                        help="the consumer group in the sources (default: twlog-mirror-<target>)")
    positive_option(mirror, "--streams", default=1, help="streams per topic")
    positive_option(mirror, "--batch-size", default=200,
                        help="messages per produce request to the target")
    mirror.add_argument("--max-in-flight", type=positive_int, default=10_000, metavar="N",
                        help="messages waiting for the target's acknowledgement at most; fetching pauses at the bound, "
                        "counted in the status line (default: 10,000)")
    mirror.add_argument("--status-interval", type=grace_option, default=10.0, metavar="S",
                        help="seconds between status lines; a pause at --max-in-flight longer than this is a line of "
                        "its own (0: no status lines, and pauses said after 10 s; default: 10)")
    debug_option(mirror)

    audit = subcommand(
        commands, "audit", "twlog.cli.audit:audit",
        "check a topic against the monitoring events of its instrumented producers",
        "Read TOPIC and twlog-audit on one cluster and print, per window and origin, the messages "
        "expected (from the producers' monitoring events), received, missing and duplicated, the messages' age "
        "when the audit read them (creation to the audit, p50/p90/p99) and, for messages that arrived while it "
        "followed the topic (--follow-s), their delivery delay (creation to arrival). Windows that ended less "
        "than --grace-s ago are pending, not missing. Exit "
        "status 0 when no closed window misses messages, 1 when one does (or the topic is not instrumented), 2 on "
        "usage errors.",
    )
    audit.add_argument("--zookeeper", "-z", default="localhost:2181", type=zookeeper_address,
                       metavar="HOST:PORT[/chroot]", help="the cluster's ZooKeeper (default: localhost:2181)")
    audit.add_argument("--topic", "-t", required=True, type=topic_name, help="the topic to audit")
    audit.add_argument("--since", type=since_option, default=None, metavar="TIME",
                       help="only windows ending after TIME: a duration ago (15m, 2h, 1d), an ISO date/time "
                       "(2024-05-01T12:00, UTC) or milliseconds since the epoch")
    audit.add_argument("--window-s", type=seconds_option, default=None, metavar="S",
                       help="the report window, a multiple of the producers' (default: the producers' window)")
    audit.add_argument("--grace-s", type=grace_option, default=30.0, metavar="S",
                       help="a window is pending until S seconds after its end (default: 30)")
    audit.add_argument("--follow-s", type=seconds_option, default=None, metavar="S",
                       help="after reading the topic, follow it for S seconds as a consumer polling every 0.1 s, "
                       "and measure the delivery delay (creation to arrival) of the messages that arrive meanwhile "
                       "(default: do not follow; the delivery delay is then unknown)")
    audit.add_argument("--json", action="store_true", help="one JSON object per window, then none of the table")
    debug_option(audit)
