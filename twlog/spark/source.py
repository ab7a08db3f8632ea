# -*- test-case-name: tests.spark.test_source -*-
"""The PySpark data source C{twlog}: topics as DataFrames, batch and streaming.

Register it once per session, then read as from Spark's Kafka source::

    from twlog.spark.source import register
    register(spark)                      # spark.dataSource.register(TwlogDataSource)
    df = (spark.read.format("twlog")
          .option("brokers", "host1:9092")              # any one broker; or .option("zookeeper", "zk:2181")
          .option("subscribe", "clicks")                 # or .option("assign", '{"clicks": ["0-0", "1-0"]}')
          .option("startingOffsets", "earliest")         # "earliest", "latest" or JSON per partition
          .load())

Rows (L{SCHEMA}): C{topic string, partition string, offset long, value binary,
broker int}.  C{partition} is the cluster-wide name C{<broker id>-<partition>}
(a replicated topic's: its number C{"0"} to C{"P-1"}, whatever broker leads it);
C{offset} the message's byte position in that partition's log (messages of a
compressed set share their wrapper's offset, and a byte offset means the same on
every replica); C{broker} the broker id (of a replicated partition, its leader
when the query planned the read).

Options (names as in Spark's Kafka source where they fit; case-insensitive, as
Spark matches them; an unknown option is an error listing the known ones,
L{OPTIONS}):

  - C{brokers} (C{host:port,...}; alias C{kafka.bootstrap.servers}) or
    C{zookeeper} (C{host:port[,...][/chroot]}): where to find the partitions.
    Any one broker address finds the whole cluster (a broker started with
    C{--zookeeper} describes every live broker and partition; brokers without
    ZooKeeper are each asked); with ZooKeeper, the brokers' registrations are
    read (on the driver only).  A partition whose broker cannot be reached
    fails the read, naming it: never a silent subset.
  - C{subscribe} (comma-separated topics) or C{assign} (JSON C{{"topic": ["0-1", "1-0"]}}).
  - C{startingOffsets}: C{earliest} (batch default), C{latest} (stream default),
    or JSON C{{"topic": {"0-1": 1234}}} with -2 for earliest and -1 for latest;
    partitions the JSON does not name start at the earliest offset.  Keys are
    partition names C{<broker id>-<partition>} (a replicated topic's: C{"0"}..) or cluster-wide indexes C{"3"}
    (L{twlog.partition.resolve_partition}); a topic not read, or a key that
    names no partition, is an error listing the valid ones.
  - C{endingOffsets} (batch only): C{latest} (default) or JSON as above;
    partitions not named end at the latest offset.
  - C{maxOffsetsPerTrigger} (streams): a budget in B{bytes of log} per micro-batch
    (offsets are byte positions), spread over partitions in proportion to their
    backlog.  Each partition's cut is moved back to a message boundary on the
    driver by fetching the budget's bytes at the start offset: one fetch per
    partition per trigger whose budget is smaller than the backlog.
  - C{fetchSize}: bytes per fetch (default 8 MiB); a message larger than it fails
    the task with L{FetchSizeTooSmall} naming the option.
  - C{minPartitions} (as Spark's Kafka source): the least number of tasks a read
    (or micro-batch) is split into.  Unset, or not more than the topic partitions
    with data, each such partition is one task; otherwise large partitions'
    ranges are divided in proportion to their size, at message boundaries.
  - C{failOnDataLoss} (default true): a starting offset before the earliest one
    still in the log (deleted by retention) or past the end fails with
    L{OffsetOutOfRange}, and a corrupt stored message fails the task with
    L{InvalidMessage} naming its offset and the offset after it; with false,
    reading starts at the earliest offset, and corrupt messages are logged
    (with their byte range) and skipped.
  - C{timeoutMs}: socket timeout for every broker request (default 30000).
  - C{kafka.security.protocol}, C{kafka.ssl.*}, C{kafka.sasl.*} (Spark's Kafka
    source's names: TLS and SASL, L{twlog.client.kafka_settings}); the files
    named must be readable on the executors too.

Each Spark input partition is one topic partition's C{[start, end)} range, or,
with C{minPartitions}, a piece of it (L{twlog.spark.split}: Spark's Kafka rule,
with the cut points moved to message boundaries by the broker's BOUNDARIES
request, so the rows are the same whatever C{minPartitions}).  Readers fetch
C{fetchSize} bytes at a time and yield one Arrow record batch per fetch (in
slices of L{BATCH_ROWS} rows), built straight from the fetched bytes
(L{twlog.spark.arrow}), so a range is never held whole in memory; every CRC is
checked.  Each fetch is received into one reused buffer, and the next one is
sent as soon as the last one is walked (L{twlog.spark.fetch}): the broker sends
it while the worker builds and hands on the Arrow batches.

Streaming offsets are C{{"topic": {"<broker>-<partition>": offset}}} in Spark's
checkpoint (C{{"topic": {"0": offset}}} for a replicated topic: they stay valid
across leader changes).  A replicated partition's leader is followed: executors
find it again when it answers NotLeader (L{twlog.client.leader}), and the
driver's offset requests do too (L{SourceOptions.on_leader}), so batch and
streaming queries run across a failover.  Every trigger rediscovers the partitions: a new partition (or a new
broker's) first enters the offsets at its earliest offset, and is read from the
next micro-batch on.  C{trigger(availableNow=True)} reads up to the ends seen
when the query starts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    SupportsTriggerAvailableNow,
)

from twlog.client.discovery import PartitionLocation
from twlog.client.leader import LeaderConnection
from twlog.client.options import ClientOptions
from twlog.client.reader import REFRESH_ON, FetchedMessages, PartitionReader
from twlog.errors import (
    ConnectionFailed,
    FetchSizeTooSmall,
    InvalidMessage,
    OffsetNotOnBoundary,
    OffsetOutOfRange,
    UnknownTopic,
)
from twlog.spark.arrow import Rows, record_batch, rows_from_lists, scan_fetch
from twlog.spark.avro import avro_batches, avro_schema, with_values
from twlog.spark.envelope import envelope_schema, open_batches
from twlog.spark.fetch import FetchConnection
from twlog.spark.options import (
    DEFAULT_FETCH_SIZE,
    LEADER_RETRIES,
    LEADER_WAIT_S,
    OPTIONS,
    SourceOptions,
    check_options,
    resolve_offset,
)
from twlog.spark.split import split_ranges
from twlog.spark.workers import WorkersCannotImportTwlog, check_workers_python
from twlog.storage.message import CorruptMessage, iter_messages

_logger = logging.getLogger(__name__)
SCHEMA = "topic string, partition string, offset long, value binary, broker int"

__all__ = ["DEFAULT_FETCH_SIZE", "OPTIONS", "SCHEMA", "TwlogDataSource", "UnknownTopic", "WorkersCannotImportTwlog",
           "check_options", "register"]


def register(spark) -> None:
    """Make C{spark.read.format("twlog")} and C{spark.readStream.format("twlog")} available in C{spark}.

    A session whose workers' Python has twlog found the source by itself (PySpark
    imports the C{pyspark_*} packages it finds, here C{pyspark_twlog}): then this
    does nothing, since registering again would replace that source and make
    Spark warn "The data source twlog replaced a statically registered data source".

    @raise WorkersCannotImportTwlog: the workers' Python (C{PYSPARK_PYTHON}) cannot import twlog.
    """
    try:  # the JVM's data source table (the lookup runs once per session); Spark Connect has no JVM here
        found = spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(TwlogDataSource.name())
    except Exception:
        found = False
    if not found:  # (the workers' Python lacks twlog, or the session predates it: say which, clearly)
        check_workers_python(spark.sparkContext.pythonExec)
        spark.dataSource.register(TwlogDataSource)


class TwlogDataSource(DataSource):
    """The C{twlog} data source: see this module's docstring for options and rows."""

    @classmethod
    def name(cls) -> str:
        return "twlog"

    def schema(self) -> str:
        return avro_schema(self, envelope_schema(SCHEMA, self.options))  # valueFormat avro: the record's fields

    def reader(self, schema) -> DataSourceReader:
        return TwlogBatchReader(with_values(SourceOptions(self.options, stream=False), self))

    def streamReader(self, schema) -> DataSourceStreamReader:
        return TwlogStreamReader(with_values(SourceOptions(self.options, stream=True), self))


