"""Tests for the did-you-mean of a mistyped topic name."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.suggest import did_you_mean


class DidYouMeanTests(SynchronousTestCase):
    def test_transposed_letters(self) -> None:
        """A name with two letters swapped gets the topic it was meant to be."""
        self.assertEqual(did_you_mean("clikcs", ["clicks", "orders", "logs"]), "; did you mean 'clicks'?")

    def test_several_close_names(self) -> None:
        """Every close name is offered, the closest first."""
        self.assertEqual(did_you_mean("log", ["logs", "logz", "clicks"]), "; did you mean 'logs' or 'logz'?")

    def test_nothing_close(self) -> None:
        """No suggestion when no topic is close, or there are none."""
        self.assertEqual(did_you_mean("nosuch", ["clicks", "orders"]), "")
        self.assertEqual(did_you_mean("clicks", []), "")
