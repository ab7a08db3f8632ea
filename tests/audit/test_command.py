"""C{twlog audit}'s table and JSON, from counts made here (no cluster): the age at the audit and the delivery
delay are two columns, and a delivery delay that is not known says why."""

from __future__ import annotations

import argparse
import io
import json
from contextlib import redirect_stderr, redirect_stdout

from twisted.trial.unittest import SynchronousTestCase

from twlog.audit.count import AuditCount
from twlog.audit.read import ClusterAudit
from twlog.cli import audit as command
from twlog.envelope import AuditEvent, Envelope

NOW_MS = 1_700_000_300_000
START_MS = 1_700_000_000_000


def counted() -> AuditCount:
    """Two 1 s windows of origin shop: the first read long after (age only), the second followed as it arrived."""
    count = AuditCount()
    for start, first in ((START_MS, 0), (START_MS + 1000, 2)):
        count.add_event(AuditEvent("orders", "shop", 1, start, 1000, 2, first, first + 1))
    for sequence in range(4):
        created = START_MS + 1000 * (sequence // 2) + 10 * sequence
        arrived = created + 40 + sequence if sequence >= 2 else None
        count.add_message("orders", Envelope("shop", 1, created, sequence, b""), NOW_MS - 1000, arrived)
    return count


class AuditTableTests(SynchronousTestCase):
    def run_audit(self, *extra: str) -> tuple[int, str, str]:
        self.patch(command, "count_cluster", lambda *a, **k: ClusterAudit(counted(), 4, 2))
        self.patch(command, "now_ms", lambda: NOW_MS)
        args = argparse.Namespace(topic="orders", zookeeper="localhost:2181", since=None, window_s=None, grace_s=0.0,
                                  json="--json" in extra, follow_s=None)
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            status = command.audit(args)
        return status, out.getvalue(), err.getvalue()

    def test_table(self) -> None:
        """The age column is named so (in seconds), the delivery delay is its own column (ms), and the window
        whose arrival was not seen shows "-" with the note saying why and how to measure it."""
        status, out, _ = self.run_audit()
        self.assertEqual(status, 0)
        lines = out.splitlines()
        header = next(line for line in lines if "window (UTC)" in line)
        self.assertIn("age at audit s p50/p90/p99", header)
        self.assertIn("delivery delay ms p50/p90/p99", header)
        self.assertNotIn(" delay ms", header.replace("delivery delay ms", ""))
        first, second = [line for line in lines if "shop" in line]
        self.assertRegex(first, r"299\.0 / 299\.0 / 299\.0\s+- \[1\]\s+complete")
        self.assertRegex(second, r"298\.0 / 298\.0 / 298\.0\s+42 / 43 / 43\s+complete")
        self.assertIn("[1] delivery delay unknown: every message of the window arrived before the audit looked", out)
        self.assertIn("--follow-s", out)

    def test_json(self) -> None:
        status, out, _ = self.run_audit("--json")
        self.assertEqual(status, 0)
        first, second = [json.loads(line) for line in out.splitlines()]
        self.assertEqual((first["delivery_delay_ms"], first["delivered"]), (None, 0))
        self.assertEqual(second["delivery_delay_ms"], {"p50": 42, "p90": 43, "p99": 43})
        self.assertEqual(second["age_at_audit_ms"], {"p50": 297_970, "p90": 297_980, "p99": 297_980})
