# -*- test-case-name: tests.bench.test_history -*-
"""Checking a fault run's L{History}, after Jepsen's Kafka checker: each anomaly named, with its evidence.

The final log of a partition is its final leader's replica (L{History.final});
when none is recorded, the replica that ends furthest stands for it, and a
note says so.  L{check} reports:

  - L{LOST_WRITE}: an acknowledged send whose value is not at its offset in
    the final log, or that a read-to-end over its offset did not read.
  - L{INCONSISTENT_OFFSETS}: two values at one position, among the replicas'
    logs (below the final high watermark, when one is recorded: above it a
    replica may hold a tail that was never acknowledged and will be cut), the
    reads and the acknowledgements.
  - L{NON_MONOTONIC_READ}: a reader session read a position at or before one
    it read already.
  - L{SKIPPED_READ}: a reader session went from one position to a later one
    past a message the final log holds between them.
  - L{READ_DISAPPEARED}: a value read is not at its position in the final log.
  - L{REORDERED}: a producer's acknowledged sends to a partition, in send
    order, do not have increasing positions.

A failed or unknown send may be present or absent: never an anomaly (the
notes count those present).  L{byte_anomalies} turns L{ByteComparison}s of
in-sync replicas up to the high watermark into L{DIVERGED_BYTES} (the bytes
at some offset differ) and L{SEGMENT_FILES_DIFFER} (the same bytes, in
segment files that start at different offsets).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence

import attrs

from twlog.bench.history import FAILED, OK, UNKNOWN, History, Read, Send, show
from twlog.bench.replica_logs import ByteComparison, Position, ReplicaContents

__all__ = ["ANOMALIES", "DIVERGED_BYTES", "INCONSISTENT_OFFSETS", "LOST_WRITE", "NON_MONOTONIC_READ",
           "READ_DISAPPEARED", "REORDERED", "SEGMENT_FILES_DIFFER", "SKIPPED_READ", "Anomaly", "CheckResult",
           "byte_anomalies", "check"]

LOST_WRITE = "lost-write"
INCONSISTENT_OFFSETS = "inconsistent-offsets"
NON_MONOTONIC_READ = "non-monotonic-read"
SKIPPED_READ = "skipped-read"
READ_DISAPPEARED = "read-disappeared"
REORDERED = "reordered"
DIVERGED_BYTES = "diverged-bytes"
SEGMENT_FILES_DIFFER = "segment-files-differ"
ANOMALIES = (LOST_WRITE, INCONSISTENT_OFFSETS, NON_MONOTONIC_READ, SKIPPED_READ, READ_DISAPPEARED, REORDERED,
             DIVERGED_BYTES, SEGMENT_FILES_DIFFER)

#: The most sources named for one value in an inconsistent-offsets report.
_SOURCES_SHOWN = 4


@attrs.frozen
class Anomaly:
    kind: str
    topic: str
    partition: str
    offset: int | None
    evidence: str

    def line(self) -> str:
        where = f"{self.topic}/{self.partition}" + (f" offset {self.offset}" if self.offset is not None else "")
        return f"{self.kind}: {where}: {self.evidence}"


@attrs.frozen
class CheckResult:
    anomalies: tuple[Anomaly, ...]
    #: What was not checked, or was allowed but is worth knowing, one line each.
    notes: tuple[str, ...]
    counts: dict[str, int]

    @property
    def valid(self) -> bool:
        return not self.anomalies

    def kinds(self) -> dict[str, int]:
        """How many anomalies of each kind were found."""
        found: dict[str, int] = defaultdict(int)
        for anomaly in self.anomalies:
            found[anomaly.kind] += 1
        return dict(found)

    def report(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in self.counts.items())
        head = "valid" if self.valid else f"INVALID: {len(self.anomalies)} anomalies {self.kinds()}"
        return "\n".join([f"{head} ({counts})", *(a.line() for a in self.anomalies),
                          *(f"note: {n}" for n in self.notes)])


class _Partition:
    """One partition's records, and its final log."""

    def __init__(self, history: History, key: tuple[str, str], notes: list[str]) -> None:
        self.topic, self.partition = key
        replicas = history.replicas.get(key, {})
        final = history.finals.get(key)
        self.high_watermark = final.high_watermark if final is not None else None
        self.final: ReplicaContents | None = None
        if final is not None and final.leader in replicas:
            self.final = replicas[final.leader]
        elif replicas:
            self.final = max(replicas.values(), key=lambda r: (r.end, r.broker))
            missing = "no final leader is recorded" if final is None else f"the final leader {final.leader}'s log " \
                "is not recorded"
            notes.append(f"{self.topic}/{self.partition}: {missing}; broker {self.final.broker}'s log, which ends "
                         "furthest, stands for the final log")
        for replica in replicas.values():
            if replica.problem is not None:
                notes.append(f"{self.topic}/{self.partition}: broker {replica.broker}'s log was read up to offset "
                             f"{replica.end} only: {replica.problem}")
        self.replicas = replicas
        self.positions = sorted(self.final.messages) if self.final is not None else []

    def anomaly(self, kind: str, offset: int | None, evidence: str) -> Anomaly:
        return Anomaly(kind, self.topic, self.partition, offset, evidence)

    def final_holds(self, position: Position) -> str:
        assert self.final is not None
        value = self.final.value_at(position)
        at = f"the final log (broker {self.final.broker})"
        return f"{at} holds nothing there" if value is None else f"{at} holds {show(value)} there"


