"""The replica side's broker option: --replica-lag-time-ms (twistd twlog, twlog broker)."""

from __future__ import annotations

from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from twlog.broker.tap import Options


class ReplicaLagOptionTests(SynchronousTestCase):
    def parse(self, *argv: str) -> Options:
        options = Options()
        options.parseOptions(["--log-dir", self.mktemp(), *argv])
        return options

    def test_default_is_kafkas(self) -> None:
        """10,000 ms by default, as Kafka's replica.lag.time.max.ms."""
        self.assertEqual(self.parse().config.replica_lag_time_ms, 10_000)

    def test_set_and_checked(self) -> None:
        """The option reaches the config; below 1 ms is refused in one line naming the option."""
        self.assertEqual(self.parse("--replica-lag-time-ms", "2_500").config.replica_lag_time_ms, 2500)
        e = self.assertRaises(usage.UsageError, self.parse, "--replica-lag-time-ms", "0")
        self.assertEqual(str(e), "--replica-lag-time-ms must be at least 1")
        self.assertIn("--replica-lag-time-ms", str(Options()))
