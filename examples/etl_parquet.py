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

A payload that is not a JSON object is handled as ``--on-bad-json`` says:
``fail`` (the default) stops the run before anything is written, naming the
first such message's partition and offset; ``skip`` leaves such messages out;
``null`` writes them with a null field, that is under
``<field>=__HIVE_DEFAULT_PARTITION__`` (Spark's directory for null), where JSON
objects without the field go too.  Each run prints how many rows it wrote and
how many payloads were not JSON.

``--brokers`` may name any one broker of the cluster: a broker started with
``--zookeeper`` (as ``twlog local``'s are) describes every partition of the
topic, and one whose broker cannot be reached stops the run, naming it.

Run (from the checkout, with twlog's venv: Spark's Python workers must import
twlog, so PYSPARK_PYTHON defaults to the Python running this script)::

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python examples/etl_parquet.py --brokers localhost:9092 \\
        --topic clicks --output /data/clicks --field page [--on-bad-json fail|skip|null]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass

from twlog.client.discovery import discover
from twlog.client.sync import SyncConnection
from twlog.errors import TwlogError
from twlog.protocol.codec import LATEST

OFFSETS_FILE = "_twlog_offsets.json"
#: What --on-bad-json accepts: stop the run, leave the message out, or write it with a null field.
ON_BAD_JSON = ("fail", "skip", "null")


class BadPayload(Exception):
    """With C{on_bad_json="fail"}: a message's payload is not a JSON object; nothing was written."""


@dataclass(frozen=True)
class Loaded:
    """What one run did."""

    #: The offsets stored: this run's end, where the next run starts.
    offsets: dict
    #: Rows written to the Parquet output.
    rows: int
    #: Payloads that were not JSON objects (left out with C{skip}, written with a null field with C{null}).
    not_json: int
    #: Rows written with no value for the field (under C{<field>=__HIVE_DEFAULT_PARTITION__}).
    no_field: int


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
            ends[topic][tp.name] = c.offset(tp.topic, tp.number, LATEST)
    return ends


def run(
    spark, topic: str, output: str, *, brokers: str | None = None, zookeeper: str | None = None,
    field: str = "page", compression: str = "zstd", on_bad_json: str = "fail",
) -> Loaded:
    """Load what is new in C{topic} into C{output}; the offsets stored are this run's end.

    @raise BadPayload: with C{on_bad_json="fail"}, when a payload is not a JSON object.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from twlog.spark.source import register  # (it imports pyspark)

    if on_bad_json not in ON_BAD_JSON:
        raise ValueError(f"on_bad_json is one of {', '.join(ON_BAD_JSON)}, not {on_bad_json!r}")
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
        F.json_object_keys(payload).isNotNull().alias("_object"),  # null for bad JSON and for non-objects
    ).persist(StorageLevel.MEMORY_AND_DISK)  # counted, then written: the topic is read once
    try:
        counts = {
            (r["_object"], r["_field"]): r["count"]
            for r in rows.groupBy("_object", F.col(field).isNotNull().alias("_field")).count().collect()
        }
        not_json = sum(n for (is_object, _), n in counts.items() if not is_object)
        if not_json and on_bad_json == "fail":
            first = rows.filter(~F.col("_object")).orderBy("partition", "offset").first()
            raise BadPayload(
                f"{not_json} message(s) of {topic} are not JSON objects, the first at partition {first.partition} "
                f"offset {first.offset}: {first.json[:60]!r}; nothing was written (--on-bad-json skip leaves "
                "them out, --on-bad-json null writes them with a null field)"
            )
        kept = [key for key in counts if key[0] or on_bad_json == "null"]
        selected = rows if on_bad_json == "null" else rows.filter(F.col("_object"))
        (selected.drop("_object").write.mode("append").partitionBy(field).option("compression", compression)
         .parquet(output))
    finally:
        rows.unpersist()
    store_offsets(output, end)  # only reached when the write has committed
    return Loaded(
        offsets=end,
        rows=sum(counts[key] for key in kept),
        not_json=not_json,
        no_field=sum(counts[key] for key in kept if not key[1]),
    )


def summary(loaded: Loaded, output: str, field: str, on_bad_json: str) -> str:
    """What a run prints: rows written, payloads that were not JSON, the offsets stored."""
    lines = [f"wrote {loaded.rows} rows to {output}, partitioned by {field}"]
    if loaded.no_field:
        lines.append(f"{loaded.no_field} of them have no {field} (under {field}=__HIVE_DEFAULT_PARTITION__)")
    if loaded.not_json:
        done = "left out" if on_bad_json == "skip" else f"written with a null {field}"
        lines.append(f"{loaded.not_json} payloads were not JSON objects: {done}")
    lines.append(f"offsets stored: {json.dumps(loaded.offsets, sort_keys=True)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--brokers", help="host:port,... (any one broker of a cluster following ZooKeeper)")
    where.add_argument("--zookeeper", help="host:port[/chroot]")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True, help="the Parquet directory (offsets are stored inside it)")
    parser.add_argument("--field", default="page", help="the JSON field to partition the output by")
    parser.add_argument("--compression", default="zstd", choices=["zstd", "snappy", "gzip", "none"])
    parser.add_argument("--on-bad-json", default="fail", choices=ON_BAD_JSON,
                        help="a payload that is not a JSON object: fail the run before writing (default), skip it, "
                        "or write it with a null field")
    args = parser.parse_args(argv)
    try:  # an unreachable cluster, or no such topic, is one line before Spark starts (and prints its own lines)
        discover([args.topic], brokers=args.brokers, zookeeper=args.zookeeper)
    except TwlogError as e:
        print(f"etl_parquet: {e}", file=sys.stderr)
        return 1
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers import twlog
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"twlog-etl-{args.topic}").getOrCreate()
    try:
        loaded = run(
            spark, args.topic, args.output, brokers=args.brokers, zookeeper=args.zookeeper, field=args.field,
            compression=args.compression, on_bad_json=args.on_bad_json,
        )
    except (BadPayload, TwlogError) as e:  # (a broker lost between the check and the read, say)
        print(f"etl_parquet: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(summary(loaded, args.output, args.field, args.on_bad_json))
    return 0


if __name__ == "__main__":
    sys.exit(main())
