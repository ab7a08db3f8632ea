"""Tests for C{twlog bench compare}'s pure parts: the paper's figure data, the rounds' order, the medians and
ratios of the table, the JSON lines, the plots; and the peers' time limits and traces."""

from __future__ import annotations

import io
import json
import os
import sys

from twisted.trial.unittest import SkipTest, TestCase

from twlog.bench import compare
from twlog.bench.compare import Result, choose_systems, rates, render_table, round_order, summary, tests_of
from twlog.bench.peers import Deadline, Interrupted, Trace

HEADER = {"messages": 1000, "size": 200, "rounds": 3, "fetch_bytes": 200 * 1024, "prefetch": 1000,
          "versions": {"twlog": "0.1.0"}}


def result(system: str, test: str, batch: int, seconds: float, round_no: int = 1, messages: int = 1000,
           points=((0, 0.0), (500, 0.25), (1000, 1.0))) -> Result:
    return Result(round_no, system, test, batch, messages, seconds, 200, tuple(points), (0.5, 0.75))


class FigureDataTests(TestCase):
    def test_rates_per_interval(self) -> None:
        """Each interval gives the MB moved by its end and its own msg/s, as the paper's figures 4 and 5 plot."""
        xs, ys = rates([(0, 0.0), (5000, 0.5), (10_000, 0.75)], 200)
        self.assertEqual(xs, [1.0, 2.0])
        self.assertEqual(ys, [10_000.0, 20_000.0])

    def test_rates_skip_empty_intervals(self) -> None:
        """An interval with no time or no messages has no rate (no division by zero)."""
        xs, ys = rates([(0, 0.0), (0, 0.1), (100, 0.1), (200, 0.2)], 100)
        self.assertEqual(ys, [1000.0])
        self.assertEqual(len(xs), 1)


class RoundTests(TestCase):
    def test_rotating_order(self) -> None:
        """Each round starts with the next system, so none always runs first on a busy machine."""
        systems = ["twlog", "rabbitmq", "activemq"]
        self.assertEqual([round_order(systems, i)[0] for i in range(4)], ["twlog", "rabbitmq", "activemq", "twlog"])
        self.assertEqual(sorted(round_order(systems, 1)), sorted(systems))

    def test_peers_send_one_message_per_request(self) -> None:
        """twlog produces in every batch size; the peers one message per request, as in the paper; all consume."""
        self.assertEqual(tests_of("twlog", [1, 50]), [("produce", 1), ("produce", 50), ("consume", 0)])
        self.assertEqual(tests_of("rabbitmq", [1, 50]), [("produce", 1), ("consume", 0)])


