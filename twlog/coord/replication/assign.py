# -*- test-case-name: tests.coord.test_replication_values -*-
"""Where a new replicated topic's replicas go: Kafka's rack-unaware C{AdminUtils.assignReplicasToBrokers}.

Leaders (each partition's first replica) go round-robin over the brokers from a start index; the other
replicas follow the leader at a shift that grows by one each time the partitions have gone once round the
brokers, so that the followers of one broker's partitions spread over the others.  With five brokers,
start index 0 and shift 0 (Kafka's own example)::

    broker-0  broker-1  broker-2  broker-3  broker-4
    p0        p1        p2        p3        p4        (1st replica)
    p5        p6        p7        p8        p9        (1st replica)
    p4        p0        p1        p2        p3        (2nd replica)
    p8        p9        p5        p6        p7        (2nd replica)

Pure: the randomness is an injected C{random.Random}.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from twlog.errors import TwlogError

__all__ = ["InvalidReplicationFactor", "assign_replicas"]


class InvalidReplicationFactor(TwlogError):
    """The replication factor cannot be met: below 1, or more than the live brokers."""


def _replica_index(first: int, shift: int, j: int, brokers: int) -> int:
    """The index of a partition's replica C{j + 2} (after its leader at C{first}): never the leader's."""
    return (first + 1 + (shift + j) % (brokers - 1)) % brokers


def assign_replicas(brokers: Sequence[int], partitions: int, replication_factor: int, start_index: int | None = None,
                    rng: random.Random | None = None, *, shift: int | None = None) -> dict[int, tuple[int, ...]]:
    """Partition number -> its replicas (leader first) for a topic of C{partitions} partitions on C{brokers}.

    @param brokers: the live broker ids (sorted here, so the result does not depend on their order).
    @param start_index: the index in C{brokers} of partition 0's leader; random (C{rng}) when None.
    @param shift: the first followers' shift; C{start_index} when that is given (as Kafka does), else random.
    @raise InvalidReplicationFactor: C{replication_factor} < 1 or > the number of brokers.
    @raise ValueError: C{partitions} < 1.
    """
    ids = sorted(set(brokers))
    if partitions < 1:
        raise ValueError(f"a replicated topic needs at least 1 partition, not {partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactor(f"replication factor {replication_factor} is below 1")
    if replication_factor > len(ids):
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} is larger than the {len(ids)} live broker"
            f"{'' if len(ids) == 1 else 's'} ({', '.join(map(str, ids)) or 'none'})")
    rng = rng if rng is not None else random.Random()
    if start_index is None:
        start, shift = rng.randrange(len(ids)), (rng.randrange(len(ids)) if shift is None else shift)
    else:
        if not 0 <= start_index < len(ids):
            raise ValueError(f"start index {start_index} is not an index of {len(ids)} brokers")
        start, shift = start_index, (start_index if shift is None else shift)
    assignment: dict[int, tuple[int, ...]] = {}
    for p in range(partitions):
        if p > 0 and p % len(ids) == 0:
            shift += 1
        first = (p + start) % len(ids)
        assignment[p] = (ids[first], *(ids[_replica_index(first, shift, j, len(ids))]
                                       for j in range(replication_factor - 1)))
    return assignment
