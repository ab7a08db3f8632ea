# -*- test-case-name: tests.bench.test_hostile,tests.integration.test_bench_hostile -*-
"""C{twlog bench hostile}: a healthy client's fetch latency beside each of five attacks, and each attack's figure.

For each attack a fresh broker process (L{BrokerProcess}, so that its descriptor limit and CPU are its own)
starts with the options the attack needs; a healthy client, in a process of its own, fetches 64 KiB from
offset 0 in a loop while the attack runs (L{twlog.bench.attacks}); a thread samples the broker's C{VmRSS}.
First the healthy client runs alone (the baseline), then:

 - B{idle flood}: C{--idle-connections} connections that send nothing fill the broker's connection cap
   (C{--max-connections} is set to them plus the healthy client); then C{--newcomers} new clients each ask for
   an offset: how many are answered;
 - B{half-sent frames}: C{--stalled-clients} connections send all but the last 64 KiB of a C{--stalled-mb} MiB
   frame and stop, holding the request budget; then a legitimate produce of C{--produce-mb} MiB, which does not
   fit what is left: when it is answered, against the broker's C{--request-timeout-s} (which should close the
   stalled senders) plus 1 s; the benchmark closes them itself after that plus a margin;
 - B{pipelined flood}: C{--flooders} connections each pipeline C{--pipeline} OFFSETS requests;
 - B{big frames}: C{--big-clients} connections send C{--big-frames} acknowledged produces of C{--big-frame-mb}
   MB each, one after the other;
 - B{connection burst}: C{--burst} connections started at once: their connect and answer times.

The broker options added in issue 21 (C{--request-timeout-s}, C{--max-connections-per-ip},
C{--listen-backlog}, C{--max-inflight-per-connection}) are passed only when the broker's C{--help} lists them,
so the same benchmark runs against an older broker (C{--broker-source}) and says, in a footnote, what it could
not set.  Every attack is bounded in count and in time and talks only to 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence

import attrs

from twlog.bench import attacks, healthy
from twlog.bench.attacks import MIB
from twlog.bench.broker import BrokerProcess
from twlog.bench.common import BenchProgress, BenchTable, Column
from twlog.bench.verdicts import ANSWER_MARGIN_S, OWN_TARGETS, HealthyFetches, Verdict, percentile

__all__ = ["ATTACKS", "AttackRow", "format_hostile_table", "main_hostile", "percentile", "rss_bytes"]

#: The attacks, by the name C{--attacks} takes, with the label the table gives them.
ATTACKS = {
    "idle": "idle flood",
    "half-sent": "half-sent frames",
    "pipelined": "pipelined flood",
    "big-frames": "big frames",
    "burst": "connection burst",
}
BASELINE = "none (healthy client alone)"
#: How long the healthy client runs alone, at most.
BASELINE_S = 5.0
#: What the stalled senders wait beyond the request timeout's deadline before the benchmark closes them.
HOLD_MARGIN_S = 4.0


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """A process's C{VmRSS} (or C{VmHWM}, its peak) from C{/proc/<pid>/status}, in bytes; 0 if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class RssSampler(threading.Thread):
    """Samples a process's RSS every C{interval_s} until stopped; L{peak} is the largest sample."""

    def __init__(self, pid: int, interval_s: float = 0.02) -> None:
        super().__init__(daemon=True)
        self._pid, self._interval_s = pid, interval_s
        self._stop_event = threading.Event()
        self.peak = rss_bytes(pid)

    def run(self) -> None:
        while not self._stop_event.wait(self._interval_s):
            self.peak = max(self.peak, rss_bytes(self._pid))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


def broker_option_names(source: str | None = None) -> frozenset[str]:
    """The options (C{--name}) the broker's C{twistd twlog --help} lists (run from C{source}, if given)."""
    env = cwd = None
    if source is not None:
        cwd = os.path.abspath(source)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([cwd, *filter(None, [os.environ.get("PYTHONPATH")])]))
    out = subprocess.run([sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "twlog", "--help"],
                         capture_output=True, env=env, cwd=cwd, timeout=60).stdout.decode(errors="replace")
    return frozenset(re.findall(r"(--[a-z][a-z0-9-]*)", out))


