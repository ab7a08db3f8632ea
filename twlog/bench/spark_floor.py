# -*- test-case-name: tests.integration.test_spark_bench -*-
"""The ceiling of a PySpark Python data source on this machine: C{twlog bench spark}'s "no I/O" row.

L{FloorSource} (C{spark.read.format("twlog-floor")}) has the twlog source's
schema and yields, per input partition, Arrow record batches of the same shape
and size as the twlog source's (L{twlog.spark.source.BATCH_ROWS} rows, built
once by L{twlog.spark.arrow}) without fetching or parsing anything.  What it
costs is what Spark's Python data source path costs by itself (the Python
worker sending Arrow batches, the JVM turning every row into an UnsafeRow):
the bound any Python source, twlog's included, reads under.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from twlog.spark.arrow import record_batch, scan_fetch
from twlog.spark.source import BATCH_ROWS, SCHEMA
from twlog.storage.message import encode_message_set

__all__ = ["FloorSource"]


class FloorSource(DataSource):
    """Options: C{rows} (per input partition), C{partitions}, C{size} (payload bytes)."""

    @classmethod
    def name(cls) -> str:
        return "twlog-floor"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> DataSourceReader:
        return _FloorReader(int(self.options["rows"]), int(self.options.get("partitions", "2")),
                            int(self.options.get("size", "200")))


class _FloorReader(DataSourceReader):
    def __init__(self, rows: int, partitions: int, size: int) -> None:
        self.rows, self.count, self.size = rows, partitions, size

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.count)]

    def read(self, partition: InputPartition) -> Iterator:
        payload = b"x" * self.size
        data = encode_message_set([payload] * BATCH_ROWS)
        batch = record_batch(scan_fetch(data, 0, len(data), len(data)), "bench", "0-0", 0)
        left = self.rows
        while left > 0:
            yield batch.slice(0, min(left, BATCH_ROWS))
            left -= BATCH_ROWS
