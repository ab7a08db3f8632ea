"""Tests for twlog.protocol.metadata: OFFSETS and METADATA, through a Broker (CLUSTER_METADATA, CREATE_TOPIC and
BOUNDARIES have their own modules)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.errors import (
    InvalidTopic,
    WrongPartition,
)
from twlog.protocol import codec
from twlog.protocol.codec import (
    MetadataRequest,
    OffsetsRequest,
    OffsetsResponse,
    ProduceRequest,
)
from twlog.storage.message import encode_message_set

from .test_server import BrokerTestMixin


class MetadataHandlerTests(BrokerTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.make_broker()

    def test_offsets(self) -> None:
        """OFFSETS answers latest and earliest, and [0] for an unwritten partition."""
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"a"])))
        latest = codec.decode_offsets_response(self.broker.offsets(OffsetsRequest("t", 0, -1, 5)))
        earliest = codec.decode_offsets_response(self.broker.offsets(OffsetsRequest("t", 0, -2, 5)))
        fresh = codec.decode_offsets_response(self.broker.offsets(OffsetsRequest("t", 1, -1, 5)))
        bad = codec.decode_offsets_response(self.broker.offsets(OffsetsRequest("t", 7, -1, 5)))
        self.assertEqual((latest, earliest, fresh), (OffsetsResponse(0, (10, 0)), OffsetsResponse(0, (0,)),
                                                     OffsetsResponse(0, (0,))))
        self.assertEqual(bad, OffsetsResponse(WrongPartition.code, ()))

    def test_metadata(self) -> None:
        """METADATA names this broker and each topic's partition count (the count a new topic would get)."""
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"a"])))
        self.broker.port = 9999
        everything = codec.decode_metadata_response(self.broker.metadata(MetadataRequest()))
        self.assertEqual((everything.broker_id, everything.host, everything.port), (0, "127.0.0.1", 9999))
        self.assertEqual([(t.topic, t.partitions) for t in everything.topics], [("t", 2)])
        named = codec.decode_metadata_response(self.broker.metadata(MetadataRequest(("new", "a/b"))))
        self.assertEqual(
            [(t.topic, t.error, t.partitions) for t in named.topics], [("new", 0, 2), ("a/b", InvalidTopic.code, 0)]
        )
