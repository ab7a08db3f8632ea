"""The history and its checker on hand-built histories: a clean one, then one per anomaly, each with its evidence."""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from twlog.bench.history import FAILED, OK, UNKNOWN, History
from twlog.bench.history_checks import (
    DIVERGED_BYTES,
    INCONSISTENT_OFFSETS,
    LOST_WRITE,
    NON_MONOTONIC_READ,
    READ_DISAPPEARED,
    REORDERED,
    SEGMENT_FILES_DIFFER,
    SKIPPED_READ,
    check,
)
from twlog.bench.replica_logs import ByteComparison, ReplicaContents

T = "orders"


def replica(broker: object, messages: dict[int, str], partition: object = 0, end: int | None = None,
            problem: str | None = None) -> ReplicaContents:
    """A replica's log holding C{messages} (offset -> value), each 10 bytes long."""
    content = {(offset, 0): value.encode() for offset, value in messages.items()}
    last = max(messages, default=-10) + 10
    return ReplicaContents(str(broker), T, str(partition), 0, last if end is None else end, content, None, problem)


def sent(history: History, producer: str, value: str, outcome: str = OK, offset: int | None = None,
         partition: object = 0):
    send = history.invoke(producer, T, partition, value)
    if outcome == OK:
        return history.ok(send, offset)
    if outcome == FAILED:
        return history.fail(send, "NotEnoughReplicas: the ISR is smaller than 2")
    if outcome == UNKNOWN:
        return history.unknown(send, "RequestTimedOut")
    return send


def clean(path: str | None = None) -> History:
    """Two producers, a failed and an unknown send, two readers and a read-to-end, two identical replicas."""
    h = History(path)
    sent(h, "p1", "a", offset=0)
    sent(h, "p2", "b", offset=10)
    sent(h, "p1", "c", offset=20)
    sent(h, "p1", "lost-for-sure", FAILED)
    sent(h, "p2", "maybe", UNKNOWN)
    h.invoke("p2", T, 0, "never-answered")
    for offset, value in [(0, "a"), (10, "b"), (20, "c"), (30, "maybe")]:
        h.read("r1", T, 0, offset, value)
    h.read("r2", T, 0, 20, "c")
    h.read("end", T, 0, 0, "a")
    h.read("end", T, 0, 10, "b")
    h.read("end", T, 0, 20, "c")
    h.read("end", T, 0, 30, "maybe")
    h.scanned("end", T, 0, 0, 40)
    log = {0: "a", 10: "b", 20: "c", 30: "maybe"}
    h.replica(replica(1, log))
    h.replica(replica(2, log))
    h.final(T, 0, leader=1, high_watermark=40)
    return h


class CleanHistoryTests(SynchronousTestCase):
    def test_clean_history_is_valid(self) -> None:
        """Failed and unknown sends, present or absent, are no anomaly; a note counts those present."""
        result = check(clean())
        self.assertEqual(result.anomalies, (), result.report())
        self.assertTrue(result.valid)
        self.assertEqual(result.counts, {"sends": 6, "acknowledged": 3, "failed": 1, "unknown": 2, "reads": 9,
                                         "partitions": 1, "replica logs": 2})
        self.assertEqual(result.notes, ("orders/0: 1 unknown sends are in the final log (allowed)",))
        self.assertTrue(result.report().startswith("valid (sends 6, acknowledged 3"))

    def test_values_must_be_unique(self) -> None:
        h = History()
        h.invoke("p1", T, 0, "a")
        with self.assertRaises(ValueError) as e:
            h.invoke("p2", T, 1, "a")
        self.assertIn("'a' was sent before", str(e.exception))

    def test_no_final_leader_recorded(self) -> None:
        """The replica that ends furthest stands for the final log, and a note says so."""
        h = History()
        sent(h, "p1", "a", offset=0)
        sent(h, "p1", "b", offset=10)
        h.replica(replica(1, {0: "a"}))
        h.replica(replica(2, {0: "a", 10: "b"}))
        result = check(h)
        self.assertTrue(result.valid, result.report())
        self.assertIn("no final leader is recorded; broker 2's log, which ends furthest, stands for the final log",
                      result.notes[0])

    def test_nothing_to_check_against(self) -> None:
        h = History()
        sent(h, "p1", "a", offset=0)
        result = check(h)
        self.assertTrue(result.valid)
        self.assertIn("no replica log and no read-to-end recorded", result.notes[0])

    def test_a_replica_read_partly_is_noted(self) -> None:
        h = clean()
        h.replica(replica(3, {0: "a"}, problem="segment 0: a partial length field of 2 bytes"))
        result = check(h)
        self.assertTrue(result.valid, result.report())
        self.assertIn("broker 3's log was read up to offset 10 only: segment 0: a partial length field",
                      result.report())


