"""The broker over real TCP on 127.0.0.1: zero-copy fetches and every kind of bad input."""

from __future__ import annotations

import os
import struct

from twisted.internet import reactor
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import TestCase

from tests.integration.broker import raw_connect, start_broker, wait_until
from twlog.errors import (
    UNKNOWN,
    BrokerShuttingDown,
    InvalidMessage,
    InvalidRequest,
    InvalidTopic,
    OffsetNotOnBoundary,
    OffsetOutOfRange,
    RequestTooLarge,
    WrongPartition,
)
from twlog.protocol import codec, sendfile
from twlog.protocol.codec import (
    ACK_APPENDED,
    ACK_FLUSHED,
    AckProduceRequest,
    FetchRequest,
    MetadataRequest,
    OffsetsRequest,
    ProduceRequest,
    WaitFetchRequest,
)
from twlog.protocol.connection import BrokerProtocolState
from twlog.storage.manager import CLEAN_SHUTDOWN_MARKER
from twlog.storage.message import encode_message_set, iter_messages
from twlog.storage.segment import segment_name


def payloads(n: int, size: int = 200, start: int = 0) -> list[bytes]:
    """n distinct payloads of C{size} bytes."""
    return [(b"%010d" % i).ljust(size, b"x") for i in range(start, start + n)]


def flushed_produce(topic: str, partition: int, items: list[bytes]) -> AckProduceRequest:
    """An acknowledged produce that answers once the data is fsynced (visible)."""
    return AckProduceRequest(ACK_FLUSHED, 5000, (ProduceRequest(topic, partition, encode_message_set(items)),))


class LogLines:
    """Collect formatted log lines while a test runs."""

    def __init__(self, testcase) -> None:
        from twisted.logger import formatEvent

        self.lines: list[str] = []
        observer = lambda event: self.lines.append(formatEvent(event))  # noqa: E731
        globalLogPublisher.addObserver(observer)
        testcase.addCleanup(globalLogPublisher.removeObserver, observer)

    def matching(self, text: str) -> list[str]:
        return [line for line in self.lines if text in line]


class ZeroCopyTests(TestCase):
    async def test_fetch_uses_sendfile(self) -> None:
        """Log bytes of a TCP fetch go out through sendfile(2), none copied through Python."""
        calls = []
        real = sendfile.sendfile

        def counting(out_fd, in_fd, offset, count):
            sent = real(out_fd, in_fd, offset, count)
            calls.append(sent)
            return sent

        self.patch(sendfile, "sendfile", counting)
        service = await start_broker(self, segment_bytes=10 * 1024 * 1024)
        client = await raw_connect(self, service)
        items = payloads(5000)
        client.send(flushed_produce("t", 0, items))
        await client.responses(1)
        client.send(FetchRequest("t", 0, 0, 2 * 1024 * 1024))
        frames = await client.responses(2)
        result = codec.decode_fetch_response(frames[1])
        self.assertEqual([m.payload for m in iter_messages(result.messages, 0)], items)
        self.assertEqual(sum(calls), 5000 * 209)
        (protocol,) = _broker_protocols(service)
        self.assertEqual((protocol.sendfile_bytes, protocol.copied_bytes), (5000 * 209, 0))

    async def test_large_fetch_survives_a_full_socket(self) -> None:
        """A fetch larger than the socket buffer finishes: sendfile resumes when the socket drains."""
        service = await start_broker(self, segment_bytes=64 * 1024 * 1024)
        client = await raw_connect(self, service)
        items = payloads(20_000, 500)
        for start in range(0, 20_000, 1000):
            client.send(flushed_produce("t", 0, items[start : start + 1000]))
        await client.responses(20)
        client.send(FetchRequest("t", 0, 0, 64 * 1024 * 1024))
        frames = await client.responses(21)
        result = codec.decode_fetch_response(frames[20])
        self.assertEqual(len(result.messages), 20_000 * 509)
        self.assertEqual([m.payload for m in iter_messages(result.messages, 0)][-1], items[-1])


class ShutdownTests(TestCase):
    async def test_stop_drops_connections_before_closing_logs(self) -> None:
        """Stopping the broker closes client connections first, so nothing is written after the marker."""
        service = await start_broker(self)
        client = await raw_connect(self, service)
        client.send(flushed_produce("t", 0, payloads(3)))
        await client.responses(1)
        await service.stopService()
        await client.closed
        log_dir = service.config.log.log_dir
        self.assertTrue(os.path.exists(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER)))
        self.assertEqual(os.path.getsize(os.path.join(log_dir, "t-0", segment_name(0))), 3 * 209)
        self.assertRaises(BrokerShuttingDown, service.logs.get_or_create_log, "t", 0)


