"""Tests for C{twlog bench hostile}: its percentiles, verdicts and table, its frames and answer counting, the
broker options it passes, its command line (no broker: the end-to-end run is in tests.integration)."""

from __future__ import annotations

import os
import resource
import socket
import time

from twisted.trial.unittest import SynchronousTestCase

from twlog.bench import hostile
from twlog.bench.attacks import FrameCounter, answer_error, await_answers, closed_by_peer, stalled_body
from twlog.bench.hostile import AttackRow, format_hostile_table, rss_bytes, select_options
from twlog.bench.verdicts import BigFrames, Burst, HalfSent, HealthyFetches, IdleFlood, Pipelined, percentile
from twlog.cli.main import build_parser
from twlog.errors import MalformedRequest
from twlog.protocol import codec

FAST = HealthyFetches((0.001,) * 98 + (0.004,) * 2)
#: p50 1 ms, p99 60 ms: above the 50 ms target.
SLOW = HealthyFetches((0.001,) * 98 + (0.060,) * 2)


def frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


class PercentileTests(SynchronousTestCase):
    def test_percentile(self) -> None:
        """Nearest-rank percentiles: p50 and p99 of 1..100 are 50 and 99; the max is the last."""
        values = list(range(100, 0, -1))
        self.assertEqual((percentile(values, 0.5), percentile(values, 0.99), percentile(values, 1.0)), (50, 99, 100))
        self.assertEqual(percentile([7.0], 0.99), 7.0)
        self.assertNotEqual(percentile([], 0.5), percentile([], 0.5))  # NaN

    def test_healthy_p99_target(self) -> None:
        """The 50 ms target is met at p99 4 ms, missed at 60 ms, and not met by a client with no answers."""
        self.assertTrue(FAST.p99_met)
        self.assertFalse(SLOW.p99_met)
        self.assertFalse(HealthyFetches(()).p99_met)