class AnomalyTests(SynchronousTestCase):
    def assertOnly(self, history: History, kind: str, *evidence: str, count: int = 1, **kwargs) -> None:
        result = check(history, **kwargs)
        self.assertEqual(result.kinds(), {kind: count}, result.report())
        report = result.report()
        self.assertTrue(report.startswith(f"INVALID: {count} anomalies"))
        for text in evidence:
            self.assertIn(text, report)

    def test_lost_write_from_the_final_log(self) -> None:
        """Acknowledged, held by a follower, missing from the final leader's log."""
        h = History()
        sent(h, "p1", "a", offset=0)
        sent(h, "p1", "b", offset=10)
        h.replica(replica(1, {0: "a"}))
        h.replica(replica(2, {0: "a", 10: "b"}))
        h.final(T, 0, leader=1)
        self.assertOnly(h, LOST_WRITE, "lost-write: orders/0 offset 10: send p1#1 of 'b' was acknowledged at "
                        "offset 10; the final log (broker 1) holds nothing there")

    def test_lost_write_from_the_read_to_end(self) -> None:
        h = History()
        sent(h, "p1", "a", offset=0)
        sent(h, "p1", "b", offset=10)
        h.read("end", T, 0, 0, "a")
        h.scanned("end", T, 0, 0, 20)
        self.assertOnly(h, LOST_WRITE, "send p1#1 of 'b' was acknowledged at offset 10; the read-to-end by end "
                        "over [0, 20) read nothing there")

    def test_inconsistent_offsets_between_replicas(self) -> None:
        """Below the high watermark two replicas disagree: an anomaly; above it, only a note."""
        h = History()
        h.replica(replica(1, {0: "a", 10: "b", 20: "tail-1"}))
        h.replica(replica(2, {0: "a", 10: "z", 20: "tail-2"}))
        h.final(T, 0, leader=1, high_watermark=20)
        self.assertOnly(h, INCONSISTENT_OFFSETS, "inconsistent-offsets: orders/0 offset 10: 2 values at index 0: "
                        "'b' in broker 1's log; 'z' in broker 2's log",
                        "the replicas differ at 1 positions at or above the high watermark 20 (never acknowledged; "
                        "allowed), first at offset 20")

    def test_inconsistent_offsets_between_reads(self) -> None:
        """Two readers saw different values at one offset; the one not in the final log also disappeared."""
        h = History()
        h.read("r1", T, 0, 0, "a")
        h.read("r2", T, 0, 0, "q")
        h.replica(replica(1, {0: "a"}))
        h.final(T, 0, leader=1)
        result = check(h)
        self.assertEqual(result.kinds(), {INCONSISTENT_OFFSETS: 1, READ_DISAPPEARED: 1}, result.report())
        self.assertIn("'a' in a read by r1, broker 1's log; 'q' in a read by r2", result.report())

    def test_inconsistent_offsets_between_acknowledgements(self) -> None:
        h = History()
        sent(h, "p1", "a", offset=0)
        sent(h, "p2", "b", offset=0)
        h.read("end", T, 0, 0, "a")
        h.scanned("end", T, 0, 0, 10)
        result = check(h)
        self.assertEqual(result.kinds(), {INCONSISTENT_OFFSETS: 1, LOST_WRITE: 1}, result.report())
        self.assertIn("'a' in the acknowledgement of p1#0, a read by end; 'b' in the acknowledgement of p2#0",
                      result.report())

    def test_non_monotonic_read(self) -> None:
        h = History()
        h.read("r1", T, 0, 10, "b")
        h.read("r1", T, 0, 0, "a")
        h.read("r2", T, 0, 0, "a")
        h.read("r2", T, 0, 0, "a")
        h.replica(replica(1, {0: "a", 10: "b"}))
        h.final(T, 0, leader=1)
        self.assertOnly(h, NON_MONOTONIC_READ, "non-monotonic-read: orders/0 offset 0: r1 read 'a' at offset 0 after "
                        "'b' at offset 10", "r2 read 'a' at offset 0 after 'a' at offset 0", count=2)

    def test_skipped_read(self) -> None:
        h = History()
        h.read("r1", T, 0, 0, "a")
        h.read("r1", T, 0, 30, "d")
        h.replica(replica(1, {0: "a", 10: "b", 20: "c", 30: "d"}))
        h.final(T, 0, leader=1)
        self.assertOnly(h, SKIPPED_READ, "skipped-read: orders/0 offset 10: r1 went from offset 0 to offset 30, past 2 "
                        "messages of the final log, the first 'b' at offset 10")

    def test_read_that_later_disappears(self) -> None:
        """Read once (its send's outcome unknown), then gone from the final log: not a lost write, a disappeared
        read."""
        h = History()
        sent(h, "p1", "a", offset=0)
        sent(h, "p1", "b", UNKNOWN)
        h.read("r1", T, 0, 0, "a")
        h.read("r1", T, 0, 10, "b")
        h.replica(replica(1, {0: "a"}))
        h.final(T, 0, leader=1)
        self.assertOnly(h, READ_DISAPPEARED, "read-disappeared: orders/0 offset 10: r1 read 'b' at offset 10; the "
                        "final log (broker 1) holds nothing there")

    def test_reordered_acknowledgements(self) -> None:
        """A producer's later send acknowledged at an earlier offset; another producer's order is its own."""
        h = History()
        sent(h, "p1", "a", offset=20)
        sent(h, "p2", "x", offset=0)
        sent(h, "p1", "b", offset=10)
        h.replica(replica(1, {0: "x", 10: "b", 20: "a"}))
        h.final(T, 0, leader=1)
        self.assertOnly(h, REORDERED, "reordered: orders/0 offset 10: send p1#0 of 'a' was acknowledged at offset 20 "
                        "but the later send p1#1 of 'b' at offset 10")

    def test_compressed_positions(self) -> None:
        """Messages of one compressed wrapper share its offset and are told apart by their index."""
        h = History()
        first = h.invoke("p1", T, 0, "a")
        second = h.invoke("p1", T, 0, "b")
        h.ok(first, 0, 0)
        h.ok(second, 0, 1)
        h.read("r1", T, 0, 0, "a", index=0)
        h.read("r1", T, 0, 0, "b", index=1)
        h.replica(ReplicaContents("1", T, "0", 0, 40, {(0, 0): b"a", (0, 1): b"b"}))
        h.final(T, 0, leader=1)
        self.assertTrue(check(h).valid, check(h).report())
        h.read("r1", T, 0, 0, "a", index=0)
        self.assertOnly(h, NON_MONOTONIC_READ, "r1 read 'a' at offset 0 after 'b' at offset 0 (message 1 of its "
                        "wrapper)")

    def test_byte_comparisons(self) -> None:
        diverged = ByteComparison(T, "0", 500, ("brokers 1 and 2 differ first at offset 218",),
                                  {"1": (0,), "2": (0,)})
        moved = ByteComparison(T, "0", 500, (), {"1": (0, 218), "2": (0,)})
        same = ByteComparison(T, "1", 500, (), {"1": (0, 218), "2": (0, 218)})
        self.assertOnly(History(), DIVERGED_BYTES, "diverged-bytes: orders/0: up to offset 500: brokers 1 and 2 "
                        "differ first at offset 218", comparisons=[diverged, same])
        self.assertOnly(History(), SEGMENT_FILES_DIFFER, "the same bytes up to offset 500, in different files: "
                        "1: segments at [0, 218]; 2: segments at [0]", comparisons=[moved])
        self.assertTrue(check(History(), [moved], same_files=False).valid)


