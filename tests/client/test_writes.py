"""Tests for L{FrameWriter}: fire-and-forget frames gathered into one write, requests in order behind them."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from twlog.client.writes import GATHER_BYTES, FrameWriter


class CountingTransport(StringTransport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        super().write(data)


def writer() -> tuple[FrameWriter, CountingTransport, Clock]:
    clock = Clock()
    w = FrameWriter(clock)
    w.attach(CountingTransport())
    return w, w.transport, clock


class FrameWriterTests(SynchronousTestCase):
    def test_one_write_per_turn(self) -> None:
        """Frames gathered in one turn are one write at the start of the next; one timer, then none."""
        w, transport, clock = writer()
        for i in range(10):
            w.gather(b"frame %d;" % i)
        self.assertEqual((transport.writes, len(clock.getDelayedCalls())), ([], 1))
        self.assertEqual(w.gathered, 80)
        clock.advance(0)
        self.assertEqual(transport.writes, [b"".join(b"frame %d;" % i for i in range(10))])
        self.assertEqual((w.gathered, clock.getDelayedCalls()), (0, []))

    def test_threshold_writes_at_once(self) -> None:
        """Reaching GATHER_BYTES writes everything gathered now, and cancels the turn's timer."""
        w, transport, clock = writer()
        w.gather(b"a" * (GATHER_BYTES - 1))
        w.gather(b"b")
        self.assertEqual(transport.writes, [b"a" * (GATHER_BYTES - 1) + b"b"])
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_request_goes_after_gathered(self) -> None:
        """A request's frame is written now, in one write with the frames gathered before it."""
        w, transport, clock = writer()
        w.gather(b"produce;")
        w.write(b"request;")
        self.assertEqual(transport.writes, [b"produce;request;"])
        self.assertEqual(clock.getDelayedCalls(), [])
        w.write(b"alone;")
        self.assertEqual(transport.writes[-1], b"alone;")

    def test_drop(self) -> None:
        """A lost connection: what is gathered is forgotten, and the timer never writes."""
        w, transport, clock = writer()
        w.gather(b"lost")
        w.drop()
        clock.advance(0)
        self.assertEqual((transport.writes, w.gathered), ([], 0))

    def test_flush_of_nothing(self) -> None:
        """flush() with nothing gathered writes nothing."""
        w, transport, _ = writer()
        w.flush()
        self.assertEqual(transport.writes, [])