def select_options(wanted: Sequence[tuple[str, object]], available: frozenset[str]
                   ) -> tuple[list[str], list[str]]:
    """The broker arguments among C{wanted} (option, value) that it lists, and the options it does not."""
    argv: list[str] = []
    missing: list[str] = []
    for option, value in wanted:
        if option in available:
            argv += [option, str(value)]
        else:
            missing.append(option)
    return argv, missing


@attrs.frozen
class AttackRow:
    """One line of the table: the attack (or the baseline), the healthy client beside it, the broker's peak."""

    label: str
    healthy: HealthyFetches
    verdict: Verdict | None
    peak_rss_bytes: int
    #: Broker options the attack wanted that the broker does not list.
    unavailable: tuple[str, ...] = ()


def format_hostile_table(rows: Sequence[AttackRow], fetch_bytes: int = 64 * 1024,
                         notes: Sequence[str] = ()) -> BenchTable:
    """The table: per attack, the healthy client's fetch p50/p99 beside it, the attack's own figure, the target
    and whether it was met."""
    table = BenchTable(
        f"twlog hostile-clients benchmark: a broker process per attack, loopback TCP; a healthy client (its own "
        f"process) fetches {fetch_bytes // 1024} KiB from offset 0 in a loop beside each attack",
        [Column.label("attack"), Column("healthy fetches", "count"), Column("healthy fetch p50", "ms"),
         Column("healthy fetch p99", "ms"), Column("healthy fetch max", "ms"), Column("broker peak RSS", "MB"),
         Column.label("the attack's figure"),
         Column.label("target"), Column.label("result")])
    for row in rows:
        label = row.label
        if row.unavailable:
            label += " " + table.footnote(
                f"the broker's --help lists no {', '.join(row.unavailable)}: run without "
                f"{'it' if len(row.unavailable) == 1 else 'them'}")
        if row.label in OWN_TARGETS:
            label += " " + table.footnote("the benchmark's own target (issue 21 gives none for this attack)")
        h = row.healthy
        if h.fetch_s:
            p50, p99, top = (f"{h.p(fraction) * 1e3:,.2f}" for fraction in (.5, .99, 1.0))
        else:
            p50 = p99 = top = table.missing("the healthy client got no answer beside this attack")
        if row.verdict is None:
            figure = table.missing("no attack: the baseline")
            target = result = table.missing("no target for the baseline")
        else:
            figure, target = row.verdict.figure(), row.verdict.target()
            result = "pass" if row.verdict.passed(h) and not h.errors else "FAIL"
        if h.errors:
            result += " " + table.footnote(f"{label}: the healthy client's fetches failed {h.errors:,} times; "
                                           f"first: {h.first_error}")
        table.add_row(label, f"{len(h.fetch_s):,}", p50, p99, top, f"{row.peak_rss_bytes / 1e6:,.1f}", figure,
                      target, result)
    half_sent = any(row.label == ATTACKS["half-sent"] for row in rows)
    table.note("(ms: milliseconds; MB = 10^6 bytes, MiB = 2^20; RSS sampled from /proc/<pid>/status every 20 ms"
               + ("; times in the half-sent row count from the stalled senders' start)" if half_sent else ")"))
    for line in notes:
        table.note(line)
    return table


@attrs.frozen
class _Plan:
    """An attack to run: its key, the broker options it wants, its step's size, and the attack itself."""

    key: str
    wanted: tuple[tuple[str, object], ...]
    total: float
    unit: str
    bound_s: float
    run: Callable[[int, attacks.Report], Verdict | None]


