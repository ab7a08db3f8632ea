"""examples/etl_parquet.py, the paper's data load job: run twice, each message loaded once."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

from twisted.internet import reactor
from twisted.internet.utils import getProcessOutputAndValue

from tests.integration.broker import start_broker
from tests.integration.spark import spark_call, spark_env
from tests.integration.test_spark_source import SparkTestCase, produce

_EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "etl_parquet.py")


def load_example():
    spec = importlib.util.spec_from_file_location("etl_parquet", _EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as importlib's recipe does (dataclasses look their module up)
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
        self.assertEqual(json.load(open(os.path.join(output, "_twlog_offsets.json"))), first.offsets)
        self.assertEqual((first.rows, first.not_json, first.no_field), (40, 0, 0))
        await produce(self, brokers, "clicks", clicks(40, 25), partition=1)
        second = await spark_call(etl.run, self.spark, "clicks", output, brokers=brokers)
        self.assertGreater(second.offsets["clicks"]["1-1"], first.offsets["clicks"]["1-1"])
        self.assertEqual(second.offsets["clicks"]["1-0"], first.offsets["clicks"]["1-0"])
        self.assertEqual(second.rows, 25)
        third = await spark_call(etl.run, self.spark, "clicks", output, brokers=brokers)  # nothing new
        self.assertEqual((third.offsets, third.rows), (second.offsets, 0))

        rows = await spark_call(lambda: self.spark.read.parquet(output).collect())
        loaded = sorted(json.loads(r.json)["n"] for r in rows)
        self.assertEqual(loaded, list(range(65)))
        self.assertTrue(all(json.loads(r.json)["page"] == r.page for r in rows))
        pages = sorted(d for d in os.listdir(output) if d.startswith("page="))
        self.assertEqual(pages, ["page=p0", "page=p1", "page=p2"])
        files = [f for d in os.listdir(output) if d.startswith("page=") for f in os.listdir(os.path.join(output, d))]
        self.assertTrue(files and all(".zstd." in f for f in files if f.endswith(".parquet")), files)

    async def test_bad_json(self):
        """Payloads that are not JSON objects: --on-bad-json fail writes nothing and names the first one; skip leaves
        them out; null writes them under the null partition, with JSON objects that lack the field."""
        etl = load_example()
        one = await start_broker(self, broker_id=1, num_partitions=1)
        brokers = f"127.0.0.1:{one.broker.port}"
        bad = [b"hello", b"[1, 2]", b'{"page": ']
        await produce(self, brokers, "mixed", clicks(0, 4) + bad[:1] + [b'{"n": 4}'] + bad[1:])

        output = os.path.abspath(self.mktemp())
        e = await self.assertFailure(spark_call(etl.run, self.spark, "mixed", output, brokers=brokers),
                                     etl.BadPayload)
        self.assertIn("3 message(s) of mixed are not JSON objects, the first at partition 1-0 offset ", str(e))
        self.assertIn("'hello'; nothing was written", str(e))
        self.assertFalse(os.path.exists(os.path.join(output, etl.OFFSETS_FILE)))

        skipped = await spark_call(etl.run, self.spark, "mixed", output, brokers=brokers, on_bad_json="skip")
        self.assertEqual((skipped.rows, skipped.not_json, skipped.no_field), (5, 3, 1))
        written = await spark_call(lambda: self.spark.read.parquet(output).collect())
        self.assertEqual(sorted(json.loads(r.json)["n"] for r in written), [0, 1, 2, 3, 4])

        nulls = os.path.abspath(self.mktemp())
        kept = await spark_call(etl.run, self.spark, "mixed", nulls, brokers=brokers, on_bad_json="null")
        self.assertEqual((kept.rows, kept.not_json, kept.no_field), (8, 3, 4))
        written = await spark_call(lambda: self.spark.read.parquet(nulls).collect())
        self.assertEqual(sorted(r.json for r in written if r.page is None), sorted([b'{"n": 4}'.decode()]
                                                                                  + [b.decode() for b in bad]))
        self.assertIn("page=__HIVE_DEFAULT_PARTITION__", os.listdir(nulls))
        self.assertEqual(etl.summary(kept, nulls, "page", "null").splitlines()[:3], [
            f"wrote 8 rows to {nulls}, partitioned by page",
            "4 of them have no page (under page=__HIVE_DEFAULT_PARTITION__)",
            "3 payloads were not JSON objects: written with a null page",
        ])

    async def test_command_line(self):
        """Run as a script: it prints the rows written per run; a payload that is not JSON is one line and exit 1."""
        one = await start_broker(self, broker_id=1, num_partitions=1)
        brokers = f"127.0.0.1:{one.broker.port}"
        await produce(self, brokers, "clicks", clicks(0, 6) + [b"not json"])
        output = os.path.abspath(self.mktemp())
        argv = [_EXAMPLE, "--brokers", brokers, "--topic", "clicks", "--output", output]
        env = spark_env(dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"))
        env.pop("PYSPARK_PYTHON", None)  # the script's own default: the Python running it
        out, err, status = await getProcessOutputAndValue(sys.executable, argv, env=env, reactor=reactor)
        self.assertEqual((status, out), (1, b""), err[-2000:])
        self.assertEqual(err.strip().splitlines()[-1][:70],
                         b"etl_parquet: 1 message(s) of clicks are not JSON objects, the first at")
        out, err, status = await getProcessOutputAndValue(sys.executable, argv + ["--on-bad-json", "skip"], env=env,
                                                          reactor=reactor)
        self.assertEqual(status, 0, err[-2000:])
        lines = out.decode().splitlines()
        self.assertEqual(lines[:2], [f"wrote 6 rows to {output}, partitioned by page",
                                     "1 payloads were not JSON objects: left out"])
        self.assertTrue(lines[2].startswith('offsets stored: {"clicks": {"1-0": '), lines)
        self.assertNotIn(b"Traceback", err)
        self.assertNotIn(b"replaced a statically registered data source", err)


class ClusterETLTests(SparkTestCase):
    async def test_one_broker_address_loads_the_whole_topic(self):
        """--brokers with one broker of a 2-broker cluster loads every partition (once it loaded half)."""
        from tests.integration.broker import wait_until
        from tests.integration.groups import registered, start_brokers
        from tests.integration.zookeeper import connect

        etl = load_example()
        zk = await connect(self)
        brokers = await start_brokers(self, zk.hosts, 2, partitions=2)
        for n, broker in enumerate(brokers):
            for partition in range(2):
                await broker.produce("clicks", partition, clicks(100 * (2 * n + partition), 10))
        await registered(zk, "clicks", brokers)
        for broker in brokers:
            view = broker.service.cluster
            await wait_until(lambda view=view: view.ready and len(view.holders("clicks")) == 2)
        output = os.path.abspath(self.mktemp())
        loaded = await spark_call(etl.run, self.spark, "clicks", output, brokers=f"127.0.0.1:{brokers[1].port}")
        self.assertEqual(loaded.rows, 40)
        self.assertEqual(sorted(loaded.offsets["clicks"]), ["0-0", "0-1", "1-0", "1-1"])
