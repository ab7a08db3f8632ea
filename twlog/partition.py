# -*- test-case-name: tests.test_partition -*-
"""One partition's identity, with one text form, for every layer above storage.

A partition is C{(topic, name)} with a current leader (shared/DESIGN.md,
"Replication").  Two kinds of names exist:

  - a Kafka 0.7 topic's partitions are per broker: the union over brokers of
    C{<broker id>-<n>} (shared/DESIGN.md, "ZooKeeper layout").  Their leader is
    that broker, always (L{TopicPartition.fixed_leader});
  - a replicated topic's partitions are named C{0} to C{P-1}; their leader
    moves, and only the cluster layout (L{twlog.coord.layout}) knows it.

Either way a request to the leader names the partition by its number
(L{TopicPartition.number}): C{n} of C{<broker id>-<n>}, or the name itself.
Nothing here knows where a partition is: the layout maps an identity to its
leader's address.

The text form, used by the C{twlog} command, C{twlog groups} output, logs and
the Spark source, is C{<topic>:<name>}: topic names cannot contain C{:}
(L{twlog.storage.manager.validate_topic}), so it parses back without
ambiguity.  Identities sort by topic, then by the numbers in the name (C{0-2}
before C{0-10} before C{1-0}).

Where a user names one partition of a known topic (CLI arguments, the Spark
source's offsets JSON), L{resolve_partition} accepts the name, the text form,
or a cluster-wide index C{N}: the position in the topic's partitions sorted by
name, the order C{twlog produce --partition} and the producer's partitioner
use.  For a 0.7 topic a bare number never has a C{-}, a name always does, so
the two never collide; for a replicated topic the name and the index are the
same number.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from twlog.deprecation import renamed_attribute

__all__ = ["TopicPartition", "address_text", "describe_partitions", "partition_ranges", "resolve_partition"]

#: How many partition names an error message lists before "...".
_LISTED = 32


def _name_key(name: str) -> tuple[int, ...]:
    """The sort key of a valid partition name: its numbers (C{"1-10"} -> C{(1, 10)})."""
    return tuple(int(part) for part in name.split("-"))


def _check_name(instance: object, attribute: object, name: str) -> None:
    """A name is C{<broker id>-<n>} (0.7) or C{<n>} (replicated): non-negative decimal integers."""
    parts = name.split("-") if isinstance(name, str) else ()
    if not 1 <= len(parts) <= 2 or not all(part.isdigit() and part.isascii() for part in parts):
        raise ValueError(f"{name!r} is not a partition name: <broker id>-<n> (a 0.7 topic) or <n> (replicated)")


@attrs.frozen(order=True)
class TopicPartition:
    """Partition C{name} of C{topic}; sorts by topic, then by the numbers of the name.

    @raise ValueError: C{name} is neither C{<broker id>-<n>} nor C{<n>}.
    """

    topic: str
    name: str = attrs.field(validator=_check_name, order=_name_key)

    @classmethod
    def on_broker(cls, topic: str, broker_id: int, number: int) -> TopicPartition:
        """Partition C{number} of C{topic} on broker C{broker_id}, for a Kafka 0.7 topic: C{<broker id>-<n>}."""
        return cls(topic, f"{int(broker_id)}-{int(number)}")

    @classmethod
    def from_name(cls, topic: str, name: str) -> TopicPartition:
        """The partition of C{topic} named C{name} (a ZooKeeper child name, or what a user typed).

        @raise ValueError: C{name} is not a partition name.
        """
        return cls(topic, name)

    @classmethod
    def parse(cls, text: str) -> TopicPartition:
        """The partition written as C{<topic>:<name>} (the form L{str} gives).

        @raise ValueError: C{text} is not of that form.
        """
        topic, sep, name = text.rpartition(":")
        if not sep or not topic:
            raise ValueError(f"{text!r} is not a partition of the form <topic>:<name> (clicks:1-0, clicks:3)")
        return cls(topic, name)

    @property
    def number(self) -> int:
        """The number its leader knows it by in requests: C{n} of C{<broker id>-<n>}, or the name's number."""
        return int(self.name.rpartition("-")[2])

    @property
    def fixed_leader(self) -> int | None:
        """The broker that leads a 0.7 partition (C{<broker id>-<n>}) forever; None for a replicated one."""
        broker, sep, _ = self.name.partition("-")
        return int(broker) if sep else None

    def __str__(self) -> str:
        return f"{self.topic}:{self.name}"

    #: Deprecated names from when a partition was (topic, broker id, per-broker number).
    broker_id = renamed_attribute("broker_id", "fixed_leader")
    partition = renamed_attribute("partition", "number")


def address_text(host: str, port: int) -> str:
    """C{host:port}, an IPv6 host in brackets: the one way an address is written (messages, registrations)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def describe_partitions(partitions: Sequence[TopicPartition]) -> str:
    """The names of C{partitions}, sorted, for error messages: C{0-0, 0-1, 1-0} (shortened past 32)."""
    names = [tp.name for tp in sorted(partitions)]
    if len(names) > _LISTED:
        names = [*names[: _LISTED - 1], "...", names[-1]]
    return ", ".join(names) or "none"


def partition_ranges(partitions: Iterable[TopicPartition]) -> str:
    """C{partitions} in their text form, runs of consecutive numbers on one broker joined by C{..}, for messages.

    C{clicks:0-0..0-3} (four partitions), C{clicks:{0-0..0-3, 1-0}} (two runs of one topic), C{clicks:3, views:0-1};
    C{none} when there are none.
    """
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in sorted(set(partitions)):
        by_topic.setdefault(tp.topic, []).append(tp)
    texts = []
    for topic, tps in by_topic.items():
        runs: list[list[TopicPartition]] = []
        for tp in tps:
            last = runs[-1][-1] if runs else None
            if last is not None and last.fixed_leader == tp.fixed_leader and last.number + 1 == tp.number:
                runs[-1].append(tp)
            else:
                runs.append([tp])
        names = [run[0].name if len(run) == 1 else f"{run[0].name}..{run[-1].name}" for run in runs]
        texts.append(f"{topic}:{names[0]}" if len(names) == 1 else f"{topic}:{{{', '.join(names)}}}")
    return ", ".join(texts) or "none"


def resolve_partition(text: str, partitions: Sequence[TopicPartition]) -> TopicPartition:
    """The partition of one topic that C{text} names, among that topic's C{partitions} (in any order).

    C{text} is a name (C{1-0}, or C{3} of a replicated topic), the text form C{<topic>:<name>}, or a
    cluster-wide index C{N} (C{0} to C{len(partitions) - 1}) into the partitions sorted by name.

    @raise ValueError: C{text} names none of C{partitions}; the message lists the valid names and indexes.
    """
    ordered = sorted(partitions)
    topics = {tp.topic for tp in ordered}
    topic = ordered[0].topic if len(topics) == 1 else None
    value = text.strip()
    if value.isdigit() and value.isascii() and not any(tp.fixed_leader is None for tp in ordered):
        if int(value) < len(ordered):
            return ordered[int(value)]
    else:
        head, sep, name = value.rpartition(":")
        if not sep or head == topic:
            for candidate in ordered:
                if candidate.name == name:
                    return candidate
    if not ordered:
        raise ValueError(f"no partition {text!r}: the topic has no partitions")
    which = f"topic {topic!r}" if topic is not None else "the topics"
    form = "a name <broker id>-<partition>" if all(tp.fixed_leader is not None for tp in ordered) else "a name"
    raise ValueError(
        f"{which} has no partition {text!r}: give {form} "
        f"({describe_partitions(ordered)}) or an index 0-{len(ordered) - 1}"
    )
