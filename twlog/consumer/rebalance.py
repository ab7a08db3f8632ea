# -*- test-case-name: tests.consumer.test_rebalance -*-
"""The paper's range assignment (section 3.2, Algorithm 1): pure functions, no I/O, no reactor.

Every consumer of a group computes the same answer from the same registries:
a topic's partitions and the streams of every consumer subscribing to it are
sorted, and stream j takes one contiguous block; the first C{|P| mod |C|}
streams take one extra partition.  A stream is named C{<consumer id>-<n>}
(Kafka 0.7's consumer thread id); a partition is a L{TopicPartition} (or its
name C{<broker id>-<partition>}).

Both lists are sorted in I{natural} order (digit runs compare as numbers), so
partition C{"2-0"} sorts before C{"10-0"} (as L{TopicPartition}s sort) and
stream C{"c-2"} before C{"c-10"}.  Any total order would do, as long as every
consumer uses the same.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

from twlog.errors import InvalidTopic
from twlog.partition import TopicPartition
from twlog.storage.manager import validate_topic

P = TypeVar("P", str, TopicPartition)

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[str | int, ...], str]:
    """A sort key that compares digit runs as numbers: C{"b-9"} < C{"b-10"}; ties broken by the text."""
    runs = _DIGITS.split(name)
    return tuple(int(run) if i % 2 else run for i, run in enumerate(runs)), name


def _partition_key(partition: str | TopicPartition):
    return natural_key(partition) if isinstance(partition, str) else partition


def ranges(partitions: Sequence[P], streams: Sequence[str]) -> dict[str, list[P]]:
    """The whole assignment of one topic: each stream's contiguous block of the sorted partitions.

    Every stream gets an entry (an empty list when there are more streams than partitions).
    """
    parts = sorted(set(partitions), key=_partition_key)
    members = sorted(set(streams), key=natural_key)
    if not members:
        return {}
    per, extra = divmod(len(parts), len(members))
    result = {}
    for j, member in enumerate(members):
        start = j * per + min(j, extra)
        result[member] = parts[start : start + per + (j < extra)]
    return result


def assign(partitions: Sequence[P], streams: Sequence[str], me: str) -> list[P]:
    """The block of the sorted C{partitions} that stream C{me} owns among the sorted C{streams} ([] if absent)."""
    return ranges(partitions, streams).get(me, [])


def stream_ids(consumer_id: str, count: int) -> list[str]:
    """The ids of a consumer's C{count} streams of one topic: C{<consumer id>-0} ... C{-<count - 1>}."""
    return [f"{consumer_id}-{n}" for n in range(count)]


def streams_by_topic(subscriptions: Mapping[str, Mapping[str, int]]) -> dict[str, list[str]]:
    """Topic -> the stream ids of every consumer subscribing to it, sorted.

    @param subscriptions: consumer id -> (topic -> number of streams), as registered.
    """
    result: dict[str, list[str]] = {}
    for consumer_id, subscription in subscriptions.items():
        for topic, count in subscription.items():
            result.setdefault(topic, []).extend(stream_ids(consumer_id, count))
    return {topic: sorted(ids, key=natural_key) for topic, ids in result.items()}


def consumer_assignment(
    consumer_id: str,
    subscriptions: Mapping[str, Mapping[str, int]],
    partitions: Mapping[str, Sequence[P]],
) -> dict[str, dict[P, str]]:
    """What one consumer owns: topic -> {partition: owning stream id}, for each topic it subscribes to.

    @param subscriptions: every registered consumer's subscription (topic -> streams), C{consumer_id}'s included.
    @param partitions: topic -> its available partitions (L{TopicPartition}s, or names C{<broker id>-<partition>}).
    """
    mine = subscriptions.get(consumer_id, {})
    all_streams = streams_by_topic(subscriptions)
    result: dict[str, dict[P, str]] = {}
    for topic, count in mine.items():
        blocks = ranges(partitions.get(topic, ()), all_streams.get(topic, ()))
        owned: dict[P, str] = {}
        for stream in stream_ids(consumer_id, count):
            for partition in blocks.get(stream, ()):
                owned[partition] = stream
        result[topic] = owned
    return result


def group_assignment(
    subscriptions: Mapping[str, Mapping[str, int]], partitions: Mapping[str, Sequence[P]]
) -> dict[str, dict[P, str]]:
    """What the whole group should own once stable: topic -> {partition: stream id}."""
    result: dict[str, dict[P, str]] = {}
    for topic, streams in streams_by_topic(subscriptions).items():
        owners = result.setdefault(topic, {})
        for stream, block in ranges(partitions.get(topic, ()), streams).items():
            for partition in block:
                owners[partition] = stream
    return result


def encode_subscription(subscription: Mapping[str, int]) -> bytes:
    """A consumer registration's value: JSON C{{"topic": streams}} (Kafka 0.7's format)."""
    return json.dumps(dict(sorted(subscription.items())), separators=(",", ":")).encode("utf-8")


def decode_subscription(value: bytes) -> dict[str, int]:
    """The subscription in a consumer registration's value: JSON C{{"topic": streams}} (Kafka 0.7's
    C{TopicCount}), or, as some 0.7-era clients wrote it, a bare topic name: one stream of that topic.

    @raise ValueError: neither a JSON object of topic -> positive stream count nor a valid topic name.
    """
    try:
        text = value.decode("utf-8").strip()
    except UnicodeDecodeError as e:
        raise ValueError(f"subscription is not UTF-8: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = text  # not JSON: maybe a bare topic name
    if not isinstance(data, dict):  # a name JSON also reads ("7", "null") or a JSON string is a topic too
        try:
            return {validate_topic(data if isinstance(data, str) else text): 1}
        except InvalidTopic:
            raise ValueError(f"subscription {text[:100]!r} is neither a JSON object nor a topic name") from None
    result = {}
    for topic, count in data.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"subscription of {topic!r}: {count!r} is not a positive stream count")
        result[str(topic)] = count
    return result


def validate_subscription(subscription: Mapping[str, int]) -> dict[str, int]:
    """C{subscription} (topic -> streams) checked: non-empty names, at least one stream each.

    @raise ValueError: on an empty subscription, a bad topic name or a bad count.
    """
    if not subscription:
        raise ValueError("subscribe to at least one topic")
    result = {}
    for topic, count in subscription.items():
        if not isinstance(topic, str) or not topic or "/" in topic:
            raise ValueError(f"bad topic name {topic!r}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"topic {topic!r}: the number of streams must be a positive integer, not {count!r}")
        result[topic] = count
    return result
