"""Tests for C{twlog bench frames}: the frame it sends, its table, its command line (no broker)."""

from __future__ import annotations

import struct

from twisted.trial.unittest import SynchronousTestCase

from twlog.bench.frames import FrameRow, format_frames_table, produce_frame
from twlog.cli.main import build_parser
from twlog.protocol import codec
from twlog.storage.message import iter_messages


class FramesBenchTests(SynchronousTestCase):
    def test_frame(self) -> None:
        """One acknowledged produce of about the size asked for, of valid messages."""
        frame = produce_frame(1_000_000)
        (size,) = struct.unpack_from(">i", frame)
        self.assertEqual(size, len(frame) - 4)
        self.assertLess(abs(len(frame) - 1_000_000), 100_010)
        request = codec.decode_request(frame[4:])
        self.assertEqual(len(list(iter_messages(request.produces[0].messages, 0))), 9)

    def test_table(self) -> None:
        table = format_frames_table([FrameRow(1_000_000, 0.002, 0.5, 1.5), FrameRow(100_000_000, 0.3, 0.5, 2.5)], 7)
        self.assertEqual(table.rows[1][3], "1.50")
        self.assertIn("broker process 7", table.text())

    def test_command_line(self) -> None:
        args = build_parser().parse_args(["bench", "frames", "--sizes", "1,5", "--total-mb", "10"])
        self.assertEqual((args.sizes, args.total_mb, args.run), ([1, 5], 10, "twlog.bench.frames:main_frames"))
