"""The option-value parsers shared by the twistd plugins (L{twlog.usage_values})."""

from __future__ import annotations

from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from twlog.usage_values import seconds, whole_number


class _Refusals(SynchronousTestCase):
    def refused(self, parse, text: str) -> str:
        """The one line C{parse} refuses C{text} with."""
        with self.assertRaises(usage.UsageError) as caught:
            parse(text)
        return str(caught.exception)


class WholeNumberTests(_Refusals):
    def test_accepts_underscores_and_bounds(self) -> None:
        self.assertEqual(whole_number("port", 0, 65535)("8_080"), 8080)
        self.assertEqual(whole_number("port", 0, 65535)("65535"), 65535)
        self.assertEqual(whole_number("n", 1)("1"), 1)
        self.assertEqual(whole_number("n")("-5"), -5)

    def test_refusals_name_the_option(self) -> None:
        self.assertEqual(self.refused(whole_number("port", 0, 65535), "http"),
                         "--port must be a whole number, not 'http'")
        self.assertEqual(self.refused(whole_number("port", 0, 65535), "70000"),
                         "--port must be from 0 to 65535, not 70000")
        self.assertEqual(self.refused(whole_number("backlog", 1), "0"), "--backlog must be at least 1")
        self.assertEqual(self.refused(whole_number("depth", high=9), "10"), "--depth must be at most 9")


class SecondsTests(_Refusals):
    def test_accepts_within_bounds(self) -> None:
        self.assertEqual(seconds("idle")("0"), 0.0)
        self.assertEqual(seconds("t", above=True)("0.5"), 0.5)
        self.assertEqual(seconds("interval", low=1, most=3600)("3600"), 3600.0)

    def test_refusals_say_what_is_allowed(self) -> None:
        self.assertEqual(self.refused(seconds("idle"), "-1"),
                         "--idle must be a number of seconds 0 or more, not '-1'")
        self.assertEqual(self.refused(seconds("t", above=True), "0"),
                         "--t must be a number of seconds above 0, not '0'")
        self.assertEqual(self.refused(seconds("retry", most=86_400), "86401"),
                         "--retry must be a number of seconds from 0 to 86400, not '86401'")
        self.assertEqual(self.refused(seconds("interval", low=1, most=3600), "0.5"),
                         "--interval must be a number of seconds from 1 to 3600, not '0.5'")
        self.assertEqual(self.refused(seconds("t", above=True, most=3600), "soon"),
                         "--t must be a number of seconds from above 0 to 3600, not 'soon'")

    def test_infinity_and_nan_are_refused(self) -> None:
        for text in ("inf", "nan", "1e999"):
            self.assertIn("must be a number of seconds", self.refused(seconds("t"), text))
