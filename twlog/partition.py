# -*- test-case-name: tests.test_partition -*-
"""One partition's identity, with one text form, for every layer above storage.

Kafka 0.7 numbers partitions per broker: a topic's partitions are the union
over brokers of C{<broker id>-<partition>} (shared/DESIGN.md, "ZooKeeper
layout").  So a partition of the cluster is C{(topic, broker id, partition)}.
Its ZooKeeper name is C{<broker id>-<partition>} (L{TopicPartition.name}), and
its text form, used by the C{twlog} command, C{twlog groups} output, logs and
the Spark source, is C{<topic>:<broker id>-<partition>}: topic names cannot
contain C{:} (L{twlog.storage.manager.validate_topic}), so the form parses back
without ambiguity.
"""

from __future__ import annotations

import attrs


@attrs.frozen(order=True)
class TopicPartition:
    """Partition C{partition} of C{topic} on broker C{broker_id}; sorts by topic, broker id, partition."""

    topic: str
    broker_id: int
    partition: int

    @property
    def name(self) -> str:
        """The cluster-wide name within the topic, as in ZooKeeper: C{<broker id>-<partition>}."""
        return f"{self.broker_id}-{self.partition}"

    def __str__(self) -> str:
        return f"{self.topic}:{self.broker_id}-{self.partition}"

    @classmethod
    def from_name(cls, topic: str, name: str) -> TopicPartition:
        """The partition of C{topic} named C{<broker id>-<partition>} (a ZooKeeper child name).

        @raise ValueError: C{name} is not two non-negative integers joined by C{-}.
        """
        broker, sep, partition = name.partition("-")
        if not sep or not broker.isdigit() or not partition.isdigit():
            raise ValueError(f"{name!r} is not a partition name of the form <broker id>-<partition>")
        return cls(topic, int(broker), int(partition))

    @classmethod
    def parse(cls, text: str) -> TopicPartition:
        """The partition written as C{<topic>:<broker id>-<partition>} (the form L{str} gives).

        @raise ValueError: C{text} is not of that form.
        """
        topic, sep, name = text.rpartition(":")
        if not sep or not topic:
            raise ValueError(f"{text!r} is not a partition of the form <topic>:<broker id>-<partition>")
        return cls.from_name(topic, name)