# -- reading (on executors) ---------------------------------------------------------------


class TwlogPartition(InputPartition):
    """One topic partition's offset range C{[start, end)} and where to fetch it."""

    def __init__(self, tp: PartitionLocation, start: int, end: int, fetch_size: int, options: ClientOptions,
                 fail_on_data_loss: bool = True, brokers: str | None = None, zookeeper: str | None = None) -> None:
        self.tp = tp
        #: Where the query found the cluster: asked again when the partition's leader must be found again.
        self.brokers = brokers
        self.zookeeper = zookeeper
        self.fail_on_data_loss = fail_on_data_loss
        self.start = start
        self.end = end
        self.fetch_size = fetch_size
        self.options = options

    def __repr__(self) -> str:
        return f"TwlogPartition({self.tp.topic} {self.tp.name} [{self.start}, {self.end}))"


#: Rows per Arrow record batch handed to Spark: a fetch's batch is sliced (no copy) into batches this large,
#: which Spark's JVM converts while the Python worker sends the next (one batch of a whole 8 MiB fetch would
#: leave one side waiting for the other, and no longer fit in the CPU caches).
BATCH_ROWS = 2048


def read_range(part: TwlogPartition) -> Iterator:
    """The messages of C{part} as Arrow record batches of at most L{BATCH_ROWS} rows; CRC checked; stops at
    C{part.end}.

    A thin driver of the partition reader (L{twlog.client.reader}), which holds the rules: each batch is built
    straight from the fetched bytes (L{twlog.spark.arrow}); a fetch holding a corrupt message is decoded message
    by message instead, and the corrupt message fails the task naming its offsets, or, with C{failOnDataLoss}
    false, is logged (with its byte range) and skipped.
    """
    if not isinstance(part, TwlogPartition):
        return  # Spark's placeholder partition when the plan is empty
    tp = part.tp
    # A replicated partition's leader may be killed mid-read: its connection refused, then no leader until the
    # controller moves it (the brokers' session timeout): the read waits for that, as the driver does.
    replicated = tp.tp.fixed_leader is None
    follow = {"refresh_on": (*REFRESH_ON, ConnectionFailed), "max_refreshes": LEADER_RETRIES} if replicated else {}
    with LeaderConnection(tp, brokers=part.brokers, zookeeper=part.zookeeper, options=part.options,
                          wait_s=LEADER_WAIT_S if replicated else 0.0, connect=FetchConnection) as leader:
        reader = PartitionReader(tp.tp, part.start, max_bytes=part.fetch_size, end=part.end, label=tp.name,
                                 on_corrupt="fail" if part.fail_on_data_loss else "skip", decode=_decoder(part, leader),
                                 max_decompressed_bytes=part.options.max_decompressed_bytes,
                                 on_skip=lambda error: _log_skip(part, error), **follow)
        while not reader.done:
            rows = _read_fetch(leader, part, reader)
            if len(rows.offsets):
                batch = _to_batch(part, rows)
                for first in range(0, batch.num_rows, BATCH_ROWS):  # zero-copy slices
                    yield batch.slice(first, BATCH_ROWS)


