"""A large produced set written a piece at a time through a BrokerProtocol (issue 21, finding 9: a 50 MB set
written in one step held every other connection for 15-80 ms): other connections are served between the pieces,
sets for the same partition wait their turn in order, and a failed piece answers StorageFailed with nothing
of the set stored."""

from __future__ import annotations

import errno
import os

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import StorageFailed
from twlog.protocol import codec
from twlog.protocol import produce as produce_module
from twlog.protocol.codec import ACK_APPENDED, AckProduceRequest, MetadataRequest, ProduceRequest
from twlog.protocol.factory import BrokerFactory
from twlog.storage import log as log_module
from twlog.storage.message import encode_message_set

from ..fakes import iteration
from ..storage.faultydisk import FaultyDisk
from .test_server import BrokerTestMixin, frame, responses

#: In these tests: 1 MiB pieces, and sets of 2 MiB or more are written in pieces.
PIECE = 1024 * 1024
#: A 3 MB set (checked in 3 slices, written in 3 pieces).
BIG = encode_message_set([b"m" * 1000] * 3000)
SMALL = encode_message_set([b"s" * 100])


class PiecedProduceTests(BrokerTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.make_broker(max_message_bytes=2000, segment_bytes=64 * 1024 * 1024, max_request_bytes=16 * 1024 * 1024)
        self.factory = BrokerFactory(self.broker)
        self.patch(log_module, "PIECE_BYTES", PIECE)
        self.patch(produce_module, "PIECED_SET_BYTES", 2 * PIECE)

    def connection(self, port: int):
        protocol = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", port))
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def answers(self, transport) -> list[codec.ProduceResult]:
        return [codec.decode_ack_produce_response(r).results[0] for r in responses(transport.value())]

    def test_other_connections_run_between_pieces(self) -> None:
        """After its 3 check slices, the set is written in 3 pieces, one per reactor iteration, while another
        connection is answered in each; the partition's end moves once, when the set is whole."""
        big, big_transport = self.connection(1)
        other, other_transport = self.connection(2)
        big.dataReceived(frame(AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("t", 0, BIG),))))
        ends = []
        while not big_transport.value():
            other.dataReceived(frame(MetadataRequest()))
            iteration(self.clock)
            ends.append(self.logs.get_log("t", 0).end_offset if self.logs.get_log("t", 0) else 0)
        self.assertEqual(len(ends), 5)  # 3 slices checked, the first piece with the third; 2 more pieces
        self.assertEqual(ends, [0, 0, 0, 0, len(BIG)])
        self.assertEqual(self.logs.get_log("t", 0).pieces.pieces, 3)
        self.assertEqual(len(responses(other_transport.value())), 5)
        (result,) = self.answers(big_transport)
        self.assertEqual((result.error, result.offset, result.next_offset), (0, 0, len(BIG)))

    def test_sets_for_the_partition_wait_their_turn(self) -> None:
        """Sets for the same partition sent while a large one is written (an acknowledged one and a PRODUCE)
        land after it, in the order they came; another partition's set does not wait."""
        big, big_transport = self.connection(1)
        small, small_transport = self.connection(2)
        other, other_transport = self.connection(3)
        fire_and_forget, _ = self.connection(4)
        big.dataReceived(frame(AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("t", 0, BIG),))))
        while not self.logs.get_log("t", 0) or not self.logs.get_log("t", 0).pieces.busy:
            iteration(self.clock)
        small.dataReceived(frame(AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("t", 0, SMALL),))))
        fire_and_forget.dataReceived(frame(ProduceRequest("t", 0, SMALL)))
        other.dataReceived(frame(AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("t", 1, SMALL),))))
        self.assertEqual(small_transport.value(), b"")
        (result,) = self.answers(other_transport)
        self.assertEqual((result.error, result.offset), (0, 0))
        for _ in range(3):
            iteration(self.clock)
        (result,) = self.answers(small_transport)
        self.assertEqual((result.error, result.offset, result.next_offset), (0, len(BIG), len(BIG) + len(SMALL)))
        self.assertEqual(self.logs.get_log("t", 0).end_offset, len(BIG) + 2 * len(SMALL))
        self.assertEqual(len(self.answers(big_transport)), 1)

    def test_a_failed_piece_is_storage_failed(self) -> None:
        """The disk fills up between two pieces: the set answers StorageFailed without offsets, and nothing of
        it is stored; the next set after --storage-retry-s lands at offset 0."""
        self.broker.produce(ProduceRequest("t", 0, SMALL))
        log = self.logs.get_log("t", 0)
        start = log.end_offset
        disk = FaultyDisk(self, self.log_dir)
        big, big_transport = self.connection(1)
        big.dataReceived(frame(AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("t", 0, BIG),))))
        while not log.pieces.busy:
            iteration(self.clock)
        disk.write_error = errno.ENOSPC
        iteration(self.clock)
        (result,) = self.answers(big_transport)
        self.assertEqual((result.error, result.offset, result.next_offset), (StorageFailed.code, -1, -1))
        self.assertEqual(log.end_offset, start)
        self.assertEqual(os.path.getsize(log.segments[-1].path), start)
