"""`twlog groups reset`'s options: --to or --shift, one of them."""

from __future__ import annotations

import contextlib
import io

from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.main import build_parser

RESET = ["groups", "reset", "-z", "zk:2181", "-g", "g", "-t", "t"]


class ResetOptionTests(SynchronousTestCase):
    def parse(self, *argv: str):
        return build_parser().parse_args([*RESET, *argv])

    def refused(self, *argv: str) -> str:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertRaises(SystemExit, self.parse, *argv)
        return err.getvalue()

    def test_to_or_shift(self) -> None:
        self.assertEqual((self.parse("--shift", "-5").shift, self.parse("--shift", "-5").to), (-5, None))
        self.assertEqual((self.parse("--to", "earliest").to, self.parse("--to", "earliest").shift), ("earliest", None))
        self.assertIn("one of the arguments --to --shift is required", self.refused())
        self.assertIn("not allowed with argument", self.refused("--to", "latest", "--shift", "2"))
        self.assertIn("invalid int value", self.refused("--shift", "x"))