class VerdictTests(SynchronousTestCase):
    def test_idle_flood(self) -> None:
        """Served newcomers against all of them; the figure says how many idle ones the broker kept and closed."""
        served = IdleFlood(700, 700, 20, 20, 20)
        self.assertTrue(served.passed(FAST))
        self.assertEqual(served.figure(), "20/20 newcomers served; 700 of 700 idle connections held, 20 then "
                         "closed by the broker")
        self.assertEqual(served.target(), "20/20 served")
        refused = IdleFlood(700, 700, 20, 0, 0, "reset by the broker")
        self.assertFalse(refused.passed(FAST))
        self.assertIn("0/20 newcomers served", refused.figure())
        self.assertIn("first refused: reset by the broker", refused.figure())

    def test_half_sent_answered_in_time(self) -> None:
        """Answered 0.1 s after the broker's 5 s request timeout closed a stalled sender: within 6 s, a pass."""
        result = HalfSent(2, 95 << 20, 69 << 20, 5.0, answered_after_s=5.0, answered_since_stall_s=5.2,
                          freed_since_stall_s=5.1, freed_by="broker")
        self.assertTrue(result.passed(FAST))
        self.assertEqual(result.figure(), "answered at 5.20 s, 0.10 s after the broker closed a stalled sender at "
                         "5.10 s")
        self.assertEqual(result.target(), "answered by 6 s (request timeout + 1 s)")

    def test_half_sent_waits_for_the_bench(self) -> None:
        """A broker without a request timeout answers only when the benchmark closes the stalled senders: late,
        a failure, however fast it is once they close; no answer or an error fail too."""
        late = HalfSent(2, 95 << 20, 69 << 20, 5.0, 9.9, 10.07, 10.0, "bench")
        self.assertFalse(late.passed(FAST))
        self.assertIn("0.07 s after the bench closed a stalled sender at 10.00 s", late.figure())
        never = HalfSent(2, 1, 1, 5.0, None, None, 10.0, "bench", failure="TimeoutError: timed out")
        self.assertFalse(never.passed(FAST))
        self.assertEqual(never.figure(), "no answer: TimeoutError: timed out")
        refused = HalfSent(2, 1, 1, 5.0, 1.0, 1.0, None, None, error=3)
        self.assertFalse(refused.passed(FAST))
        self.assertEqual(refused.figure(), "answered at 1.00 s with error 3 (WrongPartition)")

    def test_pipelined_and_big_frames(self) -> None:
        """The pipelined flood is judged by the healthy client's fetch p99; the big frames by its slowest fetch
        (one held fetch in a thousand is below the p99), and a big frame refused fails too."""
        flood = Pipelined(20, 100_000, 2_000_000, 1_000_000, 10.0)
        self.assertEqual(flood.figure(), "1,000,000 of 2,000,000 OFFSETS answered in 10.0 s (100,000 /s)")
        self.assertEqual((flood.passed(FAST), flood.passed(SLOW)), (True, False))
        self.assertEqual(flood.target(), "fetch p99 <= 50 ms")
        big = BigFrames(2, 50_000_000, 4, 8, 3.0)
        self.assertEqual(big.figure(), "8 of 8 frames of 50.0 MB answered in 3.0 s")
        self.assertEqual(big.target(), "fetch max <= 50 ms")
        held_once = HealthyFetches((0.001,) * 999 + (0.138,))  # p99 1 ms, but one fetch held 138 ms
        self.assertEqual((big.passed(FAST), big.passed(SLOW), big.passed(held_once)), (True, False, False))
        self.assertTrue(flood.passed(held_once))
        self.assertFalse(BigFrames(2, 50_000_000, 4, 1, 3.0, "RuntimeError: refused").passed(FAST))

    def test_burst(self) -> None:
        """A connect p99 past the first SYN retransmit (1 s) fails, as does one connection not answered."""
        quick = Burst(100, (0.01,) * 100, (0.02,) * 100)
        self.assertTrue(quick.passed(FAST))
        self.assertEqual(quick.figure(), "connect p50 10.0 ms, p99 10.0 ms; answered p99 20.0 ms; 0 of 100 failed")
        retransmitted = Burst(100, (0.01,) * 98 + (1.01,) * 2, (0.02,) * 100)
        self.assertFalse(retransmitted.passed(FAST))
        self.assertIn("p99 1,010.0 ms", retransmitted.figure())
        one_lost = Burst(100, (0.01,) * 100, (0.02,) * 99)
        self.assertFalse(one_lost.passed(FAST))
        self.assertIn("1 of 100 failed", one_lost.figure())
        self.assertEqual(Burst(3, (), ()).figure(), "none of 3 connected")


class TableTests(SynchronousTestCase):
    def rows(self) -> list[AttackRow]:
        return [
            AttackRow(hostile.BASELINE, FAST, None, 47_600_000),
            AttackRow("idle flood", FAST, IdleFlood(700, 700, 20, 0, 0, "reset by the broker"), 48_000_000),
            AttackRow("half-sent frames", FAST, HalfSent(2, 1, 1, 5.0, 9.9, 10.07, 10.0, "bench"), 250_000_000,
                      ("--request-timeout-s",)),
            AttackRow("pipelined flood", SLOW, Pipelined(20, 10, 200, 200, 1.0), 48_000_000),
            AttackRow("big frames", HealthyFetches((), 3, "RuntimeError: closed"), BigFrames(1, 1, 1, 1, 1.0),
                      150_000_000),
            AttackRow("connection burst", FAST, Burst(10, (0.01,) * 10, (0.02,) * 10), 48_000_000),
        ]

    def test_table(self) -> None:
        """A row per attack: the healthy client's p50/p99 in ms, the broker's peak, the figure, the target and
        the verdict; every column has a unit or is text, and every n/a cell a footnote."""
        table = format_hostile_table(self.rows())
        self.assertEqual(table.problems(), [])
        self.assertEqual(len(table.rows), 6)
        text = table.text()
        for header in ("healthy fetch p50 (ms)", "healthy fetch p99 (ms)", "broker peak RSS (MB)",
                       "healthy fetch max (ms)", "healthy fetches (count)", "the attack's figure", "target",
                       "result"):
            self.assertIn(header, text)
        self.assertEqual(table.rows[0][1:6], ["100", "1.00", "4.00", "4.00", "47.6"])
        self.assertEqual(table.rows[3][2:4], ["1.00", "60.00"])
        self.assertEqual([r[-1].split()[0] for r in table.rows], ["n/a", "FAIL", "FAIL", "FAIL", "FAIL", "pass"])
        self.assertIn("no attack: the baseline", text)
        self.assertIn("the broker's --help lists no --request-timeout-s: run without it", text)
        self.assertIn("the healthy client's fetches failed 3 times; first: RuntimeError: closed", text)
        self.assertIn("the healthy client got no answer beside this attack", text)
        self.assertIn("the benchmark's own target", text)
        self.assertRegex(text, r"half-sent frames \[\d\]")
        self.assertIn("times in the half-sent row count from the stalled senders' start", text)
        self.assertNotIn("half-sent", format_hostile_table(self.rows()[:2]).text())