def check(history: History, comparisons: Sequence[ByteComparison] = (), *, same_files: bool = True) -> CheckResult:
    """Every check of the module's description over C{history}, and L{byte_anomalies} of C{comparisons}."""
    notes: list[str] = []
    keys = sorted({(s.topic, s.partition) for s in history.sends} | {(r.topic, r.partition) for r in history.reads}
                  | set(history.replicas))
    partitions = {key: _Partition(history, key, notes) for key in keys}
    sends = defaultdict(list)
    for send in history.sends:
        sends[(send.topic, send.partition)].append(send)
    reads = defaultdict(list)
    for read in history.reads:
        reads[(read.topic, read.partition)].append(read)
    anomalies: list[Anomaly] = []
    for key, p in partitions.items():
        if p.final is None and not any(s.topic == p.topic and s.partition == p.partition for s in history.scans):
            notes.append(f"{p.topic}/{p.partition}: no replica log and no read-to-end recorded: lost writes, "
                         "skipped reads and disappeared reads not checked")
        anomalies += _lost_writes(p, sends[key], [s for s in history.scans if (s.topic, s.partition) == key],
                                  reads[key])
        anomalies += _inconsistent_offsets(p, sends[key], reads[key], notes)
        anomalies += _reader_sessions(p, reads[key])
        anomalies += _disappeared(p, reads[key])
        anomalies += _order(p, sends[key])
        notes += _present_anyway(p, sends[key])
    anomalies += byte_anomalies(comparisons, same_files=same_files)
    outcomes = [s.outcome for s in history.sends]
    counts = {"sends": len(outcomes), "acknowledged": outcomes.count(OK), "failed": outcomes.count(FAILED),
              "unknown": outcomes.count(UNKNOWN), "reads": len(history.reads), "partitions": len(keys),
              "replica logs": sum(len(r) for r in history.replicas.values())}
    return CheckResult(tuple(anomalies), tuple(notes), counts)


def _lost_writes(p: _Partition, sends: list[Send], scans: list, reads: list[Read]) -> Iterable[Anomaly]:
    read_values: dict[str, dict[Position, set[bytes]]] = defaultdict(lambda: defaultdict(set))
    for read in reads:
        read_values[read.reader][read.position].add(read.value)
    for send in sends:
        if send.outcome != OK:
            continue
        if p.final is not None and p.final.value_at(send.position) != send.value:
            yield p.anomaly(LOST_WRITE, send.offset, f"{send.name()} was acknowledged at offset {send.offset}; "
                            + p.final_holds(send.position))
        for scan in scans:
            seen = read_values[scan.reader][send.position]
            if scan.start <= send.offset < scan.end and send.value not in seen:
                got = ", ".join(sorted(map(show, seen))) or "nothing"
                yield p.anomaly(LOST_WRITE, send.offset, f"{send.name()} was acknowledged at offset {send.offset}; "
                                f"the read-to-end by {scan.reader} over [{scan.start}, {scan.end}) read {got} there")


