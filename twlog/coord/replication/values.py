# -*- test-case-name: tests.coord.test_replication_values -*-
"""The values of replicated topics in ZooKeeper, exactly as shared/DESIGN.md ("Replication") writes them.

  - L{TopicAssignment}, C{/twlog/topics/<topic>}:
    C{{"version":1,"partitions":{"0":[1,2,3],...},"config":{"min.insync.replicas":"2"}}}
  - L{PartitionState}, C{/twlog/topics/<topic>/partitions/<p>/state}:
    C{{"version":1,"leader":L,"leader_epoch":E,"controller_epoch":C,"isr":[...]}}
  - L{ControllerRecord}, C{/twlog/controller}: C{{"version":1,"brokerid":B,"timestamp":"<ms>"}}
  - the controller epoch, C{/twlog/controller_epoch}: a decimal integer.

Each C{decode} refuses a value that is not exactly its shape with L{BadReplicationValue}, which names the
znode: a reader either uses a value or says which node is wrong, never guesses.  Pure: no Twisted, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from twlog.errors import TwlogError

__all__ = ["NO_LEADER", "BadReplicationValue", "ControllerRecord", "PartitionState", "TopicAssignment",
           "decode_epoch", "encode_epoch"]

#: The leader of a partition with no leader (offline), as Kafka writes it.
NO_LEADER = -1
#: The C{version} field of every value this module writes and reads.
FORMAT_VERSION = 1


class BadReplicationValue(TwlogError):
    """A replication value in ZooKeeper (or about to be written) is not of its documented shape."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _broker_ids(value: Any, what: str, path: str, *, empty: bool = False) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or not all(_int(b) and b >= 0 for b in value):
        raise BadReplicationValue(path, f"{what} {value!r} is not a list of broker ids")
    if len(set(value)) != len(value):
        raise BadReplicationValue(path, f"{what} {list(value)} names a broker twice")
    if not value and not empty:
        raise BadReplicationValue(path, f"{what} is empty")
    return tuple(value)


def _load(data: bytes, path: str, keys: set[str]) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise BadReplicationValue(path, f"{data[:80]!r} is not JSON") from None
    if not isinstance(value, dict):
        raise BadReplicationValue(path, f"{data[:80]!r} is not a JSON object")
    if value.get("version") != FORMAT_VERSION:
        raise BadReplicationValue(path, f"version {value.get('version')!r} is not {FORMAT_VERSION}")
    if set(value) != keys | {"version"}:
        missing, extra = sorted(keys - set(value)), sorted(set(value) - keys - {"version"})
        said = [f"missing {', '.join(missing)}"] if missing else []
        said += [f"unknown {', '.join(extra)}"] if extra else []
        raise BadReplicationValue(path, "; ".join(said))
    return value


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _check_partitions(instance: TopicAssignment, attribute: Any, value: Mapping[int, tuple[int, ...]]) -> None:
    where = f"topic {instance.topic!r}"
    if sorted(value) != list(range(len(value))) or not value:
        raise BadReplicationValue(where, f"partitions {sorted(value)} are not 0 to P-1 (P >= 1)")
    sizes = {len(replicas) for replicas in value.values()}
    if len(sizes) != 1:
        raise BadReplicationValue(where, f"partitions have different replica counts {sorted(sizes)}")
    for p, replicas in value.items():
        _broker_ids(list(replicas), f"partition {p}'s replicas", where)


def _frozen_partitions(value: Mapping[int, Any]) -> dict[int, tuple[int, ...]]:
    return {int(p): tuple(replicas) for p, replicas in value.items()}


