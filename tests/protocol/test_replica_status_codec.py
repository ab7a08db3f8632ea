"""REPLICA_STATUS (type 15): docs/protocol.md's byte layout, built by hand with struct, so it pins the wire
independently of the codec; then round trips (hypothesis), every truncated prefix, trailing bytes, negative counts,
and the documented hex example."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.protocol.test_replication_codec import (
    INT16,
    INT32,
    INT64,
    TOPICS,
    PrefixMixin,
    i16,
    i32,
    i64,
    kstr,
)
from twlog.errors import NO_ERROR, MalformedRequest, NotLeader, ProtocolViolation
from twlog.protocol.codec import decode_request, decode_response, describe_request, encode_request, expects_response
from twlog.protocol.replica_status_codec import (
    REPLICA_STATUS,
    UNKNOWN,
    FollowerStatus,
    ReplicaStatus,
    ReplicaStatusRequest,
    ReplicaStatusResponse,
    decode_replica_status_response,
    encode_replica_status_response,
)
from twlog.protocol.replication_codec import TYPES

REQUEST = ReplicaStatusRequest("clicks", (0, 3))
FRAME = i16(15) + kstr("clicks") + i16(2) + i32(0) + i32(3)
RESPONSE = ReplicaStatusResponse(NO_ERROR, (
    ReplicaStatus(0, NO_ERROR, 4, 4096, 4200, (FollowerStatus(2, 4200, 10), FollowerStatus(3, UNKNOWN, 9000))),
    ReplicaStatus(3, NotLeader.code),
))
RESPONSE_FRAME = (
    i16(0) + i16(2)
    + i32(0) + i16(0) + i32(4) + i64(4096) + i64(4200) + i16(2)
    + i32(2) + i64(4200) + i64(10) + i32(3) + i64(-1) + i64(9000)
    + i32(3) + i16(16) + i32(-1) + i64(-1) + i64(-1) + i16(0)
)


class ReplicaStatusCodecTests(PrefixMixin, SynchronousTestCase):
    def test_request_layout(self) -> None:
        """[15][topic][count][count × int32 partition]; a replication type, answered."""
        self.assertEqual(encode_request(REQUEST), FRAME)
        self.assertEqual(decode_request(FRAME), REQUEST)
        self.assertEqual(REPLICA_STATUS, 15)
        self.assertIn(REPLICA_STATUS, TYPES)
        self.assertTrue(expects_response(REQUEST))

    def test_request_prefixes_trailing_bytes_and_negative_count(self) -> None:
        self.assert_every_prefix_refused(decode_request, FRAME, MalformedRequest)
        self.assertRaises(MalformedRequest, decode_request, i16(15) + kstr("clicks") + i16(-1))

    def test_response_layout(self) -> None:
        """[error][count], then per partition [partition][error][epoch][high watermark][leader end][n] and n ×
        [replica][end][lag ms]; an error's offsets are -1 and it has no followers."""
        self.assertEqual(encode_replica_status_response(NO_ERROR, RESPONSE.partitions), RESPONSE_FRAME)
        self.assertEqual(decode_replica_status_response(RESPONSE_FRAME), RESPONSE)
        self.assertEqual(decode_response(REQUEST, RESPONSE_FRAME), RESPONSE)
        self.assertEqual(decode_replica_status_response(i16(11)), ReplicaStatusResponse(11))

    def test_response_prefixes_trailing_bytes_and_negative_counts(self) -> None:
        self.assert_every_prefix_refused(decode_replica_status_response, RESPONSE_FRAME, allowed=(2,))
        self.assertRaises(ProtocolViolation, decode_replica_status_response, i16(0) + i16(-1))
        negative = i16(0) + i16(1) + i32(0) + i16(0) + i32(1) + i64(0) + i64(0) + i16(-1)
        self.assertRaises(ProtocolViolation, decode_replica_status_response, negative)

    def test_describe(self) -> None:
        self.assertEqual(describe_request(REQUEST), "REPLICA_STATUS clicks partitions 0, 3")
        self.assertEqual(describe_request(ReplicaStatusRequest("t", ())), "REPLICA_STATUS t partitions (none)")

    @settings(max_examples=50)
    @given(TOPICS, st.lists(INT32, max_size=4), INT16,
           st.lists(st.tuples(INT32, INT16, INT32, INT64, INT64,
                              st.lists(st.tuples(INT32, INT64, INT64), max_size=3)), max_size=4))
    def test_round_trips(self, topic, partitions, error, statuses) -> None:
        request = ReplicaStatusRequest(topic, tuple(partitions))
        self.assertEqual(decode_request(encode_request(request)), request)
        parts = tuple(ReplicaStatus(*head, tuple(FollowerStatus(*f) for f in followers))
                      for *head, followers in statuses)
        frame = encode_replica_status_response(error, parts)
        self.assertEqual(decode_replica_status_response(frame), ReplicaStatusResponse(error, parts))


class DocumentedExampleTest(SynchronousTestCase):
    def test_replica_status_example(self) -> None:
        """docs/protocol.md's example is what the codec writes and reads."""
        text = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text()
        section = text[text.index("### 15 REPLICA_STATUS"):]
        block = section[section.index("```\nrequest:") + 4:]
        request, response = (bytes.fromhex(" ".join(part.replace("request:", "").split()))
                             for part in block[:block.index("```")].split("response:"))
        value = ReplicaStatusRequest("clicks", (0,))
        self.assertEqual(request, i32(len(request) - 4) + encode_request(value))
        self.assertEqual(decode_request(request[4:]), value)
        answer = ReplicaStatusResponse(NO_ERROR, (ReplicaStatus(
            0, NO_ERROR, 4, 4107, 4107, (FollowerStatus(2, 4107, 0), FollowerStatus(0, 3000, 12500))),))
        self.assertEqual(response, i32(len(response) - 4) + encode_replica_status_response(NO_ERROR,
                                                                                           answer.partitions))
        self.assertEqual(decode_replica_status_response(response[4:]), answer)