def _plans(args) -> list[_Plan]:
    """The baseline, then each attack of C{--attacks}, with what it needs of the broker."""
    plans = [_Plan("baseline", (), BASELINE_S, "s", BASELINE_S,
                   lambda port, report: _wait(min(BASELINE_S, args.seconds), report))]
    answer_s = args.answer_timeout_s
    for key in args.attacks:
        if key == "idle":
            n = args.idle_connections
            wanted = [("--max-connections", n + 1), ("--max-connections-per-ip", n + args.newcomers + 2),
                      ("--reap-idle-s", f"{args.idle_s / 2:g}")]
            plans.append(_Plan(key, tuple(wanted), n, "conn", n / 100 + args.idle_s + answer_s + 30,
                               lambda port, report: attacks.idle_flood(port, args.idle_connections, args.newcomers,
                                                                       args.idle_s, answer_s, report)))
        elif key == "half-sent":
            stalled, produce = int(args.stalled_mb * MIB), int(args.produce_mb * MIB)
            wanted: list[tuple[str, object]] = []
            if args.max_buffered_mb is not None:
                bound = int(args.max_buffered_mb * MIB)
                wanted += [("--max-buffered-request-bytes", bound),
                           ("--max-request-bytes", min(bound, max(stalled, produce) + MIB))]
            elif max(stalled, produce) > 100 * MIB:
                wanted.append(("--max-request-bytes", max(stalled, produce) + MIB))
            wanted.append(("--request-timeout-s", f"{args.request_timeout_s:g}"))
            hold = args.request_timeout_s + ANSWER_MARGIN_S + HOLD_MARGIN_S
            plans.append(_Plan(key, tuple(wanted), hold, "s", hold + answer_s + 30,
                               lambda port, report: attacks.half_sent_frames(
                                   port, args.stalled_clients, stalled, produce, args.request_timeout_s,
                                   args.request_timeout_s + ANSWER_MARGIN_S + HOLD_MARGIN_S, answer_s,
                                   report)))
        elif key == "pipelined":
            wanted = [] if args.max_inflight is None else [("--max-inflight-per-connection", args.max_inflight)]
            plans.append(_Plan(key, tuple(wanted), args.seconds, "s", args.seconds + 30,
                               lambda port, report: attacks.pipelined_flood(port, args.flooders, args.pipeline,
                                                                            args.seconds, report)))
        elif key == "big-frames":
            frame = int(args.big_frame_mb * 1e6)
            wanted = [("--segment-bytes", 64 * MIB), ("--retention-bytes", max(128 * MIB, 3 * frame)),
                      ("--retention-check-interval-ms", 1000)]
            if frame > 100 * MIB:
                wanted += [("--max-request-bytes", frame + MIB), ("--max-buffered-request-bytes", 2 * frame + MIB)]
            plans.append(_Plan(key, tuple(wanted), args.seconds, "s", args.seconds + 60,
                               lambda port, report: attacks.big_frames(port, args.big_clients, frame, args.big_frames,
                                                                       args.seconds, report)))
        elif key == "burst":
            wanted = [] if args.listen_backlog is None else [("--listen-backlog", args.listen_backlog)]
            plans.append(_Plan(key, tuple(wanted), answer_s, "s", answer_s + 30,
                               lambda port, report: attacks.connection_burst(port, args.burst, answer_s, report)))
    return plans


def _wait(seconds: float, report: attacks.Report) -> None:
    """The baseline: nothing but the healthy client, for C{seconds}."""
    done = threading.Event()
    for i in range(int(seconds * 10)):
        done.wait(0.1)
        report((i + 1) / 10, None)


def run_attacks(args, root: str, progress: BenchProgress) -> list[AttackRow]:
    """Each plan against a broker process of its own (its data under C{root}/KEY, removed after unless
    C{--dir} was given)."""
    available = broker_option_names(args.broker_source)
    rows = []
    plans = _plans(args)
    for i, plan in enumerate(plans):
        label = ATTACKS.get(plan.key, BASELINE)
        prefix = f"{i + 1} of {len(plans)}: {label}"
        progress.step(prefix, total=plan.total, unit=plan.unit)
        argv, missing = select_options(plan.wanted, available)
        log_dir = os.path.join(root, plan.key)
        broker = BrokerProcess(log_dir, "--flush-interval-ms", "5", *argv, source=args.broker_source)
        try:
            healthy.prepare_topic(broker.port, args.fetch_bytes)
            sampler = RssSampler(broker.pid)
            sampler.start()
            client = healthy.HealthyClient(broker.port, args.fetch_bytes, plan.bound_s)
            try:
                verdict = plan.run(broker.port, lambda done, what: progress.update(
                    done, None if what is None else f"{prefix}: {what}"))
            finally:
                fetches = client.stop()
                sampler.stop()
        finally:
            broker.stop()
            if not args.dir:  # a --dir given is kept, each attack's broker log (broker.out) in it
                shutil.rmtree(log_dir, ignore_errors=True)
        rows.append(AttackRow(label, fetches, verdict, sampler.peak, tuple(missing)))
        progress.log(f"{label}: done")
    return rows