@attrs.frozen
class TopicAssignment:
    """A replicated topic: each partition's ordered replica list (the first is the preferred leader), and its
    config (C{min.insync.replicas}, say: strings, as Kafka keeps topic config)."""

    topic: str
    partitions: Mapping[int, tuple[int, ...]] = attrs.field(converter=_frozen_partitions,
                                                            validator=_check_partitions)
    config: Mapping[str, str] = attrs.field(factory=dict, converter=dict)

    @config.validator
    def _check_config(self, attribute: Any, value: Mapping[str, str]) -> None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise BadReplicationValue(f"topic {self.topic!r}", f"config {value!r} is not strings to strings")

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0])

    def replicas(self, partition: int) -> tuple[int, ...]:
        """Partition C{partition}'s replicas, preferred leader first."""
        return self.partitions[partition]

    def encode(self) -> bytes:
        """The value of C{/twlog/topics/<topic>}."""
        return _dump({"version": FORMAT_VERSION,
                      "partitions": {str(p): list(r) for p, r in sorted(self.partitions.items())},
                      "config": dict(sorted(self.config.items()))})

    @classmethod
    def decode(cls, topic: str, data: bytes, path: str) -> TopicAssignment:
        """The assignment stored at C{path} (C{/twlog/topics/<topic>}).

        @raise BadReplicationValue: naming C{path}.
        """
        value = _load(data, path, {"partitions", "config"})
        partitions, config = value["partitions"], value["config"]
        if not isinstance(partitions, dict) or not all(k.isdigit() and k.isascii() for k in partitions):
            raise BadReplicationValue(path, f"partitions {partitions!r} is not an object keyed by partition number")
        if not isinstance(config, dict):
            raise BadReplicationValue(path, f"config {config!r} is not an object")
        try:
            return cls(topic, {int(p): _broker_ids(r, f"partition {p}'s replicas", path)
                               for p, r in partitions.items()}, config)
        except BadReplicationValue as e:
            raise BadReplicationValue(path, e.problem) from None


@attrs.frozen
class PartitionState:
    """A replicated partition's leadership: its leader (L{NO_LEADER}: offline), leader epoch (+1 at each
    change of leader), the epoch of the controller that wrote it, and its in-sync replicas."""

    leader: int
    leader_epoch: int
    controller_epoch: int
    isr: tuple[int, ...] = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        if not _int(self.leader) or self.leader < NO_LEADER:
            raise BadReplicationValue("partition state", f"leader {self.leader!r} is not a broker id or -1")
        for name in ("leader_epoch", "controller_epoch"):
            value = getattr(self, name)
            if not _int(value) or value < 0:
                raise BadReplicationValue("partition state", f"{name} {value!r} is not a non-negative integer")
        _broker_ids(list(self.isr), "isr", "partition state", empty=True)

    @property
    def online(self) -> bool:
        return self.leader != NO_LEADER

    def encode(self) -> bytes:
        """The value of C{/twlog/topics/<topic>/partitions/<p>/state}."""
        return _dump({"version": FORMAT_VERSION, "leader": self.leader, "leader_epoch": self.leader_epoch,
                      "controller_epoch": self.controller_epoch, "isr": list(self.isr)})

    @classmethod
    def decode(cls, data: bytes, path: str) -> PartitionState:
        """The state stored at C{path}.

        @raise BadReplicationValue: naming C{path}.
        """
        value = _load(data, path, {"leader", "leader_epoch", "controller_epoch", "isr"})
        try:
            return cls(value["leader"], value["leader_epoch"], value["controller_epoch"],
                       _broker_ids(value["isr"], "isr", path, empty=True))
        except BadReplicationValue as e:
            raise BadReplicationValue(path, e.problem) from None


@attrs.frozen
class ControllerRecord:
    """Who the controller is: the value of the ephemeral C{/twlog/controller}."""

    broker_id: int
    timestamp_ms: int

    def encode(self) -> bytes:
        return _dump({"version": FORMAT_VERSION, "brokerid": self.broker_id, "timestamp": str(self.timestamp_ms)})

    @classmethod
    def decode(cls, data: bytes, path: str) -> ControllerRecord:
        """@raise BadReplicationValue: naming C{path}."""
        value = _load(data, path, {"brokerid", "timestamp"})
        broker, stamp = value["brokerid"], value["timestamp"]
        if not _int(broker) or broker < 0:
            raise BadReplicationValue(path, f"brokerid {broker!r} is not a broker id")
        if not isinstance(stamp, str) or not stamp.isdigit() or not stamp.isascii():
            raise BadReplicationValue(path, f"timestamp {stamp!r} is not a string of milliseconds")
        return cls(broker, int(stamp))


def encode_epoch(epoch: int) -> bytes:
    """The value of C{/twlog/controller_epoch}."""
    return str(int(epoch)).encode("ascii")


def decode_epoch(data: bytes, path: str) -> int:
    """@raise BadReplicationValue: naming C{path}, for anything but a non-negative decimal integer."""
    text = data.decode("ascii", "replace").strip()
    if not text.isdigit() or not text.isascii():
        raise BadReplicationValue(path, f"controller epoch {data[:40]!r} is not a non-negative integer")
    return int(text)
