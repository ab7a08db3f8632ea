# -*- test-case-name: tests.integration.test_schema_registry -*-
"""L{Journal}: the registry's records in the twlog topic C{twlog-schemas}, appended and read in order.

Every record goes to the topic's first partition (index 0: partitions ordered by broker id and
partition, as the producer and discovery both order them), acknowledged once flushed: when
L{Journal.append} returns, the record is on disk and readable.  L{Journal.read_new} reads from
where the last read stopped to the partition's end.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.threads import deferToThread
from twisted.logger import Logger

from twlog.client.discovery import PartitionLocation, discover
from twlog.client.options import ClientOptions
from twlog.consumer.simple import LATEST, SimpleConsumer
from twlog.errors import TwlogError, UnknownTopic
from twlog.producer import Producer

#: The topic holding the registry's records (Confluent's registry keeps its own in the Kafka topic _schemas).
TOPIC = "twlog-schemas"


class Journal:
    """Appends records to C{twlog-schemas} (ack flushed) and reads them back in order.

    Give exactly one of C{brokers} (C{host:port,...}) and C{zookeeper} (a connect string).
    """

    _log = Logger()

    def __init__(self, *, brokers: str | None = None, zookeeper: str | None = None, reactor=None,
                 options: ClientOptions | None = None) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self._reactor = reactor
        self._source = {"brokers": brokers} if brokers is not None else {"zookeeper": zookeeper}
        self.options = ClientOptions.build(options)
        self._producer = Producer(brokers, zookeeper=zookeeper, reactor=reactor, ack="flushed", options=self.options)
        self._location: PartitionLocation | None = None
        self._consumer: SimpleConsumer | None = None
        #: The offset after the last record read.
        self.position = 0

    async def append(self, record: dict) -> int:
        """Append C{record}; its offset, once the broker has flushed it."""
        payload = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
        result = await self._producer.send(TOPIC, payload, partition_index=0)
        written = (await self._producer.partitions(TOPIC))[0]
        if self._location is not None and self._location.tp != written:
            self._log.warn("the first partition of {topic} is now {tp}", topic=TOPIC, tp=str(written))
            await self._forget()
        return result.offset

    async def read_new(self) -> list[tuple[int, Any]]:
        """The records from L{position} to the end of the partition, in order, as C{(offset, record)}."""
        location = await self._locate()
        if location is None:
            return []
        consumer = self._consumer
        (end,) = await consumer.offsets(TOPIC, location.name, LATEST, 1)
        records = []
        while self.position < end:
            fetched = await consumer.fetch(TOPIC, location.name, self.position)
            if fetched.next_offset == self.position:
                raise TwlogError(f"no progress reading {location} at offset {self.position}")
            for message in fetched:
                try:
                    records.append((message.offset, json.loads(message.payload)))
                except ValueError:
                    self._log.warn("{topic}@{offset} is not a JSON record: ignored", topic=TOPIC, offset=message.offset)
            self.position = fetched.next_offset
        return records

    async def close(self) -> None:
        await self._forget()
        await self._producer.close()

    async def _locate(self) -> PartitionLocation | None:
        if self._location is None:
            try:
                locations = await deferToThread(discover, [TOPIC], options=self.options, **self._source)
            except UnknownTopic:
                return None  # nothing registered yet
            self._location = locations[0]
            self._consumer = SimpleConsumer(self._location.host, self._location.port, reactor=self._reactor,
                                            options=self.options)
        return self._location

    async def _forget(self) -> None:
        consumer, self._consumer, self._location = self._consumer, None, None
        if consumer is not None:
            await consumer.close()
