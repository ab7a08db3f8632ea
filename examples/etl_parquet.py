#!/usr/bin/env python
"""The paper's data load job (section 4) on Spark: load a topic into compressed Parquet, grouped by a field.

Each run reads the topic from the offsets the last successful run reached up to
the ends the brokers report now, parses the JSON payloads, and appends Parquet
(zstd by default) partitioned by one field of the messages (``page`` by
default).  Only when the write has committed does it store the offsets it
reached, in ``<output>/_twlog_offsets.json`` (Spark ignores ``_`` files),
written to a temporary file and renamed over the old one, so the next run
starts where the last successful one ended.  A failed run stores nothing, and
the next run reads its range again.

The one window left: a crash after the Parquet commit and before the rename
makes the next run load that range again.  The output keeps the ``partition``
and ``offset`` columns, so such duplicates can be recognised (they share both).

Run::

    SPARK_LOCAL_IP=127.0.0.1 python examples/etl_parquet.py --brokers localhost:9092 \\
        --topic clicks --output /data/clicks --field page
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

from twlog.client.discovery import discover
from twlog.client.sync import SyncConnection
from twlog.protocol.codec import LATEST

OFFSETS_FILE = "_twlog_offsets.json"


def offsets_path(output: str) -> str:
    return os.path.join(output, OFFSETS_FILE)


def load_offsets(output: str) -> dict | None:
    """The offsets the last successful run reached, or None before the first."""
    try:
        with open(offsets_path(output)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def store_offsets(output: str, offsets: dict) -> None:
    """Write C{offsets} next to the data atomically: a temporary file, fsynced, renamed over the old one."""
    os.makedirs(output, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=output, prefix="_twlog_offsets.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(offsets, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, offsets_path(output))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def end_offsets(topic: str, brokers: str | None = None, zookeeper: str | None = None) -> dict:
    """The latest (flushed end) offset of every partition of C{topic} now: this run's end."""
    ends: dict = {topic: {}}
    for tp in discover([topic], brokers=brokers, zookeeper=zookeeper):
        with SyncConnection(tp.host, tp.port) as c:
            ends[topic][tp.name] = c.offset(tp.topic, tp.partition, LATEST)
    return ends


def run(
    spark, topic: str, output: str, *, brokers: str | None = None, zookeeper: str | None = None,
    field: str = "page", compression: str = "zstd",
) -> dict:
    """Load what is new in C{topic} into C{output}; returns the offsets stored (this run's end)."""
    from pyspark.sql import functions as F

    from twlog.spark.source import register  # (it imports pyspark)

    register(spark)
    start = load_offsets(output)
    end = end_offsets(topic, brokers=brokers, zookeeper=zookeeper)
    reader = spark.read.format("twlog").option("subscribe", topic)
    reader = reader.option("brokers", brokers) if brokers else reader.option("zookeeper", zookeeper)
    # Partitions the stored offsets do not name (new since the last run) start at the earliest offset.
    df = (
        reader.option("startingOffsets", json.dumps(start) if start else "earliest")
        .option("endingOffsets", json.dumps(end))
        .load()
    )
    payload = F.col("value").cast("string")
    rows = df.select(
        F.get_json_object(payload, f"$.{field}").alias(field),
        payload.alias("json"),
        "partition",
        "offset",
    )
    rows.write.mode("append").partitionBy(field).option("compression", compression).parquet(output)
    store_offsets(output, end)  # only reached when the write has committed
    return end


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--brokers", help="host:port,...")
    where.add_argument("--zookeeper", help="host:port[/chroot]")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True, help="the Parquet directory (offsets are stored inside it)")
    parser.add_argument("--field", default="page", help="the JSON field to partition the output by")
    parser.add_argument("--compression", default="zstd", choices=["zstd", "snappy", "gzip", "none"])
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"twlog-etl-{args.topic}").getOrCreate()
    try:
        end = run(
            spark, args.topic, args.output, brokers=args.brokers, zookeeper=args.zookeeper, field=args.field,
            compression=args.compression,
        )
        print(json.dumps(end, sort_keys=True))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
