"""Unit tests for the bulk produce path (twlog.protocol.runs): runs of PRODUCE frames taken at once give exactly
what the per-frame path gives (the log's bytes, segments and offsets, the request and error counts, the messages
and bytes in, the log lines, the close of a connection after a malformed frame), for either kernel; and a run
counts against the connection's turn.  Real BrokerProtocols on StringTransports and a task.Clock."""

from __future__ import annotations

import os

from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.logger import Logger, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from twlog.protocol import codec, runs
from twlog.protocol.authorization import RequestGuard
from twlog.protocol.codec import FetchRequest, OffsetsRequest, ProduceRequest
from twlog.protocol.factory import BrokerFactory
from twlog.protocol.frames import frame as raw_frame
from twlog.protocol.runs import RUN_FRAMES_PER_TURN_FRAME
from twlog.security.acls import Authorizer, Operation
from twlog.storage import kernel
from twlog.storage.message import CODEC_GZIP, encode_message_set

from ..fakes import iteration
from .test_authorization import ALICE, acl_map, allow
from .test_server import BrokerTestMixin, frame, responses


def produce(topic: str, partition: int, *payloads: bytes) -> bytes:
    return frame(ProduceRequest(topic, partition, encode_message_set(list(payloads))))


def stream(count: int, topic: str = "t", partition: int = 0, size: int = 50) -> bytes:
    return b"".join(produce(topic, partition, b"%d " % i + b"m" * size) for i in range(count))


def bad_crc(data: bytes) -> bytes:
    spoiled = bytearray(data)
    spoiled[-1] ^= 1
    return bytes(spoiled)


class Outcome(BrokerTestMixin):
    """Feed the same reads to a broker through the bulk path and frame by frame; compare what they did."""

    def outcome(self, reads: list[bytes], bulk: bool, guard=None, **overrides) -> dict:
        self.make_broker(**overrides)
        events: list[dict] = []
        self.broker._producing._log = Logger(observer=events.append)
        if guard is not None:
            self.broker.guard = RequestGuard(Authorizer(acl_map(*guard), ()), self.clock, self.broker.count_error,
                                             lambda topic: True, self.broker.config.log.partitions_for)
            self.broker.guard.dropped._log = Logger(observer=events.append)
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"first"])))  # (t-0 exists)
        factory = BrokerFactory(self.broker)
        protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 4000))
        protocol.principal = ALICE
        protocol._log = Logger(observer=events.append)
        transport = StringTransport()
        protocol.makeConnection(transport)
        taker = protocol.take_run
        if not bulk:
            protocol.take_run = None
        for data in reads:
            protocol.dataReceived(data)
            for _ in range(100):  # the turns it waits for
                if not factory.turns.waiting:
                    break
                iteration(self.clock)
        files = {}
        for log in list(self.logs._logs.values()):
            log.write_out()
            for name in sorted(os.listdir(log.directory)):
                if name.endswith(".log"):
                    with open(os.path.join(log.directory, name), "rb") as f:
                        files[os.path.basename(log.directory) + "/" + name] = f.read()
        return {
            "files": files, "requests": dict(factory.requests), "errors": dict(self.broker.error_counts),
            "messages_in": dict(self.broker.messages_in), "bytes_in": dict(self.broker.bytes_in),
            "lines": [formatEvent(e) for e in events], "answers": responses(transport.value()),
            "closing": transport.disconnecting, "state": protocol.state,
            "bulk frames": taker.__self__.frames if bulk else 0,
            "refusals": dict(self.broker.guard.refusals) if guard is not None else None,
        }

    def same(self, reads: list[bytes], **kwargs) -> dict:
        """The outcome of C{reads}, the same through both paths and both kernels; the bulk one's, with its count."""
        per_frame = self.outcome(reads, False, **kwargs)
        self.assertEqual(per_frame["bulk frames"], 0)
        results = []
        for chosen in (kernel.pure, kernel.compiled or kernel.pure):
            self.patch(runs, "produce_frames", chosen.produce_frames)
            self.patch(codec, "VIEW_BYTES", codec.VIEW_BYTES)
            results.append(self.outcome(reads, True, **kwargs))
        for bulk in results:
            taken = bulk.pop("bulk frames")
            expected = {k: v for k, v in per_frame.items() if k != "bulk frames"}
            for key in expected:
                self.assertEqual(bulk[key], expected[key], key)
            bulk["bulk frames"] = taken
        self.assertEqual(results[0]["bulk frames"], results[1]["bulk frames"])
        return results[0]


