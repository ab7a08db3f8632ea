"""Tests for C{twlog bench hostile}: its percentiles, the frames it dribbles, its table, its command line."""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from twlog.bench.hostile import PhaseRow, dribble_body, format_hostile_table, percentile, rss_bytes
from twlog.cli.main import build_parser
from twlog.errors import MalformedRequest
from twlog.protocol import codec


class HostileBenchTests(SynchronousTestCase):
    def test_percentile(self) -> None:
        """Nearest-rank percentiles: p50 and p99 of 1..100 are 50 and 99; the max is the last."""
        values = list(range(100, 0, -1))
        self.assertEqual((percentile(values, 0.5), percentile(values, 0.99), percentile(values, 1.0)), (50, 99, 100))
        self.assertEqual(percentile([7.0], 0.99), 7.0)
        self.assertNotEqual(percentile([], 0.5), percentile([], 0.5))  # NaN

    def test_dribbled_frame_is_a_valid_start(self) -> None:
        """The dribbled body is an ACK_PRODUCE whose one set fills the frame: only its end is missing,
        so the broker cannot refuse it early."""
        body = dribble_body(100_000)
        self.assertEqual(len(body), 100_000)
        request = codec.decode_request(body)
        self.assertIsInstance(request, codec.AckProduceRequest)
        self.assertEqual(len(request.produces[0].messages) + len(codec.encode_request(
            codec.AckProduceRequest(codec.ACK_APPENDED, 10_000, (codec.ProduceRequest("healthy", 1, b""),)))),
            100_000)
        self.assertRaises(MalformedRequest, codec.decode_request, body[:-1])

    def test_rss_of_this_process(self) -> None:
        """VmRSS and VmHWM of a live process are read from /proc; a missing process reads as 0."""
        self.assertGreater(rss_bytes(os.getpid()), 1_000_000)
        self.assertGreaterEqual(rss_bytes(os.getpid(), "VmHWM"), rss_bytes(os.getpid()) // 2)
        self.assertEqual(rss_bytes(2**22 + 12345), 0)

    def test_table(self) -> None:
        """The table has a row per phase with latencies in ms, and the memory line against the bound."""
        rows = [PhaseRow("alone", (0.001,) * 10, (0.002,) * 10, 40_000_000),
                PhaseRow("8 dribbling", (0.001,) * 10, (0.003,) * 10, 250_000_000, 400_000_000)]
        table = format_hostile_table(rows, 268_435_456, 251_000_000, 42).text()
        self.assertIn("broker process 42", table)
        self.assertRegex(table, r"8 dribbling\s+20\s+1\.00\s+1\.00\s+1\.00\s+3\.00\s+3\.00\s+3\.00\s+250\.0")
        self.assertIn("210.0 MB over the healthy-only peak; bound (--max-buffered-request-bytes) 268.4 MB", table)

    def test_command_line(self) -> None:
        """The defaults are the issue's scenario: 8 clients, 95 MiB frames, 20 s, the broker's own bound."""
        args = build_parser().parse_args(["bench", "hostile"])
        self.assertEqual((args.clients, args.frame_mb, args.seconds, args.max_buffered_mb, args.run),
                         (8, 95, 20.0, None, "twlog.bench.hostile:main_hostile"))
        args = build_parser().parse_args(["bench", "hostile", "--clients", "2", "--frame-mb", "1",
                                          "--seconds", "0.5", "--max-buffered-mb", "4"])
        self.assertEqual((args.clients, args.frame_mb, args.seconds, args.max_buffered_mb), (2, 1, 0.5, 4))