class OptionTests(SynchronousTestCase):
    def test_select_options(self) -> None:
        """Options the broker lists are passed with their values; the others are named, in order."""
        argv, missing = select_options([("--max-connections", 701), ("--request-timeout-s", "5"),
                                        ("--listen-backlog", 1024)], frozenset({"--max-connections"}))
        self.assertEqual((argv, missing), (["--max-connections", "701"], ["--request-timeout-s", "--listen-backlog"]))

    def test_broker_options(self) -> None:
        """Today's broker lists --max-connections and --max-request-bytes in its --help."""
        available = hostile.broker_option_names()
        self.assertIn("--max-connections", available)
        self.assertIn("--max-buffered-request-bytes", available)

    def test_open_files(self) -> None:
        """The process raises its open-files limit when its hard limit allows, and says in words when not."""
        calls = []
        self.patch(resource, "getrlimit", lambda which: (1024, 4096))
        self.patch(resource, "setrlimit", lambda which, limits: calls.append(limits))
        self.assertIsNone(hostile._raise_open_files(1000))
        self.assertIsNone(hostile._raise_open_files(2000))
        self.assertEqual(calls, [(2000, 4096)])
        self.assertIn("at most 4,096 (ulimit -Hn)", hostile._raise_open_files(5000))

    def test_command_line(self) -> None:
        """The defaults are issue 21's scenarios; --attacks picks some, in order."""
        args = build_parser().parse_args(["bench", "hostile"])
        self.assertEqual(args.run, "twlog.bench.hostile:main_hostile")
        self.assertEqual(args.attacks, ["idle", "half-sent", "pipelined", "big-frames", "burst"])
        self.assertEqual((args.idle_connections, args.newcomers, args.stalled_clients, args.stalled_mb,
                          args.produce_mb, args.flooders, args.pipeline, args.big_frame_mb),
                         (700, 20, 2, 95.0, 69.0, 20, 100_000, 50.0))
        args = build_parser().parse_args(["bench", "hostile", "--attacks", "burst,idle", "--stalled-mb", "1.5"])
        self.assertEqual((args.attacks, args.stalled_mb), (["burst", "idle"], 1.5))

    def test_plans(self) -> None:
        """What each attack asks of the broker: the idle flood fills --max-connections; the half-sent frames
        set the request timeout and, when given, the budget."""
        args = build_parser().parse_args(["bench", "hostile", "--idle-connections", "30", "--newcomers", "4",
                                          "--max-buffered-mb", "4", "--stalled-mb", "1.5", "--produce-mb", "2",
                                          "--request-timeout-s", "1.5"])
        plans = {p.key: p for p in hostile._plans(args)}
        self.assertEqual(list(plans), ["baseline", "idle", "half-sent", "pipelined", "big-frames", "burst"])
        self.assertEqual(plans["idle"].wanted, (("--max-connections", 31), ("--max-connections-per-ip", 36),
                                                ("--reap-idle-s", "1")))
        self.assertEqual(plans["half-sent"].wanted, (("--max-buffered-request-bytes", 4 << 20),
                                                     ("--max-request-bytes", 3 << 20),
                                                     ("--request-timeout-s", "1.5")))
        self.assertEqual((plans["pipelined"].wanted, plans["burst"].wanted), ((), ()))


