# -*- test-case-name: tests.cli.test_main,tests.integration.test_spark_bench -*-
"""C{twlog bench spark}: Spark reading through the twlog source beside its JSON-lines reader, same messages.

Not a test: a measurement, run by hand::

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python -m twlog.bench.spark [--messages 1000000] [--size 200] [--rounds 3]

It writes C{messages} messages of C{size} bytes (ASCII, JSON-safe) straight
into the log segments of two topics, C{bench} (two partitions) and C{bench1}
(one partition), starts a broker on them as a separate process
(L{twlog.bench.broker.BrokerProcess}), writes the same payloads as JSON lines
(C{{"value": "..."}}), and times, with one local[2] session, in rounds that
interleave the readers (so machine noise falls on all alike):

  - each source into C{count()} and into snappy Parquet (C{bench} and the JSON file);
  - C{bench1} into C{count()} without C{minPartitions} (one task) and with it (N tasks, the same rows);
  - a Python source that yields the same Arrow batches without I/O or parsing
    (L{twlog.bench.spark_floor}) into C{count()}: the bound of Spark's Python
    data source path on this machine, which the twlog source cannot beat;
  - once, the same records as JSON (C{from_json}) and as Avro (C{valueFormat avro})
    into an aggregate of the decoded fields (L{twlog.bench.avro}).

For each read it prints the median wall-clock rows/s, the median rows per
CPU-second (the Spark JVM and its Python workers, plus the broker for twlog
reads: on a loaded machine this says more than the wall clock), the number of
Spark tasks and the rows read; then the twlog/JSON ratios, and the load
average before and after.  The entry points are L{main} (an argv list) and
L{main_spark} (C{twlog bench spark}'s arguments).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence

from twlog.bench.avro import avro_reads, write_avro_topics
from twlog.bench.broker import BrokerProcess
from twlog.bench.common import BenchProgress, BenchTable, Column
from twlog.bench.spark_floor import FloorSource
from twlog.spark.options import DEFAULT_FETCH_SIZE
from twlog.spark.source import register
from twlog.storage.message import encode_message_set
from twlog.storage.topics import TOPICS_FILE

TOPIC = "bench"
#: The one-partition topic of the minPartitions rows.
TOPIC1 = "bench1"


def _payload(i: int, size: int) -> bytes:
    head = f"{i:010d}-".encode()
    return head + b"x" * (size - len(head))


def _segment(log_dir: str, topic: str, partition: int):
    directory = os.path.join(log_dir, "data", f"{topic}-{partition}")
    os.makedirs(directory)
    return open(os.path.join(directory, f"{0:020d}.log"), "wb")


def write_data(directory: str, messages: int, size: int, partitions: int = 2) -> tuple[str, str]:
    """The broker's log dir (segments written directly: C{bench} in C{partitions} partitions, C{bench1} in one)
    and the JSON-lines file, all with the same payloads."""
    log_dir = os.path.join(directory, "broker")
    json_path = os.path.join(directory, "messages.jsonl")
    per = messages // partitions
    with open(json_path, "w") as jsonl, _segment(log_dir, TOPIC1, 0) as single:
        for p in range(partitions):
            with _segment(log_dir, TOPIC, p) as log:
                for chunk in range(0, per, 10_000):
                    payloads = [_payload(p * per + i, size) for i in range(chunk, min(per, chunk + 10_000))]
                    data = encode_message_set(payloads)
                    log.write(data)
                    single.write(data)
                    jsonl.write("".join(json.dumps({"value": v.decode()}) + "\n" for v in payloads))
    with open(os.path.join(log_dir, "data", TOPICS_FILE), "w") as f:
        json.dump({"version": 1, "partitions": {TOPIC: partitions, TOPIC1: 1}}, f)
    return log_dir, json_path


def _message_bytes(size: int) -> int:
    """Bytes one message of C{size} payload bytes takes in the log (all payloads here have that size)."""
    return len(encode_message_set([_payload(0, size)]))


def _tree_cpu_seconds(root: int) -> float:
    """User and system CPU time of process C{root} and all its descendants, with their reaped children (Linux)."""
    children: dict[int, list[int]] = {}
    own: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        own[int(name)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        children.setdefault(int(fields[1]), []).append(int(name))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += own.get(pid, 0)
        stack += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


def _timed(label: str, action, rows: int, results: list) -> None:
    started = time.perf_counter()
    value = action()
    seconds = time.perf_counter() - started
    results.append((label, seconds, rows / seconds, value))


class _Reads:
    """The timed reads of one run: per label, each round's (seconds, CPU seconds, tasks, rows)."""

    def __init__(self, jvm_pid: int, broker: BrokerProcess) -> None:
        self.jvm_pid = jvm_pid
        self.broker = broker
        self.results: dict[str, list[tuple[float, float, int, int]]] = {}

    def time(self, label: str, make_df, action: str, out: str | None = None) -> None:
        df = make_df()
        tasks = df.rdd.getNumPartitions()
        cpu = _tree_cpu_seconds(self.jvm_pid) + self.broker.cpu_seconds()
        started = time.perf_counter()
        if action == "count":
            rows = df.count()
            seconds = time.perf_counter() - started
        else:
            df.write.mode("overwrite").parquet(out)
            seconds = time.perf_counter() - started
            rows = parquet_rows(out)
        cpu = _tree_cpu_seconds(self.jvm_pid) + self.broker.cpu_seconds() - cpu  # the footer count is not timed
        self.results.setdefault(label, []).append((seconds, cpu, tasks, rows))

    def median_rate(self, label: str, n: int, column: int) -> float:
        return statistics.median(n / max(r[column], 1e-9) for r in self.results[label])