def _inconsistent_offsets(p: _Partition, sends: list[Send], reads: list[Read], notes: list[str]) -> Iterable[Anomaly]:
    seen: dict[Position, dict[bytes, list[str]]] = defaultdict(lambda: defaultdict(list))
    above: set[Position] = set()
    for send in sends:
        if send.outcome == OK:
            seen[send.position][send.value].append(f"the acknowledgement of {send.producer}#{send.seq}")
    for read in reads:
        seen[read.position][read.value].append(f"a read by {read.reader}")
    for broker, replica in sorted(p.replicas.items()):
        for position, value in replica.messages.items():
            if p.high_watermark is None or position[0] < p.high_watermark:
                seen[position][value].append(f"broker {broker}'s log")
            else:
                above.add(position)
    for position in sorted(seen):
        values = seen[position]
        if len(values) > 1:
            evidence = "; ".join(f"{show(v)} in " + ", ".join(sources[:_SOURCES_SHOWN])
                                 + (f" and {len(sources) - _SOURCES_SHOWN} more" if len(sources) > _SOURCES_SHOWN
                                    else "") for v, sources in sorted(values.items()))
            yield p.anomaly(INCONSISTENT_OFFSETS, position[0], f"{len(values)} values at index {position[1]}: "
                            f"{evidence}")
    differing = [pos for pos in above if len({r.messages.get(pos) for r in p.replicas.values()}) > 1]
    if differing:
        notes.append(f"{p.topic}/{p.partition}: the replicas differ at {len(differing)} positions at or above the "
                     f"high watermark {p.high_watermark} (never acknowledged; allowed), first at offset "
                     f"{min(differing)[0]}")


def _reader_sessions(p: _Partition, reads: list[Read]) -> Iterable[Anomaly]:
    last: dict[str, Read] = {}
    for read in reads:
        before = last.get(read.reader)
        last[read.reader] = read
        if before is None:
            continue
        if read.position <= before.position:
            yield p.anomaly(NON_MONOTONIC_READ, read.offset,
                            f"{read.reader} read {show(read.value)} at {_at(read.position)} after "
                            f"{show(before.value)} at {_at(before.position)}")
            continue
        skipped = p.positions[bisect_right(p.positions, before.position):bisect_right(p.positions, read.position)]
        skipped = [pos for pos in skipped if pos != read.position]
        if skipped:
            first = skipped[0]
            yield p.anomaly(SKIPPED_READ, first[0],
                            f"{read.reader} went from {_at(before.position)} to {_at(read.position)}, past "
                            f"{len(skipped)} messages of the final log, the first {show(p.final.messages[first])} "
                            f"at {_at(first)}")


def _disappeared(p: _Partition, reads: list[Read]) -> Iterable[Anomaly]:
    if p.final is None:
        return
    for read in reads:
        if p.final.value_at(read.position) != read.value:
            yield p.anomaly(READ_DISAPPEARED, read.offset, f"{read.reader} read {show(read.value)} at "
                            f"{_at(read.position)}; " + p.final_holds(read.position))


def _order(p: _Partition, sends: list[Send]) -> Iterable[Anomaly]:
    last: dict[str, Send] = {}
    for send in sorted((s for s in sends if s.outcome == OK), key=lambda s: (s.producer, s.seq)):
        before = last.get(send.producer)
        last[send.producer] = send
        if before is not None and send.position <= before.position:
            yield p.anomaly(REORDERED, send.offset, f"{before.name()} was acknowledged at {_at(before.position)} "
                            f"but the later {send.name()} at {_at(send.position)}")


def _present_anyway(p: _Partition, sends: list[Send]) -> list[str]:
    if p.final is None:
        return []
    present = defaultdict(int)
    values = set(p.final.messages.values())
    for send in sends:
        if send.outcome != OK and send.value in values:
            present[send.outcome] += 1
    return [f"{p.topic}/{p.partition}: {n} {outcome} sends are in the final log (allowed)"
            for outcome, n in sorted(present.items())]


def _at(position: Position) -> str:
    offset, index = position
    return f"offset {offset}" + (f" (message {index} of its wrapper)" if index else "")


def byte_anomalies(comparisons: Sequence[ByteComparison], *, same_files: bool = True) -> list[Anomaly]:
    """The anomalies of in-sync replicas' files compared up to the high watermark (L{compare_segment_files}):
    different bytes, and (with C{same_files}) the same bytes in segment files that start at different offsets."""
    found = []
    for c in comparisons:
        if not c.same_bytes:
            found.append(Anomaly(DIVERGED_BYTES, c.topic, c.partition, None,
                                 f"up to offset {c.up_to}: " + "; ".join(c.differences)))
        elif same_files and not c.same_files:
            found.append(Anomaly(SEGMENT_FILES_DIFFER, c.topic, c.partition, None,
                                 f"the same bytes up to offset {c.up_to}, in different files: "
                                 + "; ".join(c.layout_lines())))
    return found
