"""A bounded hypothesis fuzz of the broker's frame handling: random frames (valid requests, damaged message
sets, garbage, oversized prefixes), cut at random points and interleaved over several real BrokerProtocols
on StringTransports sharing one factory, over real logs on disk.

It asserts: no exception escapes (nor is logged as a handler failure), the buffered-bytes bound holds (plus
the first read of each connection the budget stopped), and everything stored reads back whole: every entry
CRC-valid (L{scan}) and every message decodable, compressed ones decompressed (L{iter_messages})."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from twlog.protocol import codec
from twlog.protocol.codec import (
    ACK_APPENDED,
    ACK_NONE,
    AckProduceRequest,
    FetchRequest,
    MetadataRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceRequest,
    WaitFetchRequest,
)
from twlog.protocol.factory import BrokerFactory
from twlog.storage.message import CODEC_GZIP, CODEC_NONE, encode_message_set, iter_messages, scan

from .test_server import BrokerTestMixin

MAX_REQUEST = 4096
LIMIT = 8192
CHUNK = 700  # the largest "read" the fuzz delivers

payloads = st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=6)


@st.composite
def message_sets(draw) -> bytes:
    data = bytearray(encode_message_set(draw(payloads), draw(st.sampled_from([CODEC_NONE, CODEC_GZIP]))))
    damage = draw(st.sampled_from(["none", "none", "none", "none", "attributes", "byte", "truncate"]))
    if damage == "attributes" and data[4] == 1:  # magic 1: the attributes byte is outside the CRC
        data[5] = draw(st.integers(0, 255))
    elif damage == "attributes":  # magic 0: make it magic 1 with random attributes, CRC still valid
        data = bytearray(struct.pack(">ib", struct.unpack_from(">i", data)[0] + 1, 1)) + bytes(
            [draw(st.integers(0, 255))]) + data[5:]
    elif damage == "byte" and data:
        data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    elif damage == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    return bytes(data)


topics = st.sampled_from(["t", "u"])
partitions = st.sampled_from([0, 0, 1, 2])


@st.composite
def frames(draw) -> bytes:
    kind = draw(st.sampled_from(["produce", "produce", "ack", "ack", "multi", "fetch", "wait", "offsets",
                                 "metadata", "garbage", "oversize", "short"]))
    if kind == "garbage":
        body = draw(st.binary(max_size=200))
    elif kind == "oversize":
        return struct.pack(">I", draw(st.integers(MAX_REQUEST + 1, 2**32 - 1))) + draw(st.binary(max_size=50))
    elif kind == "short":
        return draw(st.binary(max_size=3))
    else:
        def produce():
            return ProduceRequest(draw(topics), draw(partitions), draw(message_sets()))

        request = {
            "produce": lambda: produce(),
            "ack": lambda: AckProduceRequest(draw(st.sampled_from([ACK_NONE, ACK_APPENDED])), 100,
                                             tuple(produce() for _ in range(draw(st.integers(1, 3))))),
            "multi": lambda: MultiProduceRequest(tuple(produce() for _ in range(draw(st.integers(1, 3))))),
            "fetch": lambda: FetchRequest(draw(topics), draw(partitions), draw(st.integers(-5, 3000)),
                                          draw(st.integers(-1, 5000))),
            "wait": lambda: WaitFetchRequest(draw(st.integers(0, 50)), draw(st.integers(0, 100)),
                                             (FetchRequest(draw(topics), draw(partitions), 0, 1000),)),
            "offsets": lambda: OffsetsRequest(draw(topics), draw(partitions), draw(st.sampled_from([-1, -2, 0])),
                                              draw(st.integers(-1, 5))),
            "metadata": lambda: MetadataRequest(tuple(draw(st.lists(topics, max_size=2)))),
        }[kind]()
        body = codec.encode_request(request)
        if draw(st.integers(0, 5)) == 0 and body:  # now and then, a damaged body
            cut = draw(st.integers(0, len(body)))
            body = body[:cut] + draw(st.binary(max_size=8))
    return struct.pack(">I", len(body)) + body


class FrameFuzzTests(BrokerTestMixin, SynchronousTestCase):
    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        streams=st.lists(st.lists(frames(), max_size=8), min_size=1, max_size=3),
        cuts=st.lists(st.integers(1, CHUNK), min_size=1, max_size=40),
        order=st.lists(st.integers(0, 2), min_size=1, max_size=40),
    )
    def test_random_frames(self, streams, cuts, order) -> None:
        self.make_broker(max_request_bytes=MAX_REQUEST, max_buffered_request_bytes=LIMIT, max_inflight_per_connection=3,
                         segment_bytes=2048, max_message_bytes=1024)
        try:
            self.run_streams(streams, cuts, order)
        finally:
            self.logs.close()

    def run_streams(self, streams, cuts, order) -> None:
        factory = BrokerFactory(self.broker)
        connections = []
        for data in streams:
            protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 9))
            transport = StringTransport()
            protocol.makeConnection(transport)
            connections.append([protocol, transport, b"".join(data)])
        step = 0
        while True:
            ready = [c for c in connections if c[2] and c[1].producerState == "producing" and not c[1].disconnecting]
            if not ready:
                break
            conn = ready[order[step % len(order)] % len(ready)]
            size = cuts[step % len(cuts)]
            chunk, conn[2] = conn[2][:size], conn[2][size:]
            conn[0].dataReceived(chunk)  # nothing may escape
            step += 1
            self.clock.advance(0.05)
        self.assertLessEqual(factory.budget.peak, LIMIT + len(connections) * CHUNK)
        self.clock.advance(1)
        for protocol, _, _ in connections:
            protocol.connectionLost(None)
        self.assertEqual(factory.budget.total, 0)
        self.assertEqual(self.flushLoggedErrors(), [])
        for (topic, partition), log in self.logs.logs().items():
            for segment in log.segments:
                data = segment.pread(0, segment.size) if segment.written == segment.size else None
                if data is None:
                    segment.write_out()
                    data = segment.pread(0, segment.size)
                result = scan(data, 1024)
                self.assertEqual((result.valid_bytes, result.problem), (len(data), None), f"{topic}-{partition}")
                list(iter_messages(data, segment.base_offset))  # every message decodes, compressed ones too