class PersistenceTests(SynchronousTestCase):
    def test_json_lines_round_trip(self) -> None:
        """Every record is a line as it happens; loading the file gives the same history and the same result."""
        path = self.mktemp()
        h = clean(path)
        raw = h.invoke("p3", T, 1, b"\xff\x00")
        h.ok(raw, 0)
        h.close()
        with open(path) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual(lines[0], {"type": "invoke", "producer": "p1", "seq": 0, "topic": T, "partition": "0",
                                    "value": "a"})
        self.assertEqual(lines[1], {"type": "ok", "producer": "p1", "seq": 0, "offset": 0, "index": 0})
        self.assertIn({"type": "invoke", "producer": "p3", "seq": 0, "topic": T, "partition": "1",
                       "value": {"hex": "ff00"}}, lines)
        loaded = History.load(path)
        self.assertEqual(loaded.sends, h.sends)
        self.assertEqual((loaded.reads, loaded.scans, loaded.finals), (h.reads, h.scans, h.finals))
        self.assertEqual(loaded.replicas, h.replicas)
        self.assertEqual(check(loaded).report(), check(h).report())

    def test_a_bad_line_is_named(self) -> None:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write('{"type":"invoke","producer":"p","seq":0,"topic":"t","partition":"0","value":"a"}\n{"type":"x"}\n')
        with self.assertRaises(ValueError) as e:
            History.load(path)
        self.assertEqual(str(e.exception), f"{path}:2: not a history record (unknown record type 'x')")
