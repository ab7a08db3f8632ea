# -*- test-case-name: tests.client.test_bootstrap,tests.client.test_discovery,tests.client.test_async_discovery -*-
"""Learning the cluster from a list of broker addresses (pure): which answer describes it.

The blocking L{twlog.client.discovery.bootstrap} and the Twisted
L{twlog.client.async_discovery.bootstrap_async} ask the addresses given
CLUSTER_METADATA_V2 (type 14, which describes replicated topics too) in turn, and an address
whose broker closes the connection on it (an older broker) CLUSTER_METADATA (type 8);
L{BootstrapPass} is everything they decide, with no
I/O (h11's shape): L{BootstrapPass.next_address} says whom to ask,
L{BootstrapPass.receive} takes the answer or the error, and
L{BootstrapPass.result} says what the answers make:

  - the first broker that follows ZooKeeper (view current) describes everything;
  - brokers without ZooKeeper each describe themselves, so then every address
    must answer, and the answers are merged;
  - an answer from a broker whose ZooKeeper session is down (stale) is used
    when no better one came, with a warning in the log;
  - one that has not read ZooKeeper yet is not used: when every answer is such,
    L{Starting} says to ask again a little later (L{STARTING_RETRIES} times,
    L{STARTING_WAIT_S} apart).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import attrs

from twlog.errors import ConnectionFailed, ConnectionLost, InvalidRequest
from twlog.partition import address_text
from twlog.protocol import responses
from twlog.protocol.replication_codec import NO_BROKER, ClusterMetadataV2Response, ReplicatedLayout
from twlog.protocol.responses import ClusterMetadataResponse

#: What asking CLUSTER_METADATA_V2 raises when the broker does not know type 14 (an older one answers
#: InvalidRequest and closes the connection; one that closes at once gives ConnectionLost): ask type 8 then.
OLDER_BROKER = (InvalidRequest, ConnectionLost)

#: An answer to CLUSTER_METADATA_V2 (type 14), or to CLUSTER_METADATA (type 8) from an older broker.
ClusterAnswer = ClusterMetadataResponse | ClusterMetadataV2Response

__all__ = ["OLDER_BROKER", "STARTING_RETRIES", "STARTING_WAIT_S", "Bootstrap", "BootstrapPass", "ClusterAnswer",
           "Starting", "merge_answers"]

_logger = logging.getLogger(__name__)

#: How often, and after how long, a bootstrap asks again when every broker is still reading ZooKeeper.
STARTING_RETRIES = 8
STARTING_WAIT_S = 0.25

_VIEW_PROBLEMS = {
    responses.VIEW_STARTING: "has not read the cluster from ZooKeeper yet (starting, or ZooKeeper is slow)",
    responses.VIEW_STANDALONE: "runs without ZooKeeper, so it knows only its own partitions, and another address "
                               "failed",
}


class Starting(ConnectionFailed):
    """Every broker that answered has not read ZooKeeper yet."""


@attrs.frozen
class Bootstrap:
    """What a bootstrap learnt: the cluster, who described it, and which brokers answered."""

    #: The cluster, as one answer (merged over the brokers asked when none knows the whole cluster).
    response: ClusterAnswer
    #: The address(es) that described it, for messages.
    asked: str
    #: The ids of the brokers that answered (known to be reachable).
    answered: set[int]

    @property
    def where(self) -> str:
        """The cluster, as an UnknownTopic message names it."""
        live = ", ".join(str(b.broker_id) for b in self.response.brokers)
        return f"the brokers of the cluster (live: {live}; asked {self.asked})"


class BootstrapPass:
    """One pass over the addresses given: whom to ask next, and what their answers make (no I/O)."""

    def __init__(self, asked: Sequence[tuple[str, int]]) -> None:
        self.asked = list(asked)
        self._pending = list(self.asked)
        self._answers: list[tuple[str, ClusterAnswer]] = []
        self._problems: list[str] = []
        self._current: Bootstrap | None = None

    def next_address(self) -> tuple[str, int] | None:
        """The next address to ask CLUSTER_METADATA, or None: L{result} is known."""
        if self._current is not None or not self._pending:
            return None
        return self._pending[0]

    def receive(self, answer: ClusterAnswer | Exception) -> None:
        """The answer of the address L{next_address} gave, or the connection error asking it raised."""
        host, port = self._pending.pop(0)
        address = address_text(host, port)
        if isinstance(answer, Exception):
            self._problems.append(str(answer))
        elif answer.view == responses.VIEW_CURRENT:
            self._current = Bootstrap(answer, address, {answer.broker_id})
        else:
            self._answers.append((address, answer))

    def result(self) -> Bootstrap:
        """The cluster the answers describe.

        @raise Starting: every answer is from a broker that has not read ZooKeeper yet (ask again).
        @raise ConnectionFailed: no usable answer, naming the addresses and why.
        """
        if self._current is not None:
            return self._current
        answers, problems = self._answers, list(self._problems)
        standalone = [(a, r) for a, r in answers if r.view == responses.VIEW_STANDALONE]
        if standalone and not problems and len(standalone) == len(answers):
            merged = merge_answers(r for _, r in standalone)
            return Bootstrap(merged, ", ".join(a for a, _ in standalone), {r.broker_id for _, r in standalone})
        stale = [(a, r) for a, r in answers if r.view == responses.VIEW_STALE]
        if stale:
            address, answer = stale[0]
            _logger.warning("broker %s has lost ZooKeeper: using the cluster as it last saw it", address)
            return Bootstrap(answer, address, {answer.broker_id})
        for address, answer in answers:
            problems.append(f"broker {address} "
                            + _VIEW_PROBLEMS.get(answer.view, f"sent an unknown view {answer.view}"))
        error = Starting if answers and all(a.view == responses.VIEW_STARTING for _, a in answers) else ConnectionFailed
        where = ", ".join(address_text(host, port) for host, port in self.asked)
        raise error(f"cannot learn the cluster from {where}: " + "; ".join(problems))


def merge_answers(answers: Iterable[ClusterAnswer]) -> ClusterAnswer:
    """One cluster from the answers of brokers that each describe themselves (two addresses of one broker: once).

    The merge is a CLUSTER_METADATA_V2 answer when any answer is one (a replicated topic kept as the first
    answer describing it gives it), else a CLUSTER_METADATA answer.
    """
    brokers: dict[int, responses.BrokerAddress] = {}
    layouts: dict[str, dict[int, int]] = {}
    errors: dict[str, int] = {}
    replicated: dict[str, ReplicatedLayout] = {}
    first = None
    v2 = False
    for answer in answers:
        first = answer if first is None else first
        v2 = v2 or isinstance(answer, ClusterMetadataV2Response)
        for broker in answer.brokers:
            brokers.setdefault(broker.broker_id, broker)
        for layout in answer.topics:
            if isinstance(layout, ReplicatedLayout):
                replicated.setdefault(layout.topic, layout)
                continue
            errors[layout.topic] = errors.get(layout.topic) or layout.error
            for broker_id, count in layout.holders:
                layouts.setdefault(layout.topic, {}).setdefault(broker_id, count)
    topics = tuple(responses.TopicLayout(t, errors[t], tuple(sorted(layouts.get(t, {}).items()))) for t in errors)
    if v2:
        return ClusterMetadataV2Response(first.broker_id, responses.VIEW_STANDALONE, NO_BROKER,
                                         tuple(sorted(brokers.values())),
                                         topics + tuple(r for t, r in replicated.items() if t not in errors))
    return ClusterMetadataResponse(first.broker_id, responses.VIEW_STANDALONE, tuple(sorted(brokers.values())), topics)