def _to_batch(part: TwlogPartition, rows: Rows):
    """One fetch's rows as an Arrow record batch of the source's schema (the place for value decoding hooks)."""
    return record_batch(rows, part.tp.topic, part.tp.name, part.tp.leader)


class _LogEnded(Exception):
    """A fetch before the range's end found no bytes."""


def _decoder(part: TwlogPartition, leader: LeaderConnection):
    """The reader's decode for C{part}: Arrow columns straight from the bytes, or (a fetch holding a corrupt or
    compressed message) the reader's messages, before C{part.end}.

    As soon as the walk has found where the fetched whole messages end, the fetch from there is sent ahead
    on C{leader}'s connection, so the broker sends it while the payloads are gathered into Arrow batches and
    handed to Spark (L{FetchConnection.send_ahead}).
    """

    def decode(reader: PartitionReader, data: bytes, offset: int) -> Rows:
        if not data:
            raise _LogEnded()

        def ahead(following: int) -> None:
            if following < part.end and isinstance(leader.connection, FetchConnection):
                leader.connection.send_ahead(reader.fetch_at(following).part(reader.tp))

        rows = scan_fetch(data, offset, part.end, part.options.max_decompressed_bytes, ahead)
        # (data may be a view of the connection's buffer, reused by the next fetch: the slow path gets a copy)
        return rows if rows is not None else _rows(part, reader.decode_messages(bytes(data), offset))

    return decode


