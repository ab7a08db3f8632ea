"""Reading replicas' log directories off disk, and comparing their files, on logs twlog's own Log wrote."""

from __future__ import annotations

import os

from twisted.internet.defer import maybeDeferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from twlog.bench.history import History
from twlog.bench.history_checks import LOST_WRITE, check
from twlog.bench.replica_logs import compare_segment_files, read_all_replicas, read_replica, segment_files
from twlog.config import LogConfig
from twlog.storage.checkpoints import REPLICATION_OFFSET_CHECKPOINT, format_offsets
from twlog.storage.compression import CODEC_GZIP
from twlog.storage.log import Log
from twlog.storage.message import encode_message_set

T = "orders"
#: Each of the values below is a 9-byte payload: 18 bytes on disk.
ENTRY = 18


def values(start: int, count: int) -> list[bytes]:
    return [b"value-%03d" % i for i in range(start, start + count)]


class ReplicaLogTests(SynchronousTestCase):
    def write(self, log_dir: str, sets: list[bytes], partition: int = 0, segment_bytes: int = 1024) -> str:
        """Append C{sets} to partition C{partition} of C{T} in C{log_dir} with twlog's Log, flush, close."""
        directory = os.path.join(log_dir, f"{T}-{partition}")
        log = Log.open(directory, LogConfig(directory, segment_bytes=segment_bytes), Clock(), maybeDeferred)
        for message_set in sets:
            log.append(message_set)
        log.flush()
        log.close()
        return directory

    def test_reads_every_message_across_segments(self) -> None:
        log_dir = self.mktemp()
        sets = [encode_message_set(values(i * 10, 10)) for i in range(12)]  # 180 bytes each; rolls every 5 sets
        directory = self.write(log_dir, sets)
        self.assertEqual([base for base, _ in segment_files(directory)], [0, 900, 1800])
        contents = read_replica(log_dir, T, 0, broker=1)
        self.assertEqual((contents.broker, contents.partition, contents.start, contents.end, contents.problem),
                         ("1", "0", 0, 12 * 180, None))
        self.assertEqual(len(contents.messages), 120)
        self.assertEqual(contents.value_at((0, 0)), b"value-000")
        self.assertEqual(contents.value_at((119 * ENTRY, 0)), b"value-119")
        self.assertIsNone(contents.high_watermark)

    def test_compressed_wrapper_positions_and_high_watermark(self) -> None:
        log_dir = self.mktemp()
        plain = encode_message_set([b"first"])
        self.write(log_dir, [plain, encode_message_set([b"in-1", b"in-2", b"in-3"], CODEC_GZIP)])
        with open(os.path.join(log_dir, REPLICATION_OFFSET_CHECKPOINT), "w") as f:
            f.write(format_offsets({(T, 0): len(plain)}))
        contents = read_replica(log_dir, T, "0")
        wrapper = len(plain)
        self.assertEqual(contents.messages, {(0, 0): b"first", (wrapper, 0): b"in-1", (wrapper, 1): b"in-2",
                                             (wrapper, 2): b"in-3"})
        self.assertEqual(contents.high_watermark, len(plain))

    def test_a_torn_tail_stops_reading_and_says_where(self) -> None:
        """A crash's partial last entry: the messages before it are read, and the problem names the file."""
        log_dir = self.mktemp()
        directory = self.write(log_dir, [encode_message_set(values(0, 3))])
        with open(os.path.join(directory, "00000000000000000000.log"), "ab") as f:
            f.write(b"\x00\x00")
        contents = read_replica(log_dir, T, 0)
        self.assertEqual((len(contents.messages), contents.end), (3, 3 * ENTRY))
        self.assertIn("00000000000000000000.log: ", contents.problem)
        self.assertIn("the message at offset 54 is corrupt (a partial length field of 2 bytes)", contents.problem)
        self.assertEqual(sorted(os.listdir(directory)), ["00000000000000000000.log"])  # nothing made or cut

    def test_a_gap_between_segments_stops_reading(self) -> None:
        log_dir = self.mktemp()
        directory = self.write(log_dir, [encode_message_set(values(0, 3))])
        with open(os.path.join(directory, "00000000000000000100.log"), "wb") as f:
            f.write(encode_message_set(values(3, 1)))
        contents = read_replica(log_dir, T, 0)
        self.assertEqual(len(contents.messages), 3)
        self.assertIn("the segment starts at offset 100, but the one before ends at 54", contents.problem)

    def test_a_missing_partition_is_empty(self) -> None:
        contents = read_replica(self.mktemp(), T, 4, broker=2)
        self.assertEqual((contents.messages, contents.start, contents.end, contents.problem), ({}, 0, 0, None))

    def test_read_all_replicas_into_a_history(self) -> None:
        """Every partition directory of every broker, recorded; a write missing from the final leader is lost."""
        dirs = {1: self.mktemp(), 2: self.mktemp()}
        for broker, log_dir in dirs.items():
            self.write(log_dir, [encode_message_set(values(0, 2))], partition=0)
            self.write(log_dir, [encode_message_set(values(10, 1 if broker == 1 else 2))], partition=1)
        os.makedirs(os.path.join(dirs[1], "not-a-partition"))
        h = History()
        found = h.record_replicas(dirs, T)
        self.assertEqual([(c.broker, c.partition) for c in found], [("1", "0"), ("1", "1"), ("2", "0"), ("2", "1")])
        self.assertEqual(len(read_all_replicas(dirs, "elsewhere")), 0)
        send = h.invoke("p1", T, 1, b"value-011")
        h.ok(send, ENTRY)
        h.final(T, 1, leader=1)
        h.final(T, 0, leader=2)
        result = check(h)
        self.assertEqual(result.kinds(), {LOST_WRITE: 1}, result.report())
        self.assertIn("send p1#0 of 'value-011' was acknowledged at offset 18; the final log (broker 1) holds "
                      "nothing there", result.report())

    def test_compare_identical_files(self) -> None:
        sets = [encode_message_set(values(i * 10, 10)) for i in range(8)]
        dirs = {1: self.mktemp(), 2: self.mktemp(), 3: self.mktemp()}
        for log_dir in dirs.values():
            self.write(log_dir, sets)
        comparison = compare_segment_files(dirs, T, 0, 8 * 180)
        self.assertTrue(comparison.same_files)
        self.assertEqual(comparison.layouts, {"1": (0, 900), "2": (0, 900), "3": (0, 900)})

    def test_compare_same_bytes_in_other_files(self) -> None:
        """The same bytes rolled at other offsets: the bytes agree, the files do not."""
        sets = [encode_message_set(values(i * 10, 10)) for i in range(8)]
        dirs = {1: self.mktemp(), 2: self.mktemp()}
        self.write(dirs[1], sets)
        self.write(dirs[2], sets, segment_bytes=2048)
        comparison = compare_segment_files(dirs, T, 0, 8 * 180)
        self.assertEqual((comparison.same_bytes, comparison.same_files), (True, False))
        self.assertEqual(comparison.layout_lines(), ["1: segments at [0, 900]", "2: segments at [0]"])

    def test_compare_finds_the_first_differing_byte(self) -> None:
        dirs = {1: self.mktemp(), 2: self.mktemp(), 3: self.mktemp()}
        self.write(dirs[1], [encode_message_set(values(0, 5))])
        self.write(dirs[2], [encode_message_set(values(0, 5))])
        self.write(dirs[3], [encode_message_set(values(0, 3) + [b"value-999", b"value-004"])])
        comparison = compare_segment_files(dirs, T, 0, 5 * ENTRY)
        self.assertFalse(comparison.same_bytes)
        first = 3 * ENTRY + 5  # the fourth message's CRC (after its length and magic) is its first differing byte
        self.assertEqual(comparison.differences, (f"brokers 1 and 3 differ first at offset {first}",))
        self.assertTrue(compare_segment_files(dirs, T, 0, 3 * ENTRY).same_files)

    def test_compare_a_replica_that_ends_short(self) -> None:
        dirs = {1: self.mktemp(), 2: self.mktemp()}
        self.write(dirs[1], [encode_message_set(values(0, 5))])
        self.write(dirs[2], [encode_message_set(values(0, 2))])
        comparison = compare_segment_files(dirs, T, 0, 5 * ENTRY)
        self.assertEqual(comparison.differences, (f"broker 2 ends at offset {2 * ENTRY}, before {5 * ENTRY}",))
