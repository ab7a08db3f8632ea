# -*- test-case-name: tests.spark.test_options,tests.integration.test_spark_source -*-
"""The Spark source's options, parsed and checked once on the driver (L{SourceOptions}).

Option names are those of Spark's Kafka source where they fit, matched in any
case as Spark does; an unknown one is an error listing the known ones
(L{OPTIONS}).  The keys of C{startingOffsets}/C{endingOffsets} JSON are
partition names C{<broker id>-<partition>} or cluster-wide indexes, checked
against the partitions found (L{twlog.partition.resolve_partition}).  No
pyspark import here: the options are plain data.
"""

from __future__ import annotations

import difflib
import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from twlog.client.discovery import discover, resolve_partition
from twlog.client.kafka_settings import CLIENT_SETTINGS, security_settings
from twlog.client.options import ClientOptions
from twlog.client.sync import SyncConnection
from twlog.coord.layout import PartitionLocation, describe_offline
from twlog.coord.zkauth import credentials_file
from twlog.errors import (
    BrokerTimeout,
    BrokerUnreachable,
    ConnectionFailed,
    LeaderNotAvailable,
    NotLeader,
    OffsetOutOfRange,
    PartitionsOffline,
    TwlogError,
    UnknownTopic,
)
from twlog.partition import TopicPartition
from twlog.protocol.codec import EARLIEST, LATEST

_logger = logging.getLogger(__name__)

#: Bytes per fetch on executors: large fetches make large Arrow batches (fewer round trips, less per-batch work).
DEFAULT_FETCH_SIZE = 8 * 1024 * 1024

#: Every option the source knows, as documented (Spark passes them lower-cased: they match in any case).
OPTIONS = (
    "brokers", "kafka.bootstrap.servers", "zookeeper", "subscribe", "assign", "startingOffsets", "endingOffsets",
    "maxOffsetsPerTrigger", "fetchSize", "failOnDataLoss", "timeoutMs", "envelope",
    "valueFormat", "schemaRegistryUrl", "valueSchemaSubject",
    "minPartitions", "zookeeper.credentials.file",
    "schema.registry.ssl.ca.location", "schema.registry.basic.auth.user.info",  # the registry's HTTPS, basic auth
    *(f"kafka.{name}" for name in CLIENT_SETTINGS),  # TLS and SASL, as Spark's Kafka source passes them on
)
_KNOWN = {name.lower(): name for name in OPTIONS}

#: A driver request to a partition's leader that finds it gone (L{SourceOptions.on_leader}) is sent again to the
#: leader found then, at most this many times, this long apart: a controlled shutdown moves leaderships in well
#: under a second, a dead leader's move waits for its ZooKeeper session to expire (6 s by default).
LEADER_RETRIES = 10
LEADER_WAIT_S = 1.0

_T = TypeVar("_T")


def check_options(options) -> dict[str, str]:
    """C{options} with lower-case keys, after refusing any option the source does not know.

    @raise ValueError: naming the unknown options (with the nearest known one) and listing the known ones.
    """
    given = {str(key).lower(): value for key, value in dict(options).items()}
    unknown = sorted(key for key in given if key not in _KNOWN)
    if unknown:
        hints = []
        for key in unknown:
            near = difflib.get_close_matches(key, list(_KNOWN), n=1)
            hints.append(f"{key!r}" + (f" (did you mean {_KNOWN[near[0]]}?)" if near else ""))
        raise ValueError(f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(hints)} for the twlog "
                         f"source; the options are: {', '.join(OPTIONS)}")
    return given


def _parse_offsets(value: str | None, option: str, default: str):
    """C{"earliest"}, C{"latest"}, or a dict topic -> {partition name: offset}."""
    if value is None:
        return default
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        spec = json.loads(text)
        if not isinstance(spec, dict) or not all(
            isinstance(parts, dict) and all(isinstance(o, int) for o in parts.values()) for parts in spec.values()
        ):
            raise ValueError
    except ValueError:
        raise ValueError(
            f'{option} must be "earliest", "latest" or JSON such as {{"topic": {{"0-1": 1234}}}}, not {value!r}'
        ) from None
    return spec


