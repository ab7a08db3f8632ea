"""Issue 21, finding 2, over real TCP on 127.0.0.1: clients that send most of a large frame and stop hold the
request budget only until --request-timeout-s; a legitimate produce waiting for room is answered within 1 s of
the budget freeing."""

from __future__ import annotations

import struct
import time

from twisted.trial.unittest import TestCase

from tests.integration.broker import raw_connect, start_broker, wait_until
from twlog.protocol import codec
from twlog.protocol.codec import ACK_APPENDED, AckProduceRequest, ProduceRequest
from twlog.storage.message import encode_message_set

MiB = 1024 * 1024


def framed(request) -> bytes:
    data = codec.encode_request(request)
    return struct.pack(">i", len(data)) + data


class HalfSentFrameTests(TestCase):
    timeout = 60

    async def test_legitimate_produce_after_the_stalled_frames_time_out(self) -> None:
        """Two clients send all but 64 KiB of a 2 MiB frame and stop: together they fill the 4 MiB budget, and a
        legitimate 1.5 MiB produce waits. At --request-timeout-s (1 s here) both are closed, and the produce is
        answered, stored, within 1 s of that."""
        service = await start_broker(self, max_request_bytes=2 * MiB, max_buffered_request_bytes=4 * MiB,
                                     max_message_bytes=2 * MiB, request_timeout_s=1.0)
        budget, factory = service.factory.budget, service.factory
        stalled = framed(ProduceRequest("hog", 0, encode_message_set([b"h" * (2 * MiB - 100)])))
        hogs = [await raw_connect(self, service) for _ in range(2)]
        for hog in hogs:
            hog.send(stalled[: len(stalled) - 64 * 1024])
        await wait_until(lambda: budget.total >= 2 * (len(stalled) - 64 * 1024 - 4))
        legit = await raw_connect(self, service)
        messages = encode_message_set([b"ok" * 1000] * 750)
        legit.send(AckProduceRequest(ACK_APPENDED, 5000, (ProduceRequest("ok", 0, messages),)))
        answered = legit.responses(1)
        await wait_until(lambda: budget.stopped == 1)
        self.assertFalse(answered.called)
        closed_at: list[float] = []
        for hog in hogs:
            hog.closed.addCallback(lambda _: closed_at.append(time.monotonic()))
        (answer,) = await answered
        answered_at = time.monotonic()
        self.assertEqual(len(closed_at), 2)  # the hogs were closed first
        self.assertLess(answered_at - max(closed_at), 1.0)
        (result,) = codec.decode_ack_produce_response(answer).results
        self.assertEqual((result.error, result.offset, result.next_offset), (0, 0, len(messages)))
        self.assertEqual(factory.late_frames.total, 2)
        self.assertIsNone(service.logs.get_log("hog", 0))
        await wait_until(lambda: budget.total == 0)
