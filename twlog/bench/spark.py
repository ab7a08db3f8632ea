# -*- test-case-name: tests.cli.test_main -*-
"""C{twlog bench spark}: Spark reading through the twlog source beside its JSON-lines reader, same messages.

Not a test: a measurement, run by hand::

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python -m twlog.bench.spark [--messages 1000000] [--size 200]

It writes C{messages} messages of C{size} bytes (ASCII, JSON-safe) straight into
two partitions' log segments, starts a broker on them as a separate process
(L{twlog.bench.broker.BrokerProcess}), writes the same payloads as JSON lines
(C{{"value": "..."}}), and times, with one local[2] session, each source into
C{count()} and into snappy Parquet.  Prints a table of seconds and rows/s.
The entry points are L{main} (an argv list) and L{main_spark} (C{twlog bench spark}'s arguments).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from twlog.bench.avro import avro_reads, write_avro_topics
from twlog.bench.broker import BrokerProcess
from twlog.bench.common import BenchProgress
from twlog.spark.source import register
from twlog.storage.message import encode_message_set

TOPIC = "bench"


def _payload(i: int, size: int) -> bytes:
    head = f"{i:010d}-".encode()
    return head + b"x" * (size - len(head))


def write_data(directory: str, messages: int, size: int, partitions: int = 2) -> tuple[str, str]:
    """The broker's log dir (segments written directly) and the JSON-lines file, with the same payloads."""
    log_dir = os.path.join(directory, "broker")
    json_path = os.path.join(directory, "messages.jsonl")
    per = messages // partitions
    with open(json_path, "w") as jsonl:
        for p in range(partitions):
            segment_dir = os.path.join(log_dir, "data", f"{TOPIC}-{p}")
            os.makedirs(segment_dir)
            with open(os.path.join(segment_dir, f"{0:020d}.log"), "wb") as log:
                for chunk in range(0, per, 10_000):
                    payloads = [_payload(p * per + i, size) for i in range(chunk, min(per, chunk + 10_000))]
                    log.write(encode_message_set(payloads))
                    jsonl.write("".join(json.dumps({"value": v.decode()}) + "\n" for v in payloads))
    return log_dir, json_path


def _message_bytes(size: int) -> int:
    """Bytes one message of C{size} payload bytes takes in the log (all payloads here have that size)."""
    return len(encode_message_set([_payload(0, size)]))


def _timed(label: str, action, rows: int, results: list) -> None:
    started = time.perf_counter()
    value = action()
    seconds = time.perf_counter() - started
    results.append((label, seconds, rows / seconds, value))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Spark read throughput of the twlog source vs JSON lines")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--fetch-size", type=int, default=1024 * 1024)
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import twlog
    from pyspark.sql import SparkSession

    directory = tempfile.mkdtemp(prefix="twlog-spark-bench-")
    log_dir, json_path = write_data(directory, args.messages, args.size)
    write_avro_topics(log_dir, args.messages, args.size, _payload)  # the same records as JSON and as Avro
    broker = BrokerProcess(log_dir, "--num-partitions", "2")
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        def twlog_df(**options: str):
            return (
                spark.read.format("twlog").option("brokers", f"127.0.0.1:{broker.port}").option("subscribe", TOPIC)
                .option("fetchSize", str(args.fetch_size)).options(**options).load()
            )

        def json_df():
            return spark.read.schema("value string").json(json_path)

        n = args.messages // 2 * 2
        # Warm up the Python workers and the JVM's code paths with a read that runs to its end: a cut-short
        # one (limit(1)) closes the worker's socket while it still sends rows, and PySpark's daemon prints
        # a BrokenPipeError traceback for that worker.
        warm_up = json.dumps({TOPIC: {f"0-{p}": min(100, n // 2) * _message_bytes(args.size) for p in range(2)}})
        twlog_df(endingOffsets=warm_up).count()
        results: list = []
        _timed("twlog -> count()", lambda: twlog_df().count(), n, results)
        _timed("json  -> count()", lambda: json_df().count(), n, results)
        out = os.path.join(directory, "out")
        _timed("twlog -> parquet", lambda: twlog_df().select("offset", "value").write.parquet(out + "-twlog"), n,
               results)
        _timed("json  -> parquet", lambda: json_df().write.parquet(out + "-json"), n, results)
        avro_reads(spark, broker.port, n, args.fetch_size, results, _timed)  # from_json beside valueFormat avro
        print(f"{n} messages of {args.size} bytes, 2 partitions, local[2], fetchSize {args.fetch_size}")
        print(f"{'read':<20}{'seconds':>10}{'rows/s':>12}  result")
        for label, seconds, rate, value in results:
            print(f"{label:<20}{seconds:>10.2f}{rate:>12,.0f}  {value if value is not None else ''}")
    finally:
        spark.stop()
        broker.stop()


def main_spark(args) -> int:
    """Entry point of C{twlog bench spark}."""
    with BenchProgress() as progress:
        progress.step(f"writing {args.messages:,} messages, then timing Spark's reads of them (local[2])")
        main(["--messages", str(args.messages), "--size", str(args.size), "--fetch-size", str(args.fetch_size)])
    return 0


if __name__ == "__main__":
    main()
