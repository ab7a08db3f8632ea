# -*- test-case-name: tests.client.test_replica_status,tests.integration.test_replication_failover -*-
"""What each partition's leader knows of its replicas (REPLICA_STATUS, type 15), asked of every leader at once.

L{ask_leaders} groups a replicated topic's partitions by leader, sends each leader one REPLICA_STATUS
for its partitions, all in parallel, each bounded by the options' connect timeout and C{timeout_s}, and
returns each answered partition's L{PartitionProgress} and one line per problem (a leader that cannot be
reached, or that no longer leads a partition): C{twlog topics describe} prints those partitions' high
watermark and ends as unknown, and the lines on stderr.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
from twisted.internet.defer import Deferred, gatherResults

from twlog.client.connection import BrokerConnection
from twlog.client.options import ClientOptions
from twlog.errors import ERRORS, TwlogError
from twlog.partition import address_text
from twlog.protocol.replica_status_codec import UNKNOWN, ReplicaStatus, ReplicaStatusRequest
from twlog.protocol.replication_codec import ReplicatedLayout

__all__ = ["PartitionProgress", "ask_leaders"]


@attrs.frozen
class PartitionProgress:
    """One partition as its leader reports it: the high watermark and each replica's end (broker id -> end,
    the leader's own included, in replica order; None for a follower whose end the leader does not know)."""

    partition: int
    leader: int
    leader_epoch: int
    high_watermark: int
    ends: dict[int, int | None]

    @classmethod
    def from_status(cls, leader: int, replicas: tuple[int, ...], status: ReplicaStatus) -> PartitionProgress:
        known: dict[int, int | None] = {f.replica: (f.end if f.end != UNKNOWN else None) for f in status.followers}
        known[leader] = status.leader_end
        ends = {r: known.get(r) for r in replicas}
        ends.update({r: end for r, end in known.items() if r not in ends})
        return cls(status.partition, leader, status.leader_epoch, status.high_watermark, ends)


def _plural(numbers: list[int]) -> str:
    return f"partition{'s' if len(numbers) != 1 else ''} {', '.join(map(str, numbers))}"


async def ask_leaders(layout: ReplicatedLayout, addresses: Mapping[int, tuple[str, int]], *, reactor,
                      options: ClientOptions | None = None, connect: Callable[..., Any] = BrokerConnection,
                      ) -> tuple[dict[int, PartitionProgress], list[str]]:
    """Ask each leader of C{layout}'s partitions (at C{addresses}: broker id -> (host, port)) REPLICA_STATUS.

    @return: the partitions answered (number -> L{PartitionProgress}), and one line per problem, naming the
        topic, the partitions and the leader; a partition with no live leader is left out without a line.
    """
    options = ClientOptions.build(options)
    replicas = {p.partition: p.replicas for p in layout.partitions}
    by_leader: dict[int, list[int]] = {}
    for p in layout.partitions:
        if p.leader >= 0:
            by_leader.setdefault(p.leader, []).append(p.partition)

    async def ask(leader: int, partitions: list[int]) -> tuple[list[PartitionProgress], list[str]]:
        where = f"{layout.topic} {_plural(partitions)}"
        address = addresses.get(leader)
        if address is None:
            return [], [f"{where}: leader broker {leader} is not among the live brokers"]
        connection = connect(*address, reactor=reactor, options=options)
        try:
            response = await connection.request(ReplicaStatusRequest(layout.topic, tuple(partitions)))
        except TwlogError as e:
            return [], [f"{where}: cannot ask leader broker {leader} at {address_text(*address)}: {e}"]
        finally:
            await connection.close()
        found, problems = [], []
        for status in response.partitions:
            if status.error:
                name = getattr(ERRORS.get(status.error), "__name__", f"error {status.error}")
                problems.append(f"{layout.topic} partition {status.partition}: broker {leader} answers {name} "
                                "(the leader changed since the metadata was read?)")
            elif status.partition in replicas:
                found.append(PartitionProgress.from_status(leader, replicas[status.partition], status))
        return found, problems

    answers = await gatherResults([Deferred.fromCoroutine(ask(leader, partitions))
                                   for leader, partitions in sorted(by_leader.items())])
    progress = {p.partition: p for found, _ in answers for p in found}
    return progress, [line for _, problems in answers for line in problems]
