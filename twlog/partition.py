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

Where a user names one partition of a known topic (CLI arguments, the Spark
source's offsets JSON), L{resolve_partition} accepts the name C{<broker
id>-<partition>}, the text form, or a cluster-wide index C{N}: the position in
the topic's partitions sorted by (broker id, partition), the order
C{twlog produce --partition} and the producer's partitioner use.  A bare
number never has a C{-}, a name always does, so the two never collide.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

#: How many partition names an error message lists before "...".
_LISTED = 32


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


def describe_partitions(partitions: Sequence[TopicPartition]) -> str:
    """The names of C{partitions}, sorted, for error messages: C{0-0, 0-1, 1-0} (shortened past 32)."""
    names = [tp.name for tp in sorted(partitions)]
    if len(names) > _LISTED:
        names = [*names[: _LISTED - 1], "...", names[-1]]
    return ", ".join(names) or "none"


def resolve_partition(text: str, partitions: Sequence[TopicPartition]) -> TopicPartition:
    """The partition of one topic that C{text} names, among that topic's C{partitions} (in any order).

    C{text} is a name C{<broker id>-<partition>} (C{1-0}), the text form C{<topic>:<broker id>-<partition>},
    or a cluster-wide index C{N} (C{0} to C{len(partitions) - 1}) into the partitions sorted by
    (broker id, partition).

    @raise ValueError: C{text} names none of C{partitions}; the message lists the valid names and indexes.
    """
    ordered = sorted(partitions)
    topics = {tp.topic for tp in ordered}
    topic = ordered[0].topic if len(topics) == 1 else None
    value = text.strip()
    if value.isdigit() and value.isascii():
        if int(value) < len(ordered):
            return ordered[int(value)]
    else:
        head, sep, name = value.rpartition(":")
        try:
            tp = TopicPartition.from_name(topic or "", name)
        except ValueError:
            tp = None
        if tp is not None and (not sep or head == topic):
            for candidate in ordered:
                if (candidate.broker_id, candidate.partition) == (tp.broker_id, tp.partition):
                    return candidate
    if not ordered:
        raise ValueError(f"no partition {text!r}: the topic has no partitions")
    which = f"topic {topic!r}" if topic is not None else "the topics"
    raise ValueError(
        f"{which} has no partition {text!r}: give a name <broker id>-<partition> "
        f"({describe_partitions(ordered)}) or an index 0-{len(ordered) - 1}"
    )
