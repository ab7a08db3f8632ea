"""Tests for twlog broker's option handling and its start-up log."""

from __future__ import annotations

import io
from contextlib import redirect_stderr

from twisted.trial.unittest import SynchronousTestCase

from twlog.cli.broker import BrokerOptions, _HeldUntilStarted, parse


class ParseTests(SynchronousTestCase):
    def test_options_are_twistd_twlogs(self) -> None:
        """twlog broker takes twistd twlog's options and builds the same configuration."""
        options = parse(["--port", "9999", "--broker-id", "4", "--log-dir", "d", "-z", "h:2181/x"])
        self.assertIsInstance(options, BrokerOptions)
        self.assertEqual((options.config.port, options.config.broker_id, options.config.log.log_dir,
                          options.config.zookeeper), (9999, 4, "d", "h:2181/x"))

    def test_bad_option_is_exit_2(self) -> None:
        """A bad option is one line on stderr and exit status 2."""
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(parse(["--port", "x"]), 2)
        self.assertEqual(err.getvalue().count("\n"), 1)
        self.assertIn("--port must be a whole number, not 'x'", err.getvalue())


class HeldUntilStartedTests(SynchronousTestCase):
    def test_held_then_shown(self) -> None:
        """Events before the start are held, shown once started, and later ones go straight through."""
        seen: list[dict] = []
        held = _HeldUntilStarted(seen.append)
        held({"n": 1})
        self.assertEqual(seen, [])
        self.assertEqual(held.started("port"), "port")
        held({"n": 2})
        self.assertEqual(seen, [{"n": 1}, {"n": 2}])
