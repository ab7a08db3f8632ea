"""examples/etl_parquet.py, the paper's data load job: run twice, each message loaded once."""

from __future__ import annotations

import importlib.util
import json
import os

from tests.integration.broker import start_broker
from tests.integration.spark import spark_call
from tests.integration.test_spark_source import SparkTestCase, produce

_EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "etl_parquet.py")


def load_example():
    spec = importlib.util.spec_from_file_location("etl_parquet", _EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clicks(start: int, n: int) -> list[bytes]:
    return [json.dumps({"page": f"p{i % 3}", "n": i}).encode() for i in range(start, start + n)]


class ETLTests(SparkTestCase):
    async def test_runs_resume(self):
        """The second run loads only what came after the first; the output is grouped by page, zstd-compressed."""
        etl = load_example()
        one = await start_broker(self, broker_id=1, num_partitions=2)
        brokers = f"127.0.0.1:{one.broker.port}"
        output = os.path.abspath(self.mktemp())
        await produce(self, brokers, "clicks", clicks(0, 30), partition=0)
        await produce(self, brokers, "clicks", clicks(30, 10), partition=1)
        first = await spark_call(etl.run, self.spark, "clicks", output, brokers=brokers)
        self.assertEqual(json.load(open(os.path.join(output, "_twlog_offsets.json"))), first)
        await produce(self, brokers, "clicks", clicks(40, 25), partition=1)
        second = await spark_call(etl.run, self.spark, "clicks", output, brokers=brokers)
        self.assertGreater(second["clicks"]["1-1"], first["clicks"]["1-1"])
        self.assertEqual(second["clicks"]["1-0"], first["clicks"]["1-0"])
        third = await spark_call(etl.run, self.spark, "clicks", output, brokers=brokers)  # nothing new
        self.assertEqual(third, second)

        rows = await spark_call(lambda: self.spark.read.parquet(output).collect())
        loaded = sorted(json.loads(r.json)["n"] for r in rows)
        self.assertEqual(loaded, list(range(65)))
        self.assertTrue(all(json.loads(r.json)["page"] == r.page for r in rows))
        pages = sorted(d for d in os.listdir(output) if d.startswith("page="))
        self.assertEqual(pages, ["page=p0", "page=p1", "page=p2"])
        files = [f for d in os.listdir(output) if d.startswith("page=") for f in os.listdir(os.path.join(output, d))]
        self.assertTrue(files and all(".zstd." in f for f in files if f.endswith(".parquet")), files)
