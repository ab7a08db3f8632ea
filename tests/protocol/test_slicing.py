"""Unit tests for checking large produces a slice at a time (twlog.protocol.slicing, issue 21 finding 9): the same
verdicts as validate_message_set, and a broker connection that lets the reactor run between slices."""

from __future__ import annotations

import random
import struct
import zlib

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import BrokerError, InvalidMessage
from twlog.protocol import codec
from twlog.protocol.codec import ACK_APPENDED, AckProduceRequest, MetadataRequest, ProduceRequest
from twlog.protocol.factory import BrokerFactory
from twlog.protocol.slicing import SLICE_BYTES, SLICED_FRAME_BYTES, check_message_set, check_produce
from twlog.storage import log as log_module
from twlog.storage.compression import CODEC_GZIP
from twlog.storage.message import encode_message_set
from twlog.storage.validation import validate_message_set

from ..fakes import iteration
from .test_server import BrokerTestMixin, frame, responses


def run(steps) -> tuple[int, int]:
    """Drive a check to its end: (its value, how many times it yielded)."""
    yields = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value, yields
        yields += 1


def verdict(call):
    try:
        return call()
    except BrokerError as e:
        return type(e), str(e), getattr(e, "message_size", None)


class CheckMessageSetTests(SynchronousTestCase):
    def cases(self) -> list[bytes]:
        rng = random.Random(21)
        plain = encode_message_set([bytes([i % 251]) * rng.randrange(1, 3000) for i in range(200)])
        gzip = encode_message_set([b"g" * 500] * 40, CODEC_GZIP)
        mixed = plain[:5000] + gzip + plain
        cases = [plain, gzip, mixed, b"", encode_message_set([b"x" * 20_000])]
        for _ in range(30):  # corrupt a byte, cut the end, or both
            data = bytearray(rng.choice([plain, mixed]))
            if rng.random() < 0.7:
                data[rng.randrange(len(data))] ^= 0xFF
            if rng.random() < 0.4:
                del data[rng.randrange(len(data)) :]
            cases.append(bytes(data))
        bad_wrapper = bytearray(encode_message_set([b"g" * 500] * 40, CODEC_GZIP))
        bad_wrapper[12] ^= 1  # inside the compressed bytes, CRC recomputed: the wrapper is whole, its inside is not
        cases.append(bytes(bad_wrapper[:4]) + _with_crc(bytes(bad_wrapper[4:])))
        cases.append(plain[:7000] + struct.pack(">i", 50_000) + b"\x00" * 40)  # larger than the maximum
        return cases

    def test_same_verdict_as_validate_message_set(self) -> None:
        """For valid, corrupt, cut, compressed and oversized sets, and slices smaller than one entry: the same
        count, or the same error naming the same byte, as checking the set whole."""
        for data in self.cases():
            expected = verdict(lambda data=data: validate_message_set(data, 30_000, 100_000))
            for slice_bytes in (64, 1000, 4096, SLICE_BYTES):
                got = verdict(lambda data=data, s=slice_bytes: run(check_message_set(data, 30_000, 100_000, s))[0])
                self.assertEqual(got, expected, f"{len(data)} bytes, slices of {slice_bytes}")

    def test_yields_per_slice(self) -> None:
        """A 5 MB set of 1 KB messages yields once per 1 MiB slice."""
        data = encode_message_set([b"m" * 1000] * 5000)
        count, yields = run(check_message_set(data, 1_000_000, 10_000_000))
        self.assertEqual((count, yields), (5000, -(-len(data) // SLICE_BYTES)))

    def test_check_produce_marks_each_set(self) -> None:
        """Each set of an ACK_PRODUCE gets its count or its error; the request is otherwise the same."""
        good, bad = encode_message_set([b"a", b"b"]), encode_message_set([b"c"])[:-1]
        request = AckProduceRequest(ACK_APPENDED, 100, (ProduceRequest("t", 0, good), ProduceRequest("t", 1, bad)))
        checked, _ = run(check_produce(request, 1000, 10_000))
        self.assertEqual(checked, request)
        self.assertEqual(checked.produces[0].checked, 2)
        self.assertIsInstance(checked.produces[1].checked, InvalidMessage)
        single, _ = run(check_produce(ProduceRequest("t", 0, good), 1000, 10_000))
        self.assertEqual(single.checked, 2)


def _with_crc(message: bytes) -> bytes:
    """A magic-1 message (after its size) with its CRC recomputed over its payload."""
    return message[:2] + struct.pack(">I", zlib.crc32(message[6:]) & 0xFFFFFFFF) + message[6:]


class SlicedProduceTests(BrokerTestMixin, SynchronousTestCase):
    """A large produce through a BrokerProtocol: checked over several reactor iterations, then handled once."""

    def setUp(self) -> None:
        self.make_broker(max_message_bytes=2000, segment_bytes=64 * 1024 * 1024, max_request_bytes=16 * 1024 * 1024)
        self.factory = BrokerFactory(self.broker)
        self.validations = 0
        real = log_module.validate_message_set

        def counting(*args, **kwargs):
            self.validations += 1
            return real(*args, **kwargs)

        self.patch(log_module, "validate_message_set", counting)

    def connection(self):
        protocol = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1))
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def big_produce(self, corrupt: bool = False) -> tuple[bytes, bytes]:
        messages = bytearray(encode_message_set([b"m" * 1000] * 3000))  # 3 MB: 3 slices
        if corrupt:
            messages[-1] ^= 1
        request = AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("t", 0, bytes(messages)),))
        data = frame(request)
        self.assertGreater(len(data), SLICED_FRAME_BYTES)
        return data, bytes(messages)

    def test_other_connections_run_between_slices(self) -> None:
        """The produce is answered after 3 iterations; meanwhile another connection is served, and the same
        connection's next request waits for it (answers stay in order) and then for its next turn; the handler
        does not validate the set again."""
        data, messages = self.big_produce()
        protocol, transport = self.connection()
        protocol.dataReceived(data + frame(MetadataRequest()))
        self.assertEqual(transport.value(), b"")
        self.assertEqual(transport.producerState, "paused")
        self.assertEqual(self.factory.budget.total, len(data) - 4 + len(frame(MetadataRequest())))  # still counted
        other, other_transport = self.connection()
        iterations = 0
        while not transport.value():
            other.dataReceived(frame(MetadataRequest()))
            iteration(self.clock)
            iterations += 1
        self.assertEqual(iterations, 3)
        self.assertEqual(len(responses(other_transport.value())), 3)
        self.assertEqual(len(responses(transport.value())), 1)
        iteration(self.clock)  # the produce used up the connection's turn: the next request has the next one
        produced, metadata = responses(transport.value())
        (result,) = codec.decode_ack_produce_response(produced).results
        self.assertEqual((result.error, result.offset, result.next_offset), (0, 0, len(messages)))
        self.assertEqual(codec.decode_metadata_response(metadata).port, 0)
        self.assertEqual(self.validations, 0)
        self.assertEqual(transport.producerState, "producing")
        self.assertEqual(self.factory.budget.total, 0)

    def test_invalid_large_produce_is_refused_whole(self) -> None:
        """A set whose last message is corrupt: InvalidMessage naming its byte, nothing written."""
        data, _ = self.big_produce(corrupt=True)
        protocol, transport = self.connection()
        protocol.dataReceived(data)
        self.clock.advance(0)
        (produced,) = responses(transport.value())
        (result,) = codec.decode_ack_produce_response(produced).results
        self.assertEqual(result.error, InvalidMessage.code)
        self.assertEqual(self.logs.get_log("t", 0).end_offset, 0)
        self.assertEqual(self.validations, 0)

    def test_connection_lost_while_checking(self) -> None:
        """A client gone mid-check: nothing is appended and no call is left behind."""
        data, _ = self.big_produce()
        protocol, _ = self.connection()
        before = self.clock.getDelayedCalls()
        protocol.dataReceived(data)
        iteration(self.clock)
        protocol.connectionLost(None)
        self.assertEqual(self.clock.getDelayedCalls(), before)
        self.assertEqual(self.factory.budget.total, 0)
        self.clock.advance(1)
        self.assertIsNone(self.logs.get_log("t", 0))