def _rows(part: TwlogPartition, fetched: FetchedMessages) -> Rows:
    """The messages of C{fetched} before C{part.end} as rows; a corrupt message within the range fails."""
    if fetched.corrupt is not None and fetched.corrupt.offset < part.end:
        raise fetched.corrupt
    offsets = [m.offset for m in fetched.messages if m.offset < part.end]
    values = [m.payload for m in fetched.messages[: len(offsets)]]
    if len(offsets) < len(fetched.messages):
        return rows_from_lists(offsets, values, part.end, None)
    last = fetched.last_boundary
    return rows_from_lists(offsets, values, fetched.next_offset,
                           last[0] if last is not None and last[1] == fetched.next_offset else None)


def _read_fetch(leader: LeaderConnection, part: TwlogPartition, reader: PartitionReader) -> Rows:
    """One fetch of C{part} by C{reader}: its rows before C{part.end} and the offset to go on from; the reader's
    errors said in the source's terms."""
    tp = part.tp
    where = f"{tp.topic} partition {tp.name} (broker {tp.host}:{tp.port})"
    offset = reader.offset
    try:
        value = leader.read(reader)
    except OffsetNotOnBoundary:  # the reader raises it only at the range's start
        raise OffsetNotOnBoundary(
            f"offset {offset} of {where} is not the start of a message (or the message there is corrupt)"
        ) from None
    except OffsetOutOfRange:
        raise OffsetOutOfRange(
            f"offset {offset} of {where} is no longer in the log while reading [{part.start}, {part.end}) "
            "(deleted by retention?)"
        ) from None
    except _LogEnded:
        raise OffsetOutOfRange(f"{where} ends at offset {offset}, before the end {part.end} of the range being read"
                               ) from None
    except FetchSizeTooSmall as e:
        raise FetchSizeTooSmall(
            f"the message at offset {offset} of {where} is larger than the fetchSize option "
            f"({part.fetch_size} bytes): raise fetchSize ({e})"
        ) from None
    except CorruptMessage as e:
        raise _corrupt_error(part, e) from None
    rows = value if isinstance(value, Rows) else _rows(part, value)
    if rows.next_offset <= offset:
        raise InvalidMessage(f"no whole message at offset {offset} of {where}")
    return rows


def _corrupt_error(part: TwlogPartition, error: CorruptMessage) -> InvalidMessage:
    """The task's error for the corrupt message C{error}, naming it and the option that skips it."""
    bare = CorruptMessage(error.reason, error.offset, error.next_offset)
    return InvalidMessage(f"{part.tp.topic} partition {part.tp.name} (broker {part.tp.host}:{part.tp.port}): "
                         f"{bare}; set failOnDataLoss=false to skip corrupt messages")


def _log_skip(part: TwlogPartition, error: CorruptMessage) -> None:
    _logger.warning("skipping the corrupt message at bytes %s of %s partition %s: %s", error.byte_range,
                    part.tp.topic, part.tp.name, error.reason)


def _split(o: SourceOptions, ranges: list[tuple[PartitionLocation, int, int]]) -> list[TwlogPartition]:
    """One input partition per range with data, large ranges split at message boundaries per minPartitions."""
    return [TwlogPartition(tp, start, end, o.fetch_size, o.client, o.fail_on_data_loss, o.brokers, o.zookeeper)
            for tp, start, end in split_ranges(ranges, o.min_partitions, o.boundaries)]


# -- batch ---------------------------------------------------------------------------------