class SummaryTests(TestCase):
    def results(self) -> list[Result]:
        rows = []
        for round_no, factor in ((1, 1.0), (2, 2.0), (3, 4.0)):
            rows += [
                result("twlog", "produce", 1, 0.01 * factor, round_no),  # 100,000 msg/s / factor
                result("twlog", "produce", 50, 0.001 * factor, round_no),
                result("twlog", "consume", 0, 0.002 * factor, round_no),
                result("rabbitmq", "produce", 1, 0.05 * factor, round_no),
                result("rabbitmq", "consume", 0, 0.04 * factor, round_no),
            ]
        return rows

    def test_medians_and_ratios(self) -> None:
        """Each system's figure is its median over the rounds; twlog's ratio divides the medians; in the rows
        of larger batches the peers' figure is their one-message-per-request one."""
        rows = summary(self.results(), ["twlog", "rabbitmq"], [1, 50])
        self.assertEqual([(r["test"], r["batch"]) for r in rows], [("produce", 1), ("produce", 50), ("consume", 0)])
        produce1, produce50, consume = rows
        self.assertAlmostEqual(produce1["msg_s"]["twlog"], 50_000)
        self.assertAlmostEqual(produce1["msg_s"]["rabbitmq"], 10_000)
        self.assertAlmostEqual(produce1["ratio"]["rabbitmq"], 5.0)
        self.assertAlmostEqual(produce50["msg_s"]["rabbitmq"], 10_000)
        self.assertAlmostEqual(produce50["ratio"]["rabbitmq"], 50.0)
        self.assertAlmostEqual(consume["ratio"]["rabbitmq"], 20.0)
        self.assertEqual(len(consume["rounds"]["twlog"]), 3)

    def test_ratio_within_rounds(self) -> None:
        """twlog's ratio to a peer is the median of the ratios within each round (the systems ran in turns, so
        each round's ratio saw the same machine), not the ratio of the medians; a round one side lacks counts
        for neither."""
        rows = []
        for round_no, mine, theirs in ((1, 100, 10), (2, 50, 50), (3, 20, 40)):
            rows += [result("twlog", "consume", 0, 1000 / mine, round_no),
                     result("activemq", "consume", 0, 1000 / theirs, round_no)]
        rows.append(result("activemq", "consume", 0, 1000 / 45, 4))
        (_, _, consume) = summary(rows, ["twlog", "activemq"], [1, 50])
        self.assertAlmostEqual(consume["msg_s"]["twlog"], 50)
        self.assertAlmostEqual(consume["msg_s"]["activemq"], 42.5)
        self.assertAlmostEqual(consume["ratio"]["activemq"], 1.0)

    def test_missing_peer_has_no_ratio(self) -> None:
        """A system with no results (it was not run) gets no figure and no ratio."""
        rows = summary([r for r in self.results() if r.system == "twlog"], ["twlog"], [1, 50])
        self.assertEqual(rows[0]["ratio"], {})
        self.assertNotIn("rabbitmq", rows[0]["msg_s"])

    def test_table(self) -> None:
        """The rich table has a column per system and per ratio, the medians, the spread and the ratios."""
        systems = ["twlog", "rabbitmq"]
        text = render_table(summary(self.results(), systems, [1, 50]), systems, HEADER).text()
        for expected in ("twlog (msg/s)", "RabbitMQ (msg/s)", "twlog / RabbitMQ (x)", "produce, batch 50 (peers: 1)",
                         "consume, 200 KB fetches (peers: prefetch 1000)", "50,000 ±75%", " 5.00", "50.00",
                         "20.00"):
            self.assertIn(expected, text)

    def test_table_of_twlog_alone(self) -> None:
        """With twlog alone, the rows say nothing about peers."""
        rows = summary([r for r in self.results() if r.system == "twlog"], ["twlog"], [1, 50])
        text = render_table(rows, ["twlog"], HEADER).text()
        self.assertNotIn("(peers", text)
        self.assertIn("produce, batch 50 ", text)


class JsonLinesTests(TestCase):
    def test_result_round_trip(self) -> None:
        """A result line carries the throughput over time and reads back to the same result."""
        original = result("activemq", "consume", 0, 0.5, 2)
        line = json.loads(json.dumps(original.to_json()))
        self.assertEqual(line["kind"], "result")
        self.assertEqual(line["msg_s"], 2000.0)
        self.assertEqual(line["points"][-1], [1000, 1.0])
        self.assertEqual(Result.from_json(line), original)