class BadInputTests(TestCase):
    async def setUp(self) -> None:
        self.log = LogLines(self)
        self.service = await start_broker(self, num_partitions=2, max_request_bytes=64 * 1024)
        self.client = await raw_connect(self, self.service)
        self.client.send(flushed_produce("t", 0, payloads(10)))
        await self.client.responses(1)
        self.client.frames.clear()

    async def healthy(self) -> None:
        """Another connection still gets answers and the log is intact."""
        other = await raw_connect(self, self.service)
        other.send(FetchRequest("t", 0, 0, 100_000))
        (response,) = await other.responses(1)
        result = codec.decode_fetch_response(response)
        self.assertEqual([m.payload for m in iter_messages(result.messages, 0)], payloads(10))

    async def test_oversize_frame(self) -> None:
        """A frame over max_request_bytes gets RequestTooLarge and a close, before its body is sent."""
        self.client.send(struct.pack(">ih", 10 * 1024 * 1024, codec.ACK_PRODUCE))
        (response,) = await self.client.responses(1)
        await self.client.closed
        self.assertEqual(codec.decode_error(response), RequestTooLarge.code)
        self.assertTrue(self.log.matching("exceeds the 65536-byte limit"))
        await self.healthy()

    async def test_truncated_frame_then_close(self) -> None:
        """A client that sends half a frame and leaves does no harm."""
        self.client.send(struct.pack(">i", 100) + b"\x00\x01partial")
        self.client.transport.loseConnection()
        await self.client.closed
        await self.healthy()

    async def test_unknown_request_type(self) -> None:
        """An unknown request type gets InvalidRequest, a close, and a log line naming the peer."""
        self.client.send(struct.pack(">ih", 2, 42))
        (response,) = await self.client.responses(1)
        await self.client.closed
        self.assertEqual(codec.decode_error(response), InvalidRequest.code)
        self.assertTrue(self.log.matching("malformed request: unknown request type 42"))
        await self.healthy()

    async def test_request_errors_keep_the_connection(self) -> None:
        """Bad topics, partitions and offsets get error codes and the connection stays usable: Kafka 0.7's
        codes on FETCH and OFFSETS (0.7's types), the precise ones on WAIT_FETCH."""
        fetches = [FetchRequest("../../etc", 0, 0, 100), FetchRequest("t", 2, 0, 100), FetchRequest("t", 0, 10**9, 100),
                   FetchRequest("t", 0, 7, 100)]
        self.client.send(*fetches, OffsetsRequest("t", 99, -1, 1), MetadataRequest(),
                         *(WaitFetchRequest(0, 0, (f,)) for f in fetches))
        frames = await self.client.responses(10)
        self.assertEqual(
            [codec.decode_error(f) for f in frames[:6]],
            [UNKNOWN, WrongPartition.code, OffsetOutOfRange.code, OffsetOutOfRange.code, WrongPartition.code, 0],
        )
        self.assertEqual(
            [codec.decode_multifetch_response(f).parts[0].error for f in frames[6:]],
            [InvalidTopic.code, WrongPartition.code, OffsetOutOfRange.code, OffsetNotOnBoundary.code],
        )
        await self.healthy()

    async def test_crc_mismatch_in_produce(self) -> None:
        """Produced data with a CRC mismatch is refused whole, logged, and the log is unchanged."""
        corrupt = bytearray(encode_message_set(payloads(3)))
        corrupt[50] ^= 0xFF
        self.client.send(
            ProduceRequest("t", 0, bytes(corrupt)),
            AckProduceRequest(ACK_APPENDED, 1000, (ProduceRequest("t", 0, bytes(corrupt)),)),
        )
        (response,) = await self.client.responses(1)
        (result,) = codec.decode_ack_produce_response(response).results
        self.assertEqual(result.error, InvalidMessage.code)
        self.assertEqual(len(self.log.matching("CRC mismatch")), 2)
        self.assertEqual(self.service.logs.get_log("t", 0).end_offset, 10 * 209)
        await self.healthy()

    async def test_client_vanishes_mid_response(self) -> None:
        """A client that disconnects while a large fetch is being sent leaves the broker serving others."""
        big = await start_broker(self, segment_bytes=64 * 1024 * 1024)
        client = await raw_connect(self, big)
        for start in range(0, 20_000, 2000):
            client.send(flushed_produce("t", 0, payloads(2000, 500, start)))
        await client.responses(10)
        client.transport.pauseProducing()  # stop reading: the response backs up
        client.send(FetchRequest("t", 0, 0, 10 * 1024 * 1024))
        (protocol,) = _broker_protocols(big)
        await wait_until(lambda: protocol.writing and sendfile.buffered_bytes(protocol.transport) == 0)
        client.transport.abortConnection()
        await client.closed
        other = await raw_connect(self, big)
        other.send(OffsetsRequest("t", 0, -1, 1))
        (response,) = await other.responses(1)
        self.assertEqual(codec.decode_offsets_response(response).offsets, (20_000 * 509,))

    async def test_slow_reader_is_bounded_and_isolated(self) -> None:
        """A client that never reads stalls only itself: the broker stops reading its requests."""
        self.client.send(flushed_produce("t", 1, payloads(250)))
        await self.client.responses(1)
        self.client.frames.clear()
        self.client.transport.pauseProducing()
        # Far more than max_inflight_per_connection, each answered with ~52 KB: more than the kernel's socket
        # buffers hold however densely the responses are packed (headers ride with the log bytes).
        request = FetchRequest("t", 1, 0, 100_000)
        for _ in range(400):
            self.client.send(request)
        (protocol,) = _broker_protocols(self.service)
        await wait_until(lambda: protocol.state is BrokerProtocolState.PAUSED)
        self.assertLessEqual(len(protocol._slots), self.service.config.max_inflight_per_connection)
        self.assertLess(sendfile.buffered_bytes(protocol.transport), 4 * sendfile.HIGH_WATER_BYTES)
        await self.healthy()
        self.client.transport.resumeProducing()
        frames = await self.client.responses(400)
        self.assertEqual(len(frames), 400)


def _broker_protocols(service) -> list:
    """The broker-side protocols of live connections (found through the reactor's selectables)."""
    from twlog.protocol.connection import BrokerProtocol

    found = []
    for selectable in set(reactor.getReaders() + reactor.getWriters()):
        protocol = getattr(selectable, "protocol", None)
        if isinstance(protocol, BrokerProtocol) and protocol._broker is service.broker:
            found.append(protocol)
    return found