def _bool(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() in ("true", "1", "yes")


class SourceOptions:
    """The source's options, parsed and checked once on the driver."""

    def __init__(self, options, stream: bool, *, find: Callable[..., list[PartitionLocation]] = discover,
                 connect: Callable[..., SyncConnection] = SyncConnection,
                 sleep: Callable[[float], Any] = time.sleep) -> None:
        """@param find: L{discover}, or a stand-in (tests): how the partitions are found.
        @param connect: C{connect(host, port, options)} gives a L{SyncConnection} (or one like it).
        @param sleep: how to wait before asking a moved leader again (C{time.sleep})."""
        self._find = find
        self._connect = connect
        self._sleep = sleep
        options = check_options(options)
        self.brokers = options.get("brokers")
        alias = options.get("kafka.bootstrap.servers")
        if alias is not None and self.brokers is not None and alias != self.brokers:
            raise ValueError('"brokers" and its alias "kafka.bootstrap.servers" disagree: give one of them')
        self.brokers = self.brokers if self.brokers is not None else alias
        self.zookeeper = options.get("zookeeper")
        if (self.brokers is None) == (self.zookeeper is None):
            raise ValueError('give exactly one of the options "brokers" (host:port,...; alias '
                             '"kafka.bootstrap.servers") and "zookeeper" (host:port[/chroot])')
        #: The cluster's ZooKeeper credentials (docs/security.md), in the client options the executors get too.
        self.zookeeper_credentials = credentials_file(options.get("zookeeper.credentials.file"))
        subscribe, assign = options.get("subscribe"), options.get("assign")
        if (subscribe is None) == (assign is None):
            raise ValueError('give exactly one of the options "subscribe" (topics) and "assign" (JSON)')
        self.assign: dict[str, list[str]] | None = None
        if assign is not None:
            try:
                self.assign = json.loads(assign)
                if not isinstance(self.assign, dict) or not all(isinstance(v, list) for v in self.assign.values()):
                    raise ValueError
            except ValueError:
                raise ValueError(f'assign must be JSON such as {{"topic": ["0-0", "1-0"]}}, not {assign!r}') from None
            self.topics = list(self.assign)
        else:
            self.topics = [t.strip() for t in subscribe.split(",") if t.strip()]
        if not self.topics:
            raise ValueError("no topic given")
        self.starting = _parse_offsets(
            options.get("startingoffsets"), "startingOffsets", "latest" if stream else "earliest"
        )
        self.ending = _parse_offsets(options.get("endingoffsets"), "endingOffsets", "latest")
        if self.ending == "earliest":
            raise ValueError('endingOffsets cannot be "earliest"')
        if stream and options.get("endingoffsets") is not None:
            raise ValueError("endingOffsets is for batch queries only")
        self.fetch_size = _int(options, "fetchSize", DEFAULT_FETCH_SIZE)
        if self.fetch_size < 16:
            raise ValueError("fetchSize must be at least 16 bytes")
        self.fail_on_data_loss = _bool(options.get("failondataloss"), True)
        self.envelope = _bool(options.get("envelope"), False)  # audit envelopes as columns (twlog.spark.envelope)
        self.values = None  # valueFormat avro: the decoder (twlog.spark.avro.AvroValues), set by the source
        timeout_s = _int(options, "timeoutMs", 30000) / 1000
        tls, sasl = _security(options)
        self.client = ClientOptions(timeout_s=timeout_s, connect_timeout_s=timeout_s, tls=tls, sasl=sasl,
                                    zookeeper_credentials=self.zookeeper_credentials)
        self._offsets_checked = False
        #: The offline partitions last warned about (failOnDataLoss=false): said again only when they change.
        self._said_offline: frozenset = frozenset()
        budget = options.get("maxoffsetspertrigger")
        self.max_bytes_per_trigger = _int(options, "maxOffsetsPerTrigger", None) if budget is not None else None
        if self.max_bytes_per_trigger is not None and self.max_bytes_per_trigger < 1:
            raise ValueError("maxOffsetsPerTrigger (bytes of log) must be positive")
        #: Spark's Kafka option: split large ranges so that a read has at least this many tasks (None: one per
        #: topic partition).
        self.min_partitions = _int(options, "minPartitions", None)
        if self.min_partitions is not None and self.min_partitions < 1:
            raise ValueError(f"minPartitions must be a positive whole number, not {self.min_partitions}")

    def partitions(self) -> list[PartitionLocation]:
        """The topic partitions to read, discovered now.

        A partition whose broker is down (the cluster knows it, no live broker leads it) is never left out in
        silence: the read fails naming the broker and its partitions, or, with C{failOnDataLoss=false}, the
        partitions that can be read are read and a warning names the others, once while they stay the same (a
        streaming query keeps their offsets, and reads them once their broker is back, saying so).  With
        C{assign}, only the assigned ones count.

        @raise PartitionsOffline: as said.
        """
        offline: list = []
        try:
            found = self._find_waiting()
        except PartitionsOffline as e:
            found = e.available
            offline = self._wanted_offline(e.offline, found)
            if offline and self.fail_on_data_loss:
                raise PartitionsOffline(f"{describe_offline(offline)} (set failOnDataLoss=false to read the "
                                        "partitions that can be reached)", offline, found) from None
            if offline and frozenset(offline) != self._said_offline:  # (once, not at every trigger)
                _logger.warning("twlog: leaving out %d partition%s that cannot be read (failOnDataLoss=false): %s",
                                len(offline), "" if len(offline) == 1 else "s", describe_offline(offline))
        if self._said_offline and not offline:
            _logger.warning("twlog: every partition can be read again")
        self._said_offline = frozenset(offline)
        if not self._offsets_checked:
            self.starting = _name_offsets(self.starting, "startingOffsets", found, self.topics)
            self.ending = _name_offsets(self.ending, "endingOffsets", found, self.topics)
            self._offsets_checked = True
        if self.assign is None:
            return found
        chosen: set[str] = set()
        for topic, names in self.assign.items():
            held = [tp.tp for tp in found if tp.topic == topic]
            for name in names:
                try:
                    chosen.add(str(resolve_partition(str(name), held)))
                except ValueError as e:
                    raise UnknownTopic(f"assign: {e}") from None
        return [tp for tp in found if str(tp.tp) in chosen]

    def _find_waiting(self) -> list[PartitionLocation]:
        """The partitions discovered now; while only replicated partitions lack a leader (an election under way:
        a leader stopped or killed, its session not expired yet), or their leader cannot be reached (killed, still
        registered until its session expires), discovered again, up to L{LEADER_RETRIES} times L{LEADER_WAIT_S}
        apart, before their L{PartitionsOffline} or L{BrokerUnreachable} is raised."""
        for attempt in range(LEADER_RETRIES + 1):
            try:
                return self._find(self.topics, brokers=self.brokers, zookeeper=self.zookeeper, options=self.client)
            except BrokerUnreachable as e:
                if attempt == LEADER_RETRIES or not e.held or any(tp.fixed_leader is not None for tp in e.held):
                    raise
                _logger.info("twlog: %s; waiting for a new leader (%d of %d)", e, attempt + 1, LEADER_RETRIES)
                self._sleep(LEADER_WAIT_S)
            except PartitionsOffline as e:
                offline = self._wanted_offline(e.offline, e.available)
                if attempt == LEADER_RETRIES or not offline or any(tp.fixed_leader is not None for tp in offline):
                    raise
                _logger.info("twlog: %s: waiting for a leader (%d of %d)", describe_offline(offline), attempt + 1,
                             LEADER_RETRIES)
                self._sleep(LEADER_WAIT_S)
        raise AssertionError("unreachable")

    def _wanted_offline(self, offline: list[TopicPartition], found: list[PartitionLocation]) -> list[TopicPartition]:
        """Those of C{offline} this read wants: all, or with C{assign} the assigned ones (names and indexes are
        resolved over all the topic's partitions, readable or not)."""
        if self.assign is None:
            return offline
        wanted = set()
        for topic, names in self.assign.items():
            every = [tp for tp in offline if tp.topic == topic] + [loc.tp for loc in found if loc.topic == topic]
            for name in names:
                try:
                    wanted.add(resolve_partition(str(name), every))
                except ValueError:
                    pass  # not there at all: said when the readable ones are matched
        return sorted(wanted & set(offline))

    def connect(self, tp: PartitionLocation) -> SyncConnection:
        return self._connect(tp.host, tp.port, self.client)

    def on_leader(self, tp: PartitionLocation, call: Callable[[SyncConnection], _T]) -> _T:
        """C{call(connection)} over a connection to C{tp}'s leader (on the driver).

        A replicated partition's leader that moved since C{tp} was found (it answers L{NotLeader}, the partition
        has no leader for now, or its broker is gone) is found again, from the same brokers or ZooKeeper, and
        asked there: at most
        L{LEADER_RETRIES} times, L{LEADER_WAIT_S} apart; then the last error is raised.
        """
        for attempt in range(LEADER_RETRIES + 1):
            try:
                with self.connect(tp) as c:
                    return call(c)
            except (NotLeader, LeaderNotAvailable, ConnectionFailed, BrokerTimeout) as e:
                if attempt == LEADER_RETRIES or tp.tp.fixed_leader is not None:  # (a 0.7 partition never moves)
                    raise
                _logger.info("twlog: %s: %s; finding its leader again", tp, e)
                self._sleep(LEADER_WAIT_S)
                tp = self._locate(tp)
        raise AssertionError("unreachable")

    def _locate(self, tp: PartitionLocation) -> PartitionLocation:
        """Where C{tp} is now (C{tp} itself when that cannot be learnt: its address is tried again)."""
        try:
            found = self._find([tp.topic], brokers=self.brokers, zookeeper=self.zookeeper, options=self.client,
                               check_reachable=False, allow_partial=True)
        except (ConnectionFailed, BrokerTimeout, UnknownTopic, PartitionsOffline):
            return tp
        return next((location for location in found if location.tp == tp.tp), tp)

    def boundaries(self, tp: PartitionLocation, positions: list[int]) -> list[int]:
        """The first message at or after each of C{positions} of C{tp}, asked of its leader (BOUNDARIES)."""
        return self.on_leader(tp, lambda c: c.boundaries(tp.topic, tp.number, positions))

    def bounds(self, tp: PartitionLocation) -> tuple[int, int]:
        """The partition's earliest and latest offsets (its high watermark, if replicated), asked of its leader."""
        return self.on_leader(tp, lambda c: (c.offset(tp.topic, tp.number, EARLIEST),
                                             c.offset(tp.topic, tp.number, LATEST)))

    def start(self, tp: PartitionLocation, earliest: int, latest: int) -> int:
        """Where reading C{tp} starts, per startingOffsets and failOnDataLoss."""
        start = resolve_offset(self.starting, tp, earliest, latest, missing=earliest)
        if earliest <= start <= latest:
            return start
        if not self.fail_on_data_loss:
            return earliest
        why = "before the earliest offset still in the log (deleted by retention?)" if start < earliest else (
            "past the end of the log"
        )
        raise OffsetOutOfRange(
            f"starting offset {start} of {tp.topic} partition {tp.name} is {why}: the partition holds "
            f"[{earliest}, {latest}); set failOnDataLoss=false to start at the earliest offset instead"
        )


def _security(options: dict[str, str]):
    """The TLS and SASL settings of the C{kafka.*} security options (L{twlog.client.kafka_settings}'s rules, the
    CLI's and the mirror's); they travel to the executors in the client options of the input partitions.

    @raise ValueError: a setting twlog cannot use (one line naming it).
    """
    config = {key[len("kafka."):]: value for key, value in options.items()
              if key.startswith("kafka.") and key != "kafka.bootstrap.servers"}
    try:
        return security_settings(config, "the twlog source", prefix="kafka.")
    except TwlogError as e:
        raise ValueError(str(e)) from None


def _int(options: dict[str, str], name: str, default):
    value = options.get(name.lower())
    if value is None:
        return default
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {value!r}") from None


def _name_offsets(spec, option: str, found: list[PartitionLocation], topics: list[str]):
    """C{spec} (startingOffsets or endingOffsets) with every key as a partition name C{<broker id>-<partition>}.

    @raise ValueError: a topic that is not read, a key naming no partition (listing the valid ones), or one
        partition given twice.
    """
    if not isinstance(spec, dict):
        return spec
    named: dict[str, dict[str, int]] = {}
    for topic, parts in spec.items():
        if topic not in topics:
            raise ValueError(f"{option} names topic {topic!r}, which this query does not read "
                             f"(it reads {', '.join(map(repr, topics))})")
        held = [tp.tp for tp in found if tp.topic == topic]
        for key, offset in parts.items():
            try:
                name = resolve_partition(str(key), held).name
            except ValueError as e:
                raise ValueError(f"{option}: {e}") from None
            if name in named.get(topic, {}):
                raise ValueError(f"{option} gives partition {name} of topic {topic!r} twice")
            named.setdefault(topic, {})[name] = offset
    return named


def resolve_offset(spec, tp: PartitionLocation, earliest: int, latest: int, missing: int) -> int:
    if spec == "earliest":
        return earliest
    if spec == "latest":
        return latest
    value = spec.get(tp.topic, {}).get(tp.name)
    if value is None:
        return missing
    return {EARLIEST: earliest, LATEST: latest}.get(value, value)
