"""Tests for C{twlog bench latency} and C{twlog bench local}: the schedule, the stamps, the broker's fsync histogram,
the producer frames, the tables and the command lines."""

from __future__ import annotations

import struct

from twisted.trial.unittest import SynchronousTestCase

from twlog.bench.latency import (
    FlushStats,
    LatencyRow,
    due_count,
    latency_table,
    parse_flush_stats,
    percentile,
    stamped_payloads,
)
from twlog.bench.local import DISTINCT_SETS, TOPIC, LocalRow, local_table, producer_frames
from twlog.cli.main import build_parser
from twlog.protocol import codec
from twlog.storage.message import iter_messages

SCRAPE = """# HELP twlog_flush_duration_seconds fsyncs
# TYPE twlog_flush_duration_seconds histogram
twlog_flush_duration_seconds_bucket{le="0.0005"} 60.0
twlog_flush_duration_seconds_bucket{le="0.001"} 95.0
twlog_flush_duration_seconds_bucket{le="0.0025"} 99.0
twlog_flush_duration_seconds_bucket{le="+Inf"} 100.0
twlog_flush_duration_seconds_count 100.0
twlog_flush_duration_seconds_sum 0.05
"""


def render(table) -> str:
    return table.text()


class ScheduleTests(SynchronousTestCase):
    def test_due_count(self) -> None:
        """Message i is due at i / rate: one at the start, rate per second after, never more than the total."""
        self.assertEqual(due_count(0, 1000, 10_000), 1)
        self.assertEqual(due_count(999_999, 1000, 10_000), 1)
        self.assertEqual(due_count(1_000_000, 1000, 10_000), 2)
        self.assertEqual(due_count(1_000_000_000, 20_000, 10**9), 20_001)
        self.assertEqual(due_count(10**12, 1000, 500), 500)
        self.assertEqual(due_count(-1, 1000, 500), 0)

    def test_stamped_payloads(self) -> None:
        """Each payload starts with its due time (8 bytes, big-endian) and has the size asked for."""
        payloads = stamped_payloads([5, 2**40], 100)
        self.assertEqual([len(p) for p in payloads], [100, 100])
        self.assertEqual([struct.unpack(">q", p[:8])[0] for p in payloads], [5, 2**40])

    def test_percentile(self) -> None:
        """Nearest rank: p50 of 1..100 is 50, p99.9 is 100."""
        values = list(range(1, 101))
        self.assertEqual((percentile(values, 0.5), percentile(values, 0.999)), (50, 100))


class FlushStatsTests(SynchronousTestCase):
    def test_parse_scrape(self) -> None:
        """The fsync histogram is read from the broker's Prometheus text: count, sum, cumulative buckets."""
        stats = parse_flush_stats(SCRAPE + "twlog_connections 3.0\n")
        self.assertEqual((stats.count, stats.total_s), (100.0, 0.05))
        self.assertEqual(stats.buckets[:2], ((0.0005, 60.0), (0.001, 95.0)))
        self.assertEqual(stats.buckets[-1][1], 100.0)

    def test_bounds_and_difference(self) -> None:
        """Between two scrapes: the fsyncs done meanwhile, and the bucket bound under which a fraction fell."""
        before = FlushStats(40.0, 0.01, ((0.0005, 40.0), (0.001, 40.0), (0.0025, 40.0), (float("inf"), 40.0)))
        during = parse_flush_stats(SCRAPE).since(before)
        self.assertEqual((during.count, round(during.total_s, 6)), (60.0, 0.04))
        self.assertEqual((during.bound(0.3), during.bound(0.5), during.bound(0.98)), (0.0005, 0.001, 0.0025))
        self.assertEqual(during.bound(0.99), float("inf"))  # 59 of 60 fell under 2.5 ms: the 99th percentile did not
        self.assertNotEqual(FlushStats().bound(0.5), FlushStats().bound(0.5))  # NaN without fsyncs

    def test_table(self) -> None:
        """A row per policy and rate: received/sent, latency percentiles in ms, fsyncs per second, broker CPU."""
        flushes = parse_flush_stats(SCRAPE)
        rows = [LatencyRow("group", 20_000, 1000, 1000, 2.0, 0.05, [0.001] * 990 + [0.010] * 10, flushes, 0.5)]
        text = render(latency_table(rows, "title"))
        self.assertRegex(text, r"group\s+20,000\s+20,000\s+1,000/1,000\s+1\.0\s+1\.0\s+10\.0\s+10\.0\s+50\s+0\.5\s+0\.5"
                               r"\s+2\.5\s+25")


class LocalBenchTests(SynchronousTestCase):
    def test_producer_frames(self) -> None:
        """A producer's frames are size-prefixed PRODUCE requests of distinct batch-sized sets to its partition."""
        frames = producer_frames(3, 50, 200)
        self.assertEqual(len(frames), DISTINCT_SETS)
        size = struct.unpack(">i", frames[0][:4])[0]
        self.assertEqual(size, len(frames[0]) - 4)
        request = codec.decode_request(frames[0][4:])
        self.assertEqual((request.topic, request.partition), (TOPIC, 3))
        messages = list(iter_messages(bytes(request.messages), 0))
        self.assertEqual([len(m.payload) for m in messages], [200] * 50)
        self.assertNotEqual(frames[0], frames[1])

    def test_table(self) -> None:
        """A row per run: the cluster size, messages, msg/s and the brokers' CPU per second."""
        text = render(local_table([LocalRow(2, 2, 2_000_000, 2.0, 3.0, 4.5)], "t"))
        self.assertRegex(text, r"--brokers 2\s+this checkout\s+2\s+2,000,000\s+2\.00\s+1,000,000\s+150\s+4\.50")


class CommandLineTests(SynchronousTestCase):
    def test_latency_defaults(self) -> None:
        """The issue's rates and both policies by default; the flush settings are the broker's unless given."""
        args = build_parser().parse_args(["bench", "latency"])
        self.assertEqual((args.rates, args.flush_policy, args.seconds, args.flush_interval_ms, args.run),
                         ([1000, 20000, 200000], ["group", "timer"], 10.0, None, "twlog.bench.latency:main_latency"))
        args = build_parser().parse_args(["bench", "latency", "--flush-policy", "timer", "--flush-interval-ms", "50"])
        self.assertEqual((args.flush_policy, args.flush_interval_ms), (["timer"], 50))

    def test_bad_values_are_usage_errors(self) -> None:
        """An unknown policy or a duration out of range is refused by the parser (one line, exit 2)."""
        for argv in (["bench", "latency", "--flush-policy", "never"], ["bench", "latency", "--seconds", "0"],
                     ["bench", "broker", "--flush-policy", "group,sometimes"]):
            with self.assertRaises(SystemExit) as raised:
                build_parser().parse_args(argv)
            self.assertEqual(raised.exception.code, 2)

    def test_broker_bench_policies(self) -> None:
        """twlog bench broker --flush-policy runs a broker per policy, in the order given."""
        args = build_parser().parse_args(["bench", "broker", "--flush-policy", "group,timer,group"])
        self.assertEqual(args.flush_policy, ["group", "timer", "group"])
        self.assertIsNone(build_parser().parse_args(["bench", "broker"]).flush_policy)

    def test_local_defaults(self) -> None:
        """twlog bench local compares --brokers 1 and 2 with two producer processes of batch 50."""
        args = build_parser().parse_args(["bench", "local"])
        self.assertEqual((args.brokers, args.producers, args.batch, args.messages, args.run),
                         ([1, 2], 2, 50, 1_000_000, "twlog.bench.local:main_local"))
