"""Tests for twlog.protocol.produce: PRODUCE, MULTIPRODUCE and ACK_PRODUCE, through a Broker."""

from __future__ import annotations

import errno
import os
from types import SimpleNamespace

from twisted.trial.unittest import SynchronousTestCase

from tests.storage.faultydisk import FaultyDisk
from tests.storage.test_descriptors import OpenFails
from twlog.errors import (
    InvalidTopic,
    OutcomeUnknown,
    RequestTimedOut,
    StorageFailed,
    TooManyOpenFiles,
    WrongPartition,
)
from twlog.protocol import codec
from twlog.protocol.codec import (
    ACK_ALL,
    ACK_APPENDED,
    ACK_FLUSHED,
    AckProduceRequest,
    MultiProduceRequest,
    ProduceRequest,
)
from twlog.storage import flush as flush_module
from twlog.storage.message import encode_message_set
from twlog.storage.segment import segment_name

from ..fakes import ManualRunner
from .test_server import BrokerTestMixin


class ProduceHandlerTests(BrokerTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.make_broker()

    def test_produce_with_bad_crc_is_logged_and_dropped(self) -> None:
        """A fire-and-forget set with a CRC mismatch is logged and writes nothing."""
        data = bytearray(encode_message_set([b"abc"]))
        data[-1] ^= 1
        self.broker.produce(ProduceRequest("t", 0, bytes(data)), "1.2.3.4:5")
        self.assertEqual(self.logs.get_log("t", 0).end_offset, 0)

    def test_ack_produce_reports_offsets(self) -> None:
        """An appended-ack produce answers with each set's offsets, and per-set errors."""
        request = AckProduceRequest(
            ACK_APPENDED,
            1000,
            (
                ProduceRequest("t", 0, encode_message_set([b"x" * 10])),
                ProduceRequest("t", 0, encode_message_set([b"y"])),
                ProduceRequest("t", 9, encode_message_set([b"z"])),
                ProduceRequest("../t", 0, encode_message_set([b"z"])),
            ),
        )
        response = codec.decode_ack_produce_response(self.broker.ack_produce(request))
        error, results = response.error, response.results
        self.assertEqual(error, 0)
        self.assertEqual(
            [(r.error, r.offset, r.next_offset) for r in results],
            [(0, 0, 19), (0, 19, 29), (WrongPartition.code, -1, -1), (InvalidTopic.code, -1, -1)],
        )


class AckFlushedTests(BrokerTestMixin, SynchronousTestCase):
    def test_answers_after_fsync(self) -> None:
        """A flushed-ack produce is answered only when the fsync completes."""
        runner = ManualRunner()
        self.make_broker(runner, flush_messages=1000)
        d = self.broker.ack_produce(
            AckProduceRequest(ACK_FLUSHED, 5000, (ProduceRequest("t", 0, encode_message_set([b"a"])),))
        )
        self.assertNoResult(d)
        runner.run_all()
        self.assertEqual(codec.decode_ack_produce_response(self.successResultOf(d)).results[0].error, 0)

    def test_times_out(self) -> None:
        """A flushed-ack produce whose fsync does not finish in time reports RequestTimedOut for that set."""
        runner = ManualRunner()
        self.make_broker(runner, flush_messages=1000)
        d = self.broker.ack_produce(
            AckProduceRequest(ACK_FLUSHED, 200, (ProduceRequest("t", 0, encode_message_set([b"a"])),))
        )
        self.clock.advance(0.2)
        (result,) = codec.decode_ack_produce_response(self.successResultOf(d)).results
        self.assertEqual((result.error, result.offset), (RequestTimedOut.code, 0))

    def test_ack_all_without_followers(self) -> None:
        """ack=all to a partition with no followers (the leader is its whole ISR: a 0.7 topic's) waits for the
        fsync as ack=flushed does, and one whose fsync does not finish in time gets RequestTimedOut, never hangs."""
        runner = ManualRunner()
        self.make_broker(runner, flush_messages=1000)
        d = self.broker.ack_produce(
            AckProduceRequest(ACK_ALL, 5000, (ProduceRequest("t", 0, encode_message_set([b"a"])),)))
        self.assertNoResult(d)
        runner.run_all()
        self.assertEqual(codec.decode_ack_produce_response(self.successResultOf(d)).results[0].error, 0)
        late = self.broker.ack_produce(
            AckProduceRequest(ACK_ALL, 200, (ProduceRequest("t", 1, encode_message_set([b"b"])),)))
        self.clock.advance(0.2)
        (result,) = codec.decode_ack_produce_response(self.successResultOf(late)).results
        self.assertEqual((result.error, result.offset), (RequestTimedOut.code, 0))


class StorageErrorTests(BrokerTestMixin, SynchronousTestCase):
    """Each part of a produce is answered on its own, and truly (issue 21, findings 4 and 5): a part whose
    partition cannot be written is StorageFailed with nothing of it stored; the other parts are stored and
    answered with their offsets; a part appended whose flush failed is OutcomeUnknown."""

    def make(self, runner=None, **overrides) -> FaultyDisk:
        """A broker (segments of 1 KiB) whose partition t-0 is on a FaultyDisk; t-1 is healthy."""
        overrides.setdefault("segment_bytes", 1024)
        overrides.setdefault("flush_messages", 1000)
        self.make_broker(runner or ManualRunner(), **overrides)
        self.logs.get_or_create_log("t", 0)
        return FaultyDisk(self, os.path.join(self.log_dir, "t-0"))

    def answer(self, request) -> list[tuple[int, int]]:
        response = self.broker.ack_produce(request)
        if not isinstance(response, bytes):
            response = self.successResultOf(response)
        return [(r.error, r.offset) for r in codec.decode_ack_produce_response(response).results]

    def test_failed_roll_fails_only_its_part(self) -> None:
        """A roll that cannot create its file (no inodes) fails that part with StorageFailed; the healthy
        parts of the same request are stored and say so; no traceback is logged, nothing escapes."""
        disk = self.make()
        full = encode_message_set([b"x" * 1010])  # 1019 bytes: the next set needs a new segment
        self.assertEqual(self.answer(AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("t", 0, full),))),
                         [(0, 0)])
        disk.create_error = errno.ENOSPC
        one = encode_message_set([b"y"])
        request = AckProduceRequest(ACK_APPENDED, 1000, (
            ProduceRequest("t", 1, one), ProduceRequest("t", 0, one), ProduceRequest("t", 1, one)))
        self.assertEqual(self.answer(request), [(0, 0), (StorageFailed.code, -1), (0, 10)])
        self.assertEqual(self.logs.get_log("t", 0).end_offset, 1019)
        self.assertEqual(self.logs.get_log("t", 1).end_offset, 20)
        self.assertEqual(self.flushLoggedErrors(), [])
        self.assertEqual(self.broker.error_counts[codec.ACK_PRODUCE, StorageFailed.code], 1)

    def test_failed_roll_of_a_fire_and_forget_produce(self) -> None:
        """PRODUCE and MULTIPRODUCE: a failed roll is logged (no traceback), and nothing escapes."""
        disk = self.make()
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"x" * 1010])))
        disk.create_error = errno.EROFS
        self.broker.multiproduce(MultiProduceRequest((ProduceRequest("t", 0, encode_message_set([b"y"])),
                                                      ProduceRequest("t", 1, encode_message_set([b"z"])))))
        self.assertEqual((self.logs.get_log("t", 0).end_offset, self.logs.get_log("t", 1).end_offset), (1019, 10))
        self.assertEqual(self.flushLoggedErrors(), [])
        self.assertEqual(self.broker.error_counts[codec.MULTIPRODUCE, StorageFailed.code], 1)

    def test_enospc_during_a_flush_is_storage_failed(self) -> None:
        """ack=flushed, and the flush's write finds the disk full: StorageFailed (13), not RequestTimedOut;
        the set is not in the file, then or after the broker closes the log."""
        runner = ManualRunner()
        disk = self.make(runner, segment_bytes=1024 * 1024)
        disk.write_error = errno.ENOSPC
        request = AckProduceRequest(ACK_FLUSHED, 5000, (ProduceRequest("t", 0, encode_message_set([b"a"])),
                                                        ProduceRequest("t", 1, encode_message_set([b"b"]))))
        d = self.broker.ack_produce(request)
        runner.run_all()
        response = codec.decode_ack_produce_response(self.successResultOf(d))
        self.assertEqual([r.error for r in response.results], [StorageFailed.code, 0])
        disk.heal()
        self.logs.close()
        self.assertEqual(os.path.getsize(os.path.join(self.log_dir, "t-0", segment_name(0))), 0)

    def test_failed_fsync_is_outcome_unknown(self) -> None:
        """ack=flushed, the set is in the file, and the fsync fails: OutcomeUnknown (23), not "not written"."""
        runner = ManualRunner()
        self.make(runner)
        d = self.broker.ack_produce(AckProduceRequest(ACK_FLUSHED, 5000,
                                                      (ProduceRequest("t", 0, encode_message_set([b"a"])),)))
        runner.fail_one(OSError(errno.EIO, "Input/output error"))
        (result,) = codec.decode_ack_produce_response(self.successResultOf(d)).results
        self.assertEqual((result.error, result.offset), (OutcomeUnknown.code, 0))

    def test_flush_put_off_for_descriptors_is_not_too_many_open_files(self) -> None:
        """ack=flushed, and the flush cannot open a directory for lack of descriptors: the set is appended,
        so the answer is never TooManyOpenFiles ("nothing written"); it waits for the retried flush."""
        runner = ManualRunner()
        self.make(runner, flush_interval_ms=100)
        log = self.logs.get_log("t", 0)
        log.append(encode_message_set([b"x" * 1000]))
        d = self.broker.ack_produce(AckProduceRequest(ACK_FLUSHED, 5000,
                                                      (ProduceRequest("t", 0, encode_message_set([b"a"])),)))
        failing = OpenFails(os.open, 1)
        self.patch(flush_module, "os", SimpleNamespace(**{**vars(os), "open": failing}))
        runner.run_all()
        self.assertNoResult(d)
        self.clock.advance(0.1)
        runner.run_all()
        (result,) = codec.decode_ack_produce_response(self.successResultOf(d)).results
        self.assertEqual((result.error, result.offset), (0, 1009))
        self.assertNotEqual(result.error, TooManyOpenFiles.code)

    def test_partition_takes_writes_again_after_the_retry(self) -> None:
        """After ENOSPC the partition answers StorageFailed for storage_retry_s, then takes writes once space
        is back, without a restart."""
        disk = self.make(storage_retry_s=10)
        disk.write_error = errno.ENOSPC

        def produce() -> list[tuple[int, int]]:
            return self.answer(AckProduceRequest(ACK_APPENDED, 1000,
                                                 (ProduceRequest("t", 0, encode_message_set([b"a"])),)))

        self.assertEqual(produce(), [(StorageFailed.code, -1)])
        disk.heal()
        self.assertEqual(produce(), [(StorageFailed.code, -1)])
        self.clock.advance(10)
        self.assertEqual(produce(), [(0, 0)])