class TwlogBatchReader(DataSourceReader):
    """A batch read: one input partition per topic partition with data between the starting and ending offsets."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[TwlogPartition]:
        o = self.options
        plan = []
        for tp in o.partitions():
            earliest, latest = o.bounds(tp)
            start = o.start(tp, earliest, latest)
            end = resolve_offset(o.ending, tp, earliest, latest, missing=latest)
            if end > latest:
                raise OffsetOutOfRange(
                    f"ending offset {end} of {tp.topic} partition {tp.name} is past the end of the log {latest}"
                )
            plan.append((tp, start, end))
        return _split(o, plan)

    def read(self, partition: TwlogPartition) -> Iterator:
        return avro_batches(self.options, partition, open_batches(read_range(partition), self.options.envelope))


# -- streaming ---------------------------------------------------------------------------------


def _get(offsets: dict, tp: PartitionLocation) -> int | None:
    return offsets.get(tp.topic, {}).get(tp.name)


def _put(offsets: dict, tp: PartitionLocation, value: int) -> None:
    offsets.setdefault(tp.topic, {})[tp.name] = value


def _sorted(offsets: dict) -> dict:
    return {t: dict(sorted(parts.items())) for t, parts in sorted(offsets.items())}


class TwlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches between checkpointed offsets C{{"topic": {"<partition name>": offset}}}."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: dict | None = None

    def initialOffset(self) -> dict:
        o = self.options
        offsets: dict = {}
        for tp in o.partitions():
            earliest, latest = o.bounds(tp)
            _put(offsets, tp, o.start(tp, earliest, latest))
        return _sorted(offsets)

    def getDefaultReadLimit(self):
        if self.options.max_bytes_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxBytes(self.options.max_bytes_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        target: dict = {}
        for tp in self.options.partitions():
            _put(target, tp, self.options.bounds(tp)[1])
        self._target = target

    def latestOffset(self, start: dict, limit=None) -> dict:
        o = self.options
        parts = o.partitions()
        if self._target is not None:
            parts = [tp for tp in parts if _get(self._target, tp) is not None]
        end = json.loads(json.dumps(start))
        new = [tp for tp in parts if _get(start, tp) is None]
        if new:
            # New partitions (or brokers) enter at their earliest offset; they are read from the next batch.
            for tp in new:
                _put(end, tp, o.bounds(tp)[0])
            return _sorted(end)
        backlog: dict[PartitionLocation, int] = {}
        for tp in parts:
            latest = o.bounds(tp)[1]
            if self._target is not None:
                latest = min(latest, _get(self._target, tp))
            begin = _get(start, tp)
            if latest > begin:
                backlog[tp] = latest - begin
                _put(end, tp, latest)
        budget = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        total = sum(backlog.values())
        if budget is not None and total > budget:
            for tp, available in backlog.items():
                share = max(1, budget * available // total)
                if share < available:
                    _put(end, tp, self._boundary(tp, _get(start, tp), share))
        return _sorted(end)

    def _boundary(self, tp: PartitionLocation, offset: int, budget: int) -> int:
        """The end of the last whole message within C{budget} bytes from C{offset} (at least one message)."""
        def ask(c) -> int:
            try:
                data = c.fetch(tp.topic, tp.number, offset, budget) if budget >= 4 else b""
                messages = list(iter_messages(data, offset, deep=False))
            except FetchSizeTooSmall:
                messages = []
            if not messages:
                data = c.fetch(tp.topic, tp.number, offset, self.options.fetch_size)
                messages = list(iter_messages(data, offset, deep=False))[:1]
            return messages[-1].next_offset if messages else offset

        return self.options.on_leader(tp, ask)

    def partitions(self, start: dict, end: dict) -> list[TwlogPartition]:
        o = self.options
        known = {(tp.topic, tp.name): tp for tp in o.partitions()}
        plan: list[tuple[PartitionLocation, int, int]] = []
        for topic, parts in sorted(end.items()):
            for name, stop in sorted(parts.items()):
                begin = start.get(topic, {}).get(name, stop)
                if stop <= begin:
                    continue
                tp = known.get((topic, name))
                if tp is None:
                    raise UnknownTopic(
                        f"partition {name} of topic {topic!r} has offsets [{begin}, {stop}) to read, "
                        "but no broker holds it now"
                    )
                plan.append((tp, begin, stop))
        return _split(o, plan)

    def read(self, partition: TwlogPartition) -> Iterator:
        return avro_batches(self.options, partition, open_batches(read_range(partition), self.options.envelope))

    def commit(self, end: dict) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint."""
