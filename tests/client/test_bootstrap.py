"""Tests for twlog.client.bootstrap: which CLUSTER_METADATA answer describes the cluster, with no I/O."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.client.bootstrap import Bootstrap, BootstrapPass, Starting
from twlog.errors import BrokerTimeout, ConnectionFailed
from twlog.protocol.responses import (
    VIEW_CURRENT,
    VIEW_STALE,
    VIEW_STANDALONE,
    VIEW_STARTING,
    BrokerAddress,
    ClusterMetadataResponse,
    TopicLayout,
)

A, B = ("a", 9092), ("b", 9093)


def answer(broker_id: int, view: int, holders: tuple = ()) -> ClusterMetadataResponse:
    me = BrokerAddress(broker_id, f"h{broker_id}", 9090 + broker_id)
    return ClusterMetadataResponse(broker_id, view, (me,), (TopicLayout("t", 0, holders),) if holders else ())


def walk(answers: list) -> tuple[BootstrapPass, list[tuple[str, int]]]:
    """A pass over A and B fed C{answers} in turn; the addresses it asked."""
    bootstrap, asked = BootstrapPass([A, B]), []
    answers = list(answers)
    while (address := bootstrap.next_address()) is not None:
        asked.append(address)
        bootstrap.receive(answers.pop(0))
    return bootstrap, asked


class BootstrapPassTests(SynchronousTestCase):
    def test_current_answer_ends_the_pass(self) -> None:
        """The first broker that follows ZooKeeper describes the cluster: nobody else is asked."""
        current = answer(1, VIEW_CURRENT)
        bootstrap, asked = walk([current])
        self.assertEqual(asked, [A])
        self.assertEqual(bootstrap.result(), Bootstrap(current, "a:9092", {1}))

    def test_standalone_answers_are_merged(self) -> None:
        """Brokers without ZooKeeper each describe themselves: every address answers, and the answers merge."""
        bootstrap, asked = walk([answer(1, VIEW_STANDALONE, ((1, 2),)), answer(2, VIEW_STANDALONE, ((2, 1),))])
        cluster = bootstrap.result()
        self.assertEqual(asked, [A, B])
        self.assertEqual((cluster.asked, cluster.answered), ("a:9092, b:9093", {1, 2}))
        self.assertEqual(cluster.response.layout("t").holders, ((1, 2), (2, 1)))

    def test_standalone_with_a_failed_address_is_refused(self) -> None:
        """Without ZooKeeper every address must answer: one that fails is named, never a silent subset."""
        bootstrap, _ = walk([answer(1, VIEW_STANDALONE), ConnectionFailed("b: refused")])
        with self.assertRaises(ConnectionFailed) as caught:
            bootstrap.result()
        self.assertIn("b: refused", str(caught.exception))
        self.assertIn("runs without ZooKeeper", str(caught.exception))

    def test_stale_is_used_when_nothing_better(self) -> None:
        """A broker that lost ZooKeeper describes the cluster as it last saw it, when no current one answers."""
        stale = answer(2, VIEW_STALE)
        bootstrap, _ = walk([BrokerTimeout("a: slow"), stale])
        self.assertEqual(bootstrap.result(), Bootstrap(stale, "b:9093", {2}))

    def test_all_starting_says_ask_again(self) -> None:
        """Every broker still reading ZooKeeper: Starting (ask again later), naming both addresses."""
        bootstrap, _ = walk([answer(1, VIEW_STARTING), answer(2, VIEW_STARTING)])
        with self.assertRaises(Starting) as caught:
            bootstrap.result()
        self.assertIn("cannot learn the cluster from a:9092, b:9093", str(caught.exception))

    def test_nothing_answers(self) -> None:
        """No answer at all: ConnectionFailed (not Starting) with each address's error."""
        bootstrap, _ = walk([ConnectionFailed("a: refused"), ConnectionFailed("b: refused")])
        with self.assertRaises(ConnectionFailed) as caught:
            bootstrap.result()
        self.assertNotIsInstance(caught.exception, Starting)
        self.assertIn("a: refused; b: refused", str(caught.exception))
