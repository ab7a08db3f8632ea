"""Tests for twlog.client.reader: every rule of reading a partition, driven without sockets (h11-style tables)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.client.reader import (
    BATCH,
    SEND_NEXT,
    Fetch,
    Fetched,
    FetchedMessages,
    PartitionReader,
    Refresh,
    Reread,
    SizeProbe,
    check_on_corrupt,
)
from twlog.errors import (
    BrokerTimeout,
    ConnectionFailed,
    ConnectionLost,
    FetchSizeTooSmall,
    InvalidMessage,
    LeaderNotAvailable,
    NotLeader,
    OffsetNotOnBoundary,
    OffsetOutOfRange,
    WrongPartition,
)
from twlog.partition import TopicPartition
from twlog.protocol.codec import FetchRequest
from twlog.storage.batch import MessageBatch
from twlog.storage.message import CorruptMessage, encode_message, encode_message_set

TP = TopicPartition("t", "1-0")
SET = encode_message_set([b"a", b"bb", b"ccc"])  # entries of 10, 11 and 12 bytes


def crc_bad(payload: bytes = b"payload") -> bytes:
    """A whole message whose CRC does not match."""
    data = bytearray(encode_message(payload))
    data[-1] ^= 1
    return bytes(data)


def reader(offset: int = 0, **options) -> PartitionReader:
    options.setdefault("max_bytes", 100)
    return PartitionReader(TP, offset, **options)


def drive(r: PartitionReader, script: list) -> list:
    """Feed C{r} the answers of C{script} in turn: the (request, event) pairs it went through."""
    seen = []
    for answer in script:
        request = r.next_request()
        seen.append((request, r.receive(answer)))
    return seen


class FetchTests(SynchronousTestCase):
    def test_requests_and_wire_parts(self) -> None:
        """Each request names what to send: a fetch, a re-read from the boundary before, a 4-byte probe."""
        refusal = OffsetNotOnBoundary("refused")
        table = [
            (Fetch(10, 100), FetchRequest("t", 0, 10, 100)),
            (Reread(4, 10, 100, refusal), FetchRequest("t", 0, 4, 106)),
            (SizeProbe(10, 100), FetchRequest("t", 0, 10, 4)),
        ]
        for request, part in table:
            self.assertEqual(request.part(TP), part)

    def test_messages_then_next_fetch(self) -> None:
        """A fetch's messages come back with the offset to go on from, and the next fetch starts there."""
        r = reader()
        self.assertEqual(r.next_request(), Fetch(0, 100))
        event = r.receive(SET[:21] + SET[21:25])  # a partial trailing entry is dropped
        self.assertIsInstance(event, Fetched)
        self.assertEqual([m.payload for m in event.value], [b"a", b"bb"])
        self.assertEqual((event.next_offset, r.offset, r.boundary), (21, 21, (10, 21)))
        self.assertEqual(r.next_request(), Fetch(21, 100))

    def test_decode_modes(self) -> None:
        """The same answer decodes as FetchedMessages, a MessageBatch, or through the driver's own decode."""
        table = [
            ({}, FetchedMessages),
            ({"decode": BATCH}, MessageBatch),
        ]
        for options, kind in table:
            r = reader(**options)
            r.next_request()
            value = r.receive(SET).value
            self.assertIsInstance(value, kind)
            self.assertEqual((value.next_offset, value.last_boundary), (33, (21, 33)))
        r = reader(decode=lambda rd, data, offset: rd.decode_messages(data, offset))
        r.next_request()
        self.assertEqual(r.receive(SET).next_offset, 33)

    def test_end(self) -> None:
        """A reader with an end is done once a fetch reaches it."""
        r = reader(end=21)
        self.assertFalse(r.done)
        drive(r, [SET[:10]])
        self.assertFalse(r.done)
        drive(r, [SET[10:]])
        self.assertTrue(r.done)

    def test_empty_fetch(self) -> None:
        """No bytes: no messages, and the offset stays."""
        r = reader(42)
        [(_, event)] = drive(r, [b""])
        self.assertEqual((event.value, r.offset), (FetchedMessages((), 42), 42))

    def test_refusals_raise(self) -> None:
        """Errors that are not the reader's to handle are raised as they came."""
        for error in (OffsetOutOfRange("out"), WrongPartition("wrong"), ConnectionFailed("refused"),
                      BrokerTimeout("slow")):
            r = reader()
            r.next_request()
            self.assertIs(self.assertRaises(type(error), r.receive, error), error)

    def test_receive_before_request(self) -> None:
        """An answer to nothing is a programming error."""
        self.assertRaises(ValueError, reader().receive, b"")

    def test_on_corrupt_values(self) -> None:
        """Only fail and skip are corrupt-message policies."""
        self.assertEqual(check_on_corrupt("skip"), "skip")
        self.assertRaises(ValueError, check_on_corrupt, "ignore")
        self.assertRaises(ValueError, reader, on_corrupt="ignore")