class SameOutcomeTests(Outcome, SynchronousTestCase):
    def test_a_run_of_one_partition(self) -> None:
        """Many frames in one read: taken in bulk, the log holds the same bytes, every count is per request."""
        got = self.same([stream(40)], segment_bytes=1024 * 1024)
        self.assertEqual(got["bulk frames"], 40)
        self.assertEqual(got["requests"], {codec.PRODUCE: 40})
        self.assertEqual(len(got["files"]), 1)

    def test_runs_split_where_the_segment_rolls(self) -> None:
        """A run larger than the active segment's room is cut where the sets would have rolled it."""
        got = self.same([stream(100, size=100)])  # 4 KB segments
        self.assertEqual(got["bulk frames"], 100)
        self.assertEqual(len(got["files"]), 3)

    def test_mixed_topics_and_partitions(self) -> None:
        reads = [stream(5) + stream(3, "t", 1) + stream(4, "u") + stream(2) + stream(6, "t", 1)]
        got = self.same(reads, segment_bytes=1024 * 1024)
        self.assertEqual(got["requests"], {codec.PRODUCE: 20})
        self.assertEqual(sorted(got["files"]), ["t-0/" + n for n in ["00000000000000000000.log"]] +
                         ["t-1/00000000000000000000.log", "u-0/00000000000000000000.log"])

    def test_a_malformed_frame_closes_after_the_frames_before_it(self) -> None:
        """A malformed produce in the middle: the frames before it are appended, it is answered with its error
        and the connection closes; nothing after it is read."""
        reads = [stream(10) + raw_frame(b"\x00\x00\x00\x01t") + stream(10, "t", 1)]
        got = self.same(reads)
        self.assertEqual((got["bulk frames"], got["closing"], len(got["answers"])), (10, True, 1))
        self.assertNotIn("t-1/00000000000000000000.log", got["files"])

    def test_an_invalid_set_is_refused_alone(self) -> None:
        """A set with a bad CRC in the middle of a run is refused (logged, counted) as always; the frames after
        it are appended."""
        got = self.same([stream(10) + bad_crc(produce("t", 0, b"bad")) + stream(10, "t", 1)],
                        segment_bytes=1024 * 1024)
        self.assertEqual(got["bulk frames"], 20)
        self.assertEqual(len(got["lines"]), 1)
        self.assertIn("CRC mismatch", got["lines"][0])

    def test_frames_the_walk_does_not_take(self) -> None:
        """Compressed sets, a wrong partition, a new topic, another request type in between: each goes the
        per-frame way, with the same outcome."""
        gzip = frame(ProduceRequest("t", 0, encode_message_set([b"z", b"zz"], CODEC_GZIP)))
        reads = [stream(3) + gzip + stream(2, "t", 9) + stream(3, "new") + frame(OffsetsRequest("t", 0, -1, 1))
                 + stream(4)]
        got = self.same(reads, segment_bytes=1024 * 1024)
        self.assertEqual(len(got["answers"]), 1)
        self.assertEqual(len(got["lines"]), 2)  # the two sets for partition 9
        self.assertEqual(got["messages_in"], {"t": 1 + 3 + 1 + 4, "new": 3})  # (a compressed set is one message)
        self.assertEqual(got["bulk frames"], 3 + 3 + 4)

    def test_a_partial_trailing_frame(self) -> None:
        """A frame cut across reads (and reads cut anywhere) is taken once it is whole."""
        data = stream(30)
        got = self.same([data[:1000], data[1000:1001], data[1001:3333], data[3333:]], segment_bytes=1024 * 1024)
        self.assertEqual(got["requests"], {codec.PRODUCE: 30})
        self.assertGreater(got["bulk frames"], 20)

    def test_acl_refusal_mid_run(self) -> None:
        """A run the ACLs refuse goes frame by frame: each dropped and counted; the allowed runs around it are
        appended in bulk."""
        got = self.same([stream(5) + stream(4, "u") + stream(5)], guard=[allow(Operation.WRITE, name="t")],
                        segment_bytes=1024 * 1024)
        self.assertEqual(got["bulk frames"], 10)
        self.assertEqual(got["refusals"], {("Write", "Topic"): 4})
        self.assertNotIn("u-0/00000000000000000000.log", got["files"])

    def test_a_topic_that_is_not_utf8(self) -> None:
        bad = b"\x00\x00\x00\x01\xff" + b"\x00\x00\x00\x00" + len(encode_message_set([b"x"])).to_bytes(4, "big")
        bad += encode_message_set([b"x"])
        got = self.same([stream(3) + raw_frame(bad) + stream(3)])
        self.assertEqual((got["bulk frames"], got["closing"]), (3, True))


class TurnTests(BrokerTestMixin, SynchronousTestCase):
    def setUp(self) -> None:
        self.make_broker(segment_bytes=16 * 1024 * 1024)
        self.broker.produce(ProduceRequest("t", 0, encode_message_set([b"first"])))
        self.factory = BrokerFactory(self.broker)
        self.factory.turns.frames_per_turn = 4
        self.port = 5000

    def connection(self):
        self.port += 1
        protocol = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", self.port))
        transport = StringTransport()
        protocol.makeConnection(transport)
        return protocol, transport

    def test_a_run_counts_against_the_turn(self) -> None:
        """Each frame of a turn is good for RUN_FRAMES_PER_TURN_FRAME produce frames in bulk: a flood of them is
        handled a turn at a time, and another connection's request is answered between two turns."""
        flooder, transport = self.connection()
        per_turn = 4 * RUN_FRAMES_PER_TURN_FRAME
        flooder.dataReceived(stream(3 * per_turn + 5))
        self.assertEqual(self.factory.requests, {codec.PRODUCE: per_turn})
        self.assertEqual(transport.producerState, "paused")
        healthy, answers = self.connection()
        healthy.dataReceived(frame(FetchRequest("t", 0, 0, 65536)))
        self.assertEqual(len(responses(answers.value())), 1)
        self.assertEqual(self.factory.requests[codec.PRODUCE], per_turn)
        iteration(self.clock)
        self.assertEqual(self.factory.requests[codec.PRODUCE], 2 * per_turn)
        for _ in range(3):
            iteration(self.clock)
        self.assertEqual(self.factory.requests[codec.PRODUCE], 3 * per_turn + 5)
        self.assertEqual((self.factory.turns.waiting, transport.producerState), (0, "producing"))

    def test_a_run_ends_a_turn_by_bytes(self) -> None:
        self.factory.turns.bytes_per_turn = 2000
        protocol, _ = self.connection()
        one = produce("t", 0, b"m" * 200)
        protocol.dataReceived(one * 30)
        taken = self.factory.requests[codec.PRODUCE]
        self.assertEqual(taken, -(-2000 // (len(one) - 4)))
        iteration(self.clock)
        self.assertEqual(self.factory.requests[codec.PRODUCE], 2 * taken)