def parquet_rows(directory: str) -> int:
    """The rows of the Parquet files Spark wrote under C{directory} (from their footers, nothing is read)."""
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(os.path.join(directory, name)).num_rows
               for name in os.listdir(directory) if name.endswith(".parquet"))


def spark_session(log_path: str):
    """A local[2] session whose JVM (and the Python workers it starts) write their output to C{log_path}, not to
    this terminal; py4j's Python-side log lines go there too."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    conf = (SparkConf().setMaster("local[2]").setAppName("twlog bench spark")
            .set("spark.ui.enabled", "false").set("spark.driver.host", "127.0.0.1")
            .set("spark.driver.bindAddress", "127.0.0.1").set("spark.sql.shuffle.partitions", "2")
            .set("spark.ui.showConsoleProgress", "false").set("spark.driver.memory", "2g"))
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    py4j_logger = logging.getLogger("py4j")  # (py4j's loggers are py4j.*)
    py4j_logger.addHandler(handler)
    py4j_logger.propagate = False
    with open(log_path, "ab") as log:  # the JVM keeps its own descriptor of the file
        gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
    context = SparkContext(conf=conf, gateway=gateway)
    context.setLogLevel("WARN")
    return SparkSession(context)


#: Each round's timed reads (labels), in order.
def _round_labels(min_partitions: int) -> list[str]:
    return ["twlog -> count()", "json  -> count()", "twlog -> parquet", "json  -> parquet", f"{TOPIC1} -> count()",
            f"{TOPIC1} minPartitions {min_partitions} -> count()", "no-I/O Python source -> count()"]


def main(argv: list[str] | None = None, progress: BenchProgress | None = None) -> list[BenchTable]:
    """Run the benchmark; its tables (printed after the progress is gone).

    @param progress: where the phases and reads are counted (default: none).
    """
    parser = argparse.ArgumentParser(description="Spark read throughput of the twlog source vs JSON lines")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--fetch-size", type=int, default=DEFAULT_FETCH_SIZE)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-partitions", type=int, default=8)
    args = parser.parse_args(argv)
    if progress is None:
        progress = BenchProgress(io.StringIO(), live=False)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import twlog

    directory = tempfile.mkdtemp(prefix="twlog-spark-bench-")
    log_fd, log_path = tempfile.mkstemp(prefix="twlog-bench-spark-", suffix=".log")
    os.close(log_fd)
    setup = ["writing the messages (log segments, JSON lines, Avro)", "starting the broker",
             f"starting Spark (local[2]; its output goes to {log_path})", "warming up Spark"]
    progress.step(setup[0], total=len(setup), unit="steps")
    broker = spark = None
    try:
        log_dir, json_path = write_data(directory, args.messages, args.size)
        write_avro_topics(log_dir, args.messages, args.size, _payload)  # the same records as JSON and as Avro
        progress.update(1, setup[1])
        broker = BrokerProcess(log_dir, "--num-partitions", "2")
        progress.update(2, setup[2])
        spark = spark_session(log_path)
        register(spark)
        spark.dataSource.register(FloorSource)
        progress.update(3, setup[3])

        def twlog_df(topic: str = TOPIC, **options: str):
            return (
                spark.read.format("twlog").option("brokers", f"127.0.0.1:{broker.port}").option("subscribe", topic)
                .option("fetchSize", str(args.fetch_size)).options(**options).load()
            )

        def json_df():
            return spark.read.schema("value string").json(json_path)

        n = args.messages // 2 * 2
        # Warm up the Python workers and the JVM's code paths with reads that run to their end: a cut-short
        # one (limit(1)) closes the worker's socket while it still sends rows, and PySpark's daemon prints
        # a BrokenPipeError traceback for that worker.
        warm_up = json.dumps({TOPIC: {f"0-{p}": min(100, n // 2) * _message_bytes(args.size) for p in range(2)}})
        twlog_df(endingOffsets=warm_up).count()
        json_df().count()
        load_before = os.getloadavg()
        reads = _Reads(spark.sparkContext._gateway.proc.pid, broker)
        out = os.path.join(directory, "out")
        labels = _round_labels(args.min_partitions)
        actions = [
            (twlog_df, "count", None), (json_df, "count", None),
            (lambda: twlog_df().select("offset", "value"), "parquet", out + "-twlog"),
            (json_df, "parquet", out + "-json"), (lambda: twlog_df(TOPIC1), "count", None),
            (lambda: twlog_df(TOPIC1, minPartitions=str(args.min_partitions)), "count", None),
            (lambda: spark.read.format("twlog-floor").option("rows", str(n // 2)).load(), "count", None),
        ]
        total = args.rounds * len(actions) + 2
        progress.step("timed reads", total=total, unit="reads")
        done = 0
        for round_no in range(args.rounds):
            for label, (make_df, action, path) in zip(labels, actions):
                progress.update(done, f"round {round_no + 1}/{args.rounds}, read {done + 1}/{total}: {label}")
                reads.time(label, make_df, action, path)
                done += 1
        load_after = os.getloadavg()
        results: list = []

        def timed(label: str, action, rows: int, results: list) -> None:
            nonlocal done
            progress.update(done, f"once, read {done + 1}/{total}: {label}")
            _timed(label, action, rows, results)
            done += 1

        avro_reads(spark, broker.port, n, args.fetch_size, results, timed)  # from_json beside valueFormat avro
        tables = [reads_table(args, n, reads, load_before, load_after), once_table(results, n)]
        tables[-1].note(f"Spark's own output (JVM, log4j, Python workers, py4j): {log_path}")
        return tables
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(directory, ignore_errors=True)


def reads_table(args, n: int, reads: _Reads, load_before, load_after) -> BenchTable:
    """The timed reads: median rows/s and rows per CPU-second, tasks, and the rows each read produced."""
    table = BenchTable(
        f"{n:,} messages of {args.size} bytes; {TOPIC}: 2 partitions, {TOPIC1}: 1 partition; local[2]; "
        f"fetchSize {args.fetch_size}; {args.rounds} rounds, interleaved; medians",
        [Column.label("read"), Column("throughput", "rows/s"), Column("throughput", "rows/CPU-s"),
         Column("Spark tasks", "count"), Column("rows read or written", "rows")])
    for label, runs in reads.results.items():
        rows = sorted({r[3] for r in runs})
        table.add_row(label, f"{reads.median_rate(label, n, 0):,.0f}", f"{reads.median_rate(label, n, 1):,.0f}",
                      f"{runs[0][2]}", "/".join(f"{r:,}" for r in rows))
    for what, twlog_label, json_label in (("count()", "twlog -> count()", "json  -> count()"),
                                          ("parquet", "twlog -> parquet", "json  -> parquet")):
        wall = reads.median_rate(twlog_label, n, 0) / reads.median_rate(json_label, n, 0)
        cpu = reads.median_rate(twlog_label, n, 1) / reads.median_rate(json_label, n, 1)
        table.note(f"twlog / json {what}: {wall:.2f}x rows/s, {cpu:.2f}x rows per CPU-second")
    table.note("(rows/CPU-s: the Spark JVM and its Python workers, plus the broker for twlog reads; rows: count()'s "
               "answer, or the rows in the Parquet files written, from their footers; several values if the rounds "
               "differed)")
    table.note("load average (1, 5, 15 min): before " + " ".join(f"{x:.2f}" for x in load_before)
               + ", after " + " ".join(f"{x:.2f}" for x in load_after))
    return table


def once_table(results: Sequence[tuple[str, float, float, object]], n: int) -> BenchTable:
    """The reads timed once (JSON beside Avro): time, rows/s, records decoded and their checksum."""
    table = BenchTable("decoding once: the same records as JSON (from_json) and as Avro (valueFormat avro)",
                       [Column.label("read"), Column("time", "s"), Column("throughput", "rows/s"),
                        Column("records decoded", "rows"), Column("sum of field i", "checksum")])
    for label, seconds, rate, value in results:
        count, total = value
        table.add_row(label, f"{seconds:.2f}", f"{rate:,.0f}", f"{count:,}", f"{total:,}")
    table.note(f"(sum of field i: each read sums the field i of every record, so Spark must decode them all; record "
               f"k has i = k, so all {n:,} records decoded once sum to n(n-1)/2 = {n * (n - 1) // 2:,})")
    return table


def main_spark(args) -> int:
    """Entry point of C{twlog bench spark}."""
    with BenchProgress() as progress:
        tables = main(["--messages", str(args.messages), "--size", str(args.size), "--fetch-size", str(args.fetch_size),
                       "--rounds", str(args.rounds), "--min-partitions", str(args.min_partitions)], progress)
    for i, table in enumerate(tables):
        if i:
            print()
        table.print()
    return 0


if __name__ == "__main__":
    with BenchProgress() as _progress:
        _tables = main(progress=_progress)
    for _table in _tables:
        _table.print()