class SizeProbeTests(SynchronousTestCase):
    def test_probe_table(self) -> None:
        """FetchSizeTooSmall asks for a 4-byte probe; its answer (or failure) is named in the error."""
        big = encode_message(b"x" * 200)
        table = [
            (big[:4], f"is {len(big)} bytes, larger than max_bytes=100; fetch it with max_bytes={len(big)}"),
            (b"", "is larger than max_bytes=100"),
            (ConnectionFailed("gone"), "is larger than max_bytes=100"),
            (BrokerTimeout("slow"), "is larger than max_bytes=100"),
            (OffsetOutOfRange("out"), "is larger than max_bytes=100"),
        ]
        for probe_answer, text in table:
            r = reader(7, label=0)
            r.next_request()
            self.assertIs(r.receive(FetchSizeTooSmall("too small")), SEND_NEXT)
            self.assertEqual(r.next_request(), SizeProbe(7, 100))
            error = self.assertRaises(FetchSizeTooSmall, r.receive, probe_answer)
            self.assertIn(f"the message at offset 7 of t-0 {text}", str(error))

    def test_partial_first_message(self) -> None:
        """Bytes holding only part of the first message: the size is read from its length field."""
        r = reader(label=0)
        r.next_request()
        error = self.assertRaises(FetchSizeTooSmall, r.receive, SET[:6])
        self.assertIn("is 10 bytes, larger than max_bytes=100", str(error))


class CorruptTests(SynchronousTestCase):
    def test_fail_after_the_valid_ones(self) -> None:
        """The valid messages before a corrupt one come first; a fetch from it raises it, with its offsets."""
        bad = crc_bad()
        r = reader()
        [(_, event)] = drive(r, [SET + bad])
        self.assertEqual((len(event.value), event.next_offset), (3, 33))
        self.assertEqual((event.value.corrupt.offset, event.value.corrupt.next_offset), (33, 33 + len(bad)))
        r.next_request()
        error = self.assertRaises(CorruptMessage, r.receive, bad)
        self.assertEqual((error.offset, error.next_offset, error.topic, error.partition), (33, 33 + len(bad), "t",
                                                                                           "1-0"))

    def test_skip_table(self) -> None:
        """With skip, a corrupt message is handed to on_skip and passed, in both decode modes."""
        bad = crc_bad()
        for decode in ("messages", BATCH):
            skipped = []
            r = reader(on_corrupt="skip", decode=decode, on_skip=skipped.append)
            [(_, event)] = drive(r, [SET[:10] + bad + SET[10:]])
            self.assertEqual([m.payload for m in event.value], [b"a", b"bb", b"ccc"])
            self.assertEqual([(e.offset, e.next_offset) for e in skipped], [(10, 10 + len(bad))])
            self.assertEqual(event.next_offset, 33 + len(bad))


