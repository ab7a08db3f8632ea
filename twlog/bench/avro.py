# -*- test-case-name: tests.integration.test_schema_registry -*-
"""The Avro part of C{twlog bench spark}: the twlog source decoding Avro (valueFormat avro) beside C{from_json}.

The same records (C{{"i": long, "s": string}}, C{s} the bench's payload text) are written to two
topics next to the bench's own: C{bench-json} as JSON text and C{bench-avro} in Confluent's wire
format (schema id 1).  A C{twlog registry} process on the bench broker registers the schema (a fresh
registry gives it id 1), then each topic is read into an aggregate over the decoded fields, so
Spark cannot skip the decoding: C{from_json} on the JSON topic's C{value}, and the source's own Avro
decoding (on the executors) on the Avro topic.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from twlog.avro.client import SyncRegistryClient
from twlog.avro.schema import AvroSchema
from twlog.avro.serde import encode
from twlog.avro.wire import frame
from twlog.coord.zkserver import free_port
from twlog.storage.message import encode_message_set

SCHEMA = {"type": "record", "name": "BenchRecord", "fields": [{"name": "i", "type": "long"},
                                                              {"name": "s", "type": "string"}]}
JSON_TOPIC, AVRO_TOPIC = "bench-json", "bench-avro"
#: The id a fresh registry gives the first schema it registers.
SCHEMA_ID = 1


def write_avro_topics(log_dir: str, messages: int, size: int, payload: Callable[[int, int], bytes],
                      partitions: int = 2) -> None:
    """Write the records as JSON text and as Avro, C{partitions} partitions each, into the broker's log dir."""
    schema = AvroSchema.parse(SCHEMA)
    per = messages // partitions
    for topic, encoder in ((JSON_TOPIC, lambda r: json.dumps(r).encode()),
                           (AVRO_TOPIC, lambda r: frame(SCHEMA_ID, encode(schema, r)))):
        for p in range(partitions):
            segment_dir = os.path.join(log_dir, "data", f"{topic}-{p}")
            os.makedirs(segment_dir)
            with open(os.path.join(segment_dir, f"{0:020d}.log"), "wb") as log:
                for chunk in range(0, per, 10_000):
                    records = [{"i": p * per + i, "s": payload(p * per + i, size).decode()}
                               for i in range(chunk, min(per, chunk + 10_000))]
                    log.write(encode_message_set([encoder(r) for r in records]))


class RegistryProcess:
    """A C{twlog registry} child on the bench broker, on a free loopback port."""

    def __init__(self, broker_port: int, timeout_s: float = 30.0) -> None:
        self.port = free_port()
        self._output = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "twlog.cli", "registry", "--broker", f"127.0.0.1:{broker_port}", "--port",
             str(self.port)], stdout=self._output, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._output.seek(0)
            if re.search(rb"schema registry on http://", self._output.read()):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("twlog registry did not start")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self._output.close()


def avro_reads(spark, broker_port: int, rows: int, fetch_size: int, results: list, timed: Callable) -> None:
    """Time C{from_json} on the JSON topic and the source's Avro decoding on the Avro topic, same aggregate; each
    result's value is (records decoded, sum of their field i)."""
    from pyspark.sql import functions as F

    registry = RegistryProcess(broker_port)
    try:
        schema_id = SyncRegistryClient(registry.url).register(f"{AVRO_TOPIC}-value", json.dumps(SCHEMA))
        if schema_id != SCHEMA_ID:
            raise RuntimeError(f"the fresh registry gave the schema id {schema_id}, not {SCHEMA_ID}")

        def read(topic: str, **options: str):
            return (spark.read.format("twlog").option("brokers", f"127.0.0.1:{broker_port}")
                    .option("subscribe", topic).option("fetchSize", str(fetch_size)).options(**options).load())

        def from_json():
            values = read(JSON_TOPIC).select(F.from_json(F.col("value").cast("string"), "i long, s string").alias("r"))
            result = values.agg(F.count("r.i"), F.sum("r.i"), F.max(F.length("r.s"))).collect()[0]
            return result[0], result[1]

        def avro():
            values = read(AVRO_TOPIC, valueFormat="avro", schemaRegistryUrl=registry.url)
            result = values.agg(F.count("i"), F.sum("i"), F.max(F.length("s"))).collect()[0]
            return result[0], result[1]

        timed("json  -> from_json", from_json, rows, results)
        timed("avro  -> columns", avro, rows, results)
    finally:
        registry.stop()
