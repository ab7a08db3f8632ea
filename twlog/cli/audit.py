# -*- test-case-name: tests.cli.test_audit,tests.integration.test_audit -*-
"""C{twlog audit}: a topic of one cluster against its producers' monitoring events, per window and origin.

Blocking (no reactor): the topic and C{twlog-audit} are read to their ends
over plain sockets (L{twlog.audit.read}) and counted (L{twlog.audit.count}).
Exit status: 0 when no closed window misses messages, 1 when one does, when
the topic is not instrumented, or on a runtime failure; 2 on usage errors.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone

from twlog.audit.count import FAILED, PENDING, WindowReport
from twlog.audit.read import count_cluster, now_ms
from twlog.cli.common import client_options
from twlog.cli.output import print_table
from twlog.errors import ConnectionFailed, TwlogError, UnknownTopic


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _ages(report: WindowReport) -> str:
    return "-" if report.age_ms is None else " / ".join(f"{a / 1000:,.1f}" for a in report.age_ms)


def _delays(report: WindowReport) -> str:
    if report.delay_ms is None:
        return "- [1]"
    counted = "" if report.delivered == report.received + report.duplicated else f" ({report.delivered:,} msgs) [2]"
    return " / ".join(f"{d:,}" for d in report.delay_ms) + counted


#: The notes under the table, for the marks of its delivery delay cells.
_NOTES = {
    "[1]": "[1] delivery delay unknown: every message of the window arrived before the audit looked "
           "(follow the topic with --follow-s S to measure it for what arrives meanwhile)",
    "[2]": "[2] the delivery delay of the messages (this many) that arrived while the audit followed the topic; "
           "the others arrived before it looked",
}


def audit(args) -> int:
    """Print the audit of C{--topic}; return the exit status."""
    if args.topic == "twlog-audit":
        print("twlog: twlog-audit holds the monitoring events; audit the topics they count", file=sys.stderr)
        return 2
    try:
        follow_s = getattr(args, "follow_s", None)
        if follow_s:
            print(f"reading {args.topic}, then following it for {follow_s:g} s", file=sys.stderr)
        found = count_cluster(args.zookeeper, args.topic, options=client_options(args), since_ms=args.since,
                              window_ms=None if args.window_s is None else int(round(args.window_s * 1000)),
                              follow_s=follow_s)
    except UnknownTopic:
        raise TwlogError(f"topic {args.topic!r} does not exist in the cluster of ZooKeeper {args.zookeeper}") from None
    except ConnectionFailed as e:
        raise TwlogError(str(e)) from None
    count = found.count
    if not count.enveloped(args.topic) and not count.events_for(args.topic):
        print(f"twlog: topic {args.topic!r} is not instrumented: none of its {found.read:,} messages carries an audit "
              "envelope and no monitoring event counts it (produce with --audit)", file=sys.stderr)
        return 1
    try:
        reports = count.report(now_ms(), int(args.grace_s * 1000), topics=[args.topic], since_ms=args.since)
    except ValueError as e:
        print(f"twlog: --window-s: {e}", file=sys.stderr)
        return 2
    failed = [r for r in reports if r.status in FAILED]
    if args.json:
        for report in reports:
            print(json.dumps(report.as_json(), sort_keys=True))
    else:
        rows = [(_when(r.window_start_ms), r.origin, f"{r.expected:,}", f"{r.received:,}", f"{r.missing:,}",
                 f"{r.duplicated:,}", _ages(r), _delays(r), r.status) for r in reports]
        print_table(
            ["window (UTC)", "origin", "expected", "received", "missing", "duplicated",
             "age at audit s p50/p90/p99", "delivery delay ms p50/p90/p99", "status"],
            rows, title=f"audit of {args.topic} ({reports[0].window_ms / 1000:g} s windows)" if reports else None,
        )
        for mark, note in _NOTES.items():
            if any(mark in row[7] for row in rows):
                print(note)
        plain = count.plain.get(args.topic, 0)
        pending = sum(1 for r in reports if r.status == PENDING)
        missing = sum(r.missing for r in failed)
        print(f"{args.topic}: {len(reports) - pending} closed window(s), {len(failed)} with missing messages "
              f"({missing:,} missing), {pending} pending" + (f"; {plain:,} messages without an envelope" if plain
                                                              else ""), file=sys.stderr)
    return 1 if failed else 0