class WireTests(SynchronousTestCase):
    def test_stalled_frame_is_a_valid_start(self) -> None:
        """The stalled body is an ACK_PRODUCE whose one set fills the frame: only its end is missing,
        so the broker cannot refuse it early."""
        body = stalled_body(100_000)
        self.assertEqual(len(body), 100_000)
        request = codec.decode_request(body)
        self.assertIsInstance(request, codec.AckProduceRequest)
        self.assertEqual(len(request.produces[0].messages) + len(codec.encode_request(
            codec.AckProduceRequest(codec.ACK_APPENDED, 10_000, (codec.ProduceRequest("healthy", 0, b""),)))),
            100_000)
        self.assertRaises(MalformedRequest, codec.decode_request, body[:-1])

    def test_rss_of_this_process(self) -> None:
        """VmRSS and VmHWM of a live process are read from /proc; a missing process reads as 0."""
        self.assertGreater(rss_bytes(os.getpid()), 1_000_000)
        self.assertGreaterEqual(rss_bytes(os.getpid(), "VmHWM"), rss_bytes(os.getpid()) // 2)
        self.assertEqual(rss_bytes(2**22 + 12345), 0)

    def test_frame_counter(self) -> None:
        """Answers are counted when whole, however the stream is cut."""
        stream = frame(b"abc") + frame(b"") + frame(b"x" * 300)
        counter = FrameCounter()
        self.assertEqual([counter.feed(stream[i : i + 2]) for i in range(0, 6, 2)], [0, 0, 0])
        self.assertEqual(counter.feed(stream[6:12]), 2)
        self.assertEqual(counter.feed(stream[12:-1]), 0)
        self.assertEqual((counter.feed(stream[-1:]), counter.frames), (1, 3))

    def test_await_answers(self) -> None:
        """One answer each: answered, closed by the other end, or failed before sending; without waiting, as
        each is ready at once.  A silent one past the deadline had no answer in time."""
        pairs = [socket.socketpair() for _ in range(3)]
        try:
            pairs[0][1].sendall(frame(b"\x00\x00answer"))
            pairs[1][1].close()
            outcome = await_answers([pairs[0][0], pairs[1][0], "reset by the broker"], time.monotonic() + 60)
            self.assertEqual(await_answers([pairs[2][0]], time.monotonic()), ["no answer in time"])
        finally:
            for a, b in pairs:
                a.close()
                b.close()
        self.assertIsInstance(outcome[0], float)
        self.assertEqual(outcome[1:], ["closed by the broker", "reset by the broker"])

    def test_closed_by_peer(self) -> None:
        """Connections whose other end closed are counted; open and silent ones are not."""
        pairs = [socket.socketpair() for _ in range(3)]
        try:
            pairs[2][1].close()
            self.assertEqual(closed_by_peer([p[0] for p in pairs], 60), 1)  # returns as soon as one is ready
        finally:
            for a, b in pairs:
                a.close()
                b.close()



class AnswerErrorTests(SynchronousTestCase):
    def test_answer_error(self) -> None:
        """An answer with error 0 serves; an error answer (a broker refusing a newcomer in words) does not."""
        self.assertIsNone(answer_error(b"\x00\x00\x00\x00\x00\x00"))
        self.assertEqual(answer_error(b"\x00\x0e"), "error 14 (TooManyOpenFiles)")
        self.assertEqual(answer_error(b"\x7f\x00"), "error 32512")  # a code this client does not know
        self.assertEqual(answer_error(b"\x00"), "an answer too short to hold an error code")

    def test_error_answer_is_not_served(self) -> None:
        """await_answers says which error an answer carried instead of counting it as served."""
        a, b = socket.socketpair()
        try:
            b.sendall(frame(b"\x00\x0e"))
            (outcome,) = await_answers([a], time.monotonic() + 1)
        finally:
            a.close()
            b.close()
        self.assertEqual(outcome, "error 14 (TooManyOpenFiles)")