class PlotTests(TestCase):
    def test_figures_4_and_5(self) -> None:
        """--plot writes the producer and the consumer figures as PNG files."""
        if compare.Figure is None:
            raise SkipTest("matplotlib is not installed (the compare extra)")
        directory = self.mktemp()
        results = [result("twlog", "produce", 1, 0.01), result("twlog", "produce", 50, 0.002),
                   result("twlog", "consume", 0, 0.003), result("rabbitmq", "produce", 1, 0.05),
                   result("rabbitmq", "consume", 0, 0.04)]
        paths = compare.write_plots(results, directory, 200)
        self.assertEqual(sorted(os.path.basename(p) for p in paths), ["compare-consume.png", "compare-produce.png"])
        for path in paths:
            with open(path, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


class SystemChoiceTests(TestCase):
    def test_default_leaves_out_peers_that_cannot_run(self) -> None:
        """Without --systems, twlog runs with every peer that can, and the others are named with the reason."""
        systems, skipped = choose_systems(None, {"rabbitmq": 5672, "activemq": 61613},
                                          lambda peer, port: None if peer == "activemq" else f"{peer} on {port}: no")
        self.assertEqual(systems, ["twlog", "activemq"])
        self.assertEqual(skipped, ["rabbitmq on 5672: no"])

    def test_named_peer_that_cannot_run_is_an_error(self) -> None:
        """A peer named in --systems that cannot run stops the comparison with the reason."""
        with self.assertRaises(compare.CompareError) as raised:
            choose_systems(["twlog", "rabbitmq"], {"rabbitmq": 5999, "activemq": 61613},
                           lambda peer, port: f"{peer}: nothing listens on 127.0.0.1:{port}")
        self.assertIn("127.0.0.1:5999", str(raised.exception))

    def test_twlog_alone(self) -> None:
        """--systems twlog asks nothing of the peers."""
        asked = lambda peer, port: self.fail(f"asked about {peer}")  # noqa: E731
        self.assertEqual(choose_systems(["twlog"], {"rabbitmq": 1, "activemq": 2}, asked), (["twlog"], []))


class TraceTests(TestCase):
    def test_points_every_step(self) -> None:
        """A trace keeps a point each C{step} messages and a last one at the end, and reports each to on_mark."""
        marked: list[int] = []
        trace = Trace(1000, step=250, on_mark=marked.append)
        trace.start()
        for done in range(1, 1000):
            trace.mark(done)
        trace.finish(1000)
        self.assertEqual([done for done, _ in trace.points], [0, 250, 500, 750, 1000])
        self.assertEqual(marked, [250, 500, 750, 1000])
        times = [t for _, t in trace.points]
        self.assertEqual(times, sorted(times))

    def test_default_step(self) -> None:
        """By default a trace keeps about a hundred points."""
        self.assertEqual(Trace(1_000_000).step, 10_000)
        self.assertEqual(Trace(10).step, 1)


class DeadlineTests(TestCase):
    def test_check_raises_once_passed(self) -> None:
        """A deadline lets a test go on until its time is up, then names it and how far it got."""
        now = [100.0]
        deadline = Deadline(30, "round 1/3: RabbitMQ consume", clock=lambda: now[0])
        deadline.check(10, 100)
        now[0] = 130.0
        self.assertTrue(deadline.passed)
        with self.assertRaises(TimeoutError) as raised:
            deadline.check(42, 100)
        self.assertEqual(str(raised.exception),
                         "round 1/3: RabbitMQ consume did not finish within 30 s (42 of 100 messages)")

    def test_cancel_interrupts(self) -> None:
        """A cancelled deadline (the reactor shutting down) stops the test at its next check, whatever the time."""
        deadline = Deadline(900, "round 2/3: ActiveMQ produce, batch 1", clock=lambda: 0.0)
        deadline.cancel()
        self.assertTrue(deadline.passed)
        with self.assertRaises(Interrupted) as raised:
            deadline.check(7000, 1_000_000)
        self.assertEqual(str(raised.exception),
                         "round 2/3: ActiveMQ produce, batch 1 interrupted (7,000 of 1,000,000 messages)")


class ReplayTests(TestCase):
    def test_not_a_saved_run(self) -> None:
        """--from-json of a file that is not compare's JSON lines is one line on stderr and status 1."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write('{"kind": "summary"}\n')
        err = io.StringIO()
        self.patch(sys, "stderr", err)
        self.assertEqual(compare.replay(path, None), 1)
        self.assertEqual(err.getvalue().count("\n"), 1)
        self.assertIn('no line of "kind": "run"', err.getvalue())

    def test_missing_file(self) -> None:
        """A file that cannot be read is named, with the reason."""
        err = io.StringIO()
        self.patch(sys, "stderr", err)
        self.assertEqual(compare.replay(self.mktemp(), None), 1)
        self.assertIn("No such file or directory", err.getvalue())

    def test_saved_run(self) -> None:
        """A saved run prints its table again."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write(json.dumps({"kind": "run", "systems": ["twlog"], "batches": [1, 50], **HEADER}) + "\n")
            for r in (result("twlog", "produce", 1, 0.01), result("twlog", "produce", 50, 0.002),
                      result("twlog", "consume", 0, 0.004)):
                f.write(json.dumps(r.to_json()) + "\n")
        out = io.StringIO()
        self.patch(sys, "stdout", out)
        self.assertEqual(compare.replay(path, None), 0)
        self.assertIn("500,000", out.getvalue())
        self.assertIn("consume, 200 KB fetches", out.getvalue())