class RefusedOffsetTests(SynchronousTestCase):
    def refused_at_boundary(self, **options) -> tuple[PartitionReader, int]:
        r = reader(**options)
        drive(r, [SET[:21]])  # the boundary (10, 21) is known
        r.next_request()
        self.assertIs(r.receive(OffsetNotOnBoundary("refused")), SEND_NEXT)
        request = r.next_request()
        self.assertEqual(request, Reread(10, 21, 100, request.refusal))
        return r, 21

    def test_reread_table(self) -> None:
        """A refusal where the last message ends is re-read from that message: fail names the offsets, skip
        passes the corrupt message, a whole valid one is read, nothing there re-raises the refusal."""
        bad = crc_bad()
        r, at = self.refused_at_boundary()
        error = self.assertRaises(CorruptMessage, r.receive, SET[10:21] + bad)
        self.assertEqual((error.offset, error.next_offset), (at, at + len(bad)))

        r, at = self.refused_at_boundary(on_corrupt="skip", on_skip=lambda e: None)
        self.assertEqual(r.receive(SET[10:21] + bad).next_offset, at + len(bad))

        r, at = self.refused_at_boundary()
        cut = SET[10:21] + SET[21:25]  # the message there is not whole: its length field says where it ends
        error = self.assertRaises(CorruptMessage, r.receive, cut)
        self.assertEqual((error.offset, error.next_offset), (at, 33))
        self.assertIn("the broker refuses to read from it", str(error))

        r, at = self.refused_at_boundary(on_corrupt="skip", decode=BATCH, on_skip=lambda e: None)
        event = r.receive(cut)
        self.assertEqual((event.next_offset, len(event.value.skipped)), (33, 1))

        r, at = self.refused_at_boundary()
        self.assertEqual([m.payload for m in r.receive(SET[10:]).value], [b"ccc"])

        r, at = self.refused_at_boundary()
        self.assertRaises(OffsetNotOnBoundary, r.receive, SET[10:21])

    def test_refusal_without_a_boundary(self) -> None:
        """At the caller's start offset the refusal is raised; at an offset reached by reading (or a trusted
        start) the message there is corrupt, its end unknown."""
        table = [
            ({}, 5, OffsetNotOnBoundary),
            ({"trusted_start": True}, 5, CorruptMessage),
        ]
        for options, offset, kind in table:
            r = reader(offset, **options)
            r.next_request()
            self.assertRaises(kind, r.receive, OffsetNotOnBoundary("refused"))
        r = reader(0, on_corrupt="skip", on_skip=lambda e: None)
        drive(r, [SET[:10] + crc_bad()])  # it ends with a skipped message: no boundary there
        r.next_request()
        error = self.assertRaises(CorruptMessage, r.receive, OffsetNotOnBoundary("refused"))
        self.assertIsNone(error.next_offset)

    def test_given_boundary(self) -> None:
        """A boundary the driver knew (an earlier fetch's) is used for the first fetch too."""
        r = reader(21, boundary=(10, 21))
        r.next_request()
        self.assertIs(r.receive(OffsetNotOnBoundary("refused")), SEND_NEXT)
        self.assertIsInstance(r.next_request(), Reread)


class RefreshTests(SynchronousTestCase):
    def test_refresh_table(self) -> None:
        """NotLeader, LeaderNotAvailable and a lost connection ask for a refreshed layout and the same request
        again, up to the bound; one more raises the error."""
        for error in (NotLeader("not me"), LeaderNotAvailable("none"), ConnectionLost("lost")):
            r = reader(max_refreshes=2)
            first = r.next_request()
            for attempt in (1, 2):
                self.assertEqual(r.receive(error), Refresh(error, attempt))
                self.assertEqual(r.next_request(), first)
            self.assertIs(self.assertRaises(type(error), r.receive, error), error)

    def test_success_resets_the_count(self) -> None:
        """The bound counts refreshes in a row: an answer in between starts it again."""
        r = reader(max_refreshes=1)
        events = drive(r, [NotLeader("a"), SET[:10], NotLeader("b"), SET[10:21]])
        self.assertEqual([type(e) for _, e in events], [Refresh, Fetched, Refresh, Fetched])
        self.assertEqual([req.offset for req, _ in events], [0, 0, 10, 10])

    def test_no_refresh(self) -> None:
        """A reader allowed no refreshes raises at once (one broker; the caller retries)."""
        r = reader(max_refreshes=0)
        r.next_request()
        self.assertRaises(NotLeader, r.receive, NotLeader("not me"))

    def test_pipelined_answers(self) -> None:
        """Answers to fetches sent ahead are handed back with their request."""
        r = reader()
        ahead = [r.fetch_at(0), r.fetch_at(10)]
        self.assertEqual(r.receive(SET[:10], ahead[0]).next_offset, 10)
        self.assertEqual(r.receive(SET[10:21], ahead[1]).next_offset, 21)
        self.assertEqual(r.boundary, (10, 21))
        self.assertIsInstance(self.assertRaises(InvalidMessage, r.receive, crc_bad(), r.fetch_at(21)),
                              CorruptMessage)