def _descriptors_needed(args) -> int:
    return 64 + max(args.idle_connections + args.newcomers if "idle" in args.attacks else 0,
                    args.burst if "burst" in args.attacks else 0)


def _raise_open_files(needed: int) -> str | None:
    """Raise this process's open-files limit to C{needed} if its hard limit allows; why not, if it cannot."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return None
    if hard != resource.RLIM_INFINITY and hard < needed:
        return (f"needs {needed:,} open files (--idle-connections, --newcomers, --burst) but this process may "
                f"open at most {hard:,} (ulimit -Hn): give smaller counts")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return None


def _settings(args) -> list[str]:
    """The notes saying what each attack did."""
    lines = []
    for key in args.attacks:
        if key == "idle":
            lines.append(f"idle flood: {args.idle_connections:,} connections sending nothing, the broker's "
                         f"--max-connections {args.idle_connections + 1:,} (them and the healthy client), for "
                         f"{args.idle_s:g} s (the broker's --reap-idle-s, if it has it: half that); then "
                         f"{args.newcomers} newcomers each asking for an offset, answered within "
                         f"{args.answer_timeout_s:g} s or not served")
        elif key == "half-sent":
            lines.append(f"half-sent frames: {args.stalled_clients} senders each send all but 64 KiB of a "
                         f"{args.stalled_mb:g} MiB frame and stop; then a {args.produce_mb:g} MiB acknowledged "
                         f"produce; request timeout {args.request_timeout_s:g} s (issue 21's default: 30 s); the "
                         f"benchmark closes the stalled senders itself at "
                         f"{args.request_timeout_s + ANSWER_MARGIN_S + HOLD_MARGIN_S:g} s")
        elif key == "pipelined":
            lines.append(f"pipelined flood: {args.flooders} connections each pipelining {args.pipeline:,} OFFSETS "
                         f"requests and reading the answers, for at most {args.seconds:g} s")
        elif key == "big-frames":
            lines.append(f"big frames: {args.big_clients} connections each sending {args.big_frames} acknowledged "
                         f"produces of {args.big_frame_mb:g} MB one after the other, for at most {args.seconds:g} s")
        elif key == "burst":
            lines.append(f"connection burst: {args.burst:,} non-blocking connects at once, each then asking for an "
                         f"offset; failed: not connected and answered within {args.answer_timeout_s:g} s"
                         + ("" if args.listen_backlog is None else f"; --listen-backlog {args.listen_backlog}"))
    return lines


def main_hostile(args) -> int:
    """Entry point of C{twlog bench hostile}."""
    if args.seconds <= 0 or args.seconds > 600:
        print(f"twlog: --seconds {args.seconds:g} must be above 0 and at most 600", file=sys.stderr)
        return 2
    why = _raise_open_files(_descriptors_needed(args))
    if why is not None:
        print(f"twlog: bench hostile {why}", file=sys.stderr)
        return 2
    root = args.dir or tempfile.mkdtemp(prefix="twlog-bench-hostile-")
    print(f"starting a broker per attack with its data under {root}", file=sys.stderr)
    try:
        with BenchProgress() as progress:
            rows = run_attacks(args, root, progress)
    except (RuntimeError, OSError) as e:
        lines = str(e).strip().splitlines() or [type(e).__name__]
        print(f"twlog: bench hostile: {lines[0]}{': ' + lines[-1] if len(lines) > 1 else ''}", file=sys.stderr)
        return 1
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    format_hostile_table(rows, args.fetch_bytes, _settings(args)).print()
    return 0
