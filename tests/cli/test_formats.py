"""Tests for how twlog consume prints a message: value lines, JSON, and the kcat-like --format."""

from __future__ import annotations

import argparse
import base64
import json

from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.formats import compile_format, format_option, json_line, message_json


class FormatTests(SynchronousTestCase):
    def test_fields_and_escapes(self) -> None:
        """%t %p %o %s %S, %%, \\n and \\t print as kcat prints them."""
        formatter = compile_format(r"%t %p@%o %S:%s%%\t|\n")
        self.assertEqual(formatter("clicks", "1-0", 42, b"hello"), b"clicks 1-0@42 5:hello%\t|\n")

    def test_literal_text_and_utf8(self) -> None:
        """Other characters are copied, encoded as UTF-8; the value stays bytes as stored."""
        self.assertEqual(compile_format("→%s")("t", "0-0", 0, b"\xff"), "→".encode() + b"\xff")

    def test_unknown_field_names_the_accepted_ones(self) -> None:
        """An unknown % field or escape is one message naming it and listing what is accepted."""
        for bad, piece in (("%x", "'%x'"), (r"\q", r"'\\q'")):
            e = self.assertRaises(ValueError, compile_format, bad)
            self.assertIn(f"{piece} is not one of %t (topic), %p (partition)", str(e))
        self.assertIn("ends with a lone '%'", str(self.assertRaises(ValueError, compile_format, "abc%")))
        self.assertRaises(argparse.ArgumentTypeError, format_option, "%x")


class JsonTests(SynchronousTestCase):
    def test_text_value(self) -> None:
        """A UTF-8 value is text: topic, partition name, offset, value."""
        self.assertEqual(json.loads(json_line("clicks", "1-0", 7, "é".encode())),
                         {"topic": "clicks", "partition": "1-0", "offset": 7, "value": "é"})

    def test_binary_value_is_base64(self) -> None:
        """A value that is not UTF-8 is base64, said by "encoding"."""
        record = message_json("t", "0-0", 0, b"\xff\x00")
        self.assertEqual(record["encoding"], "base64")
        self.assertEqual(base64.b64decode(record["value"]), b"\xff\x00")
        self.assertTrue(json_line("t", "0-0", 0, b"\xff").endswith(b"}\n"))
