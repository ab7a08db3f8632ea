"""Replicated topics' ZooKeeper state and the controller against the suite's real ZooKeeper (fresh chroot each)."""

from __future__ import annotations

from twisted.internet import reactor
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.integration.zookeeper import connect
from twlog.coord import paths
from twlog.coord.cluster import ClusterView
from twlog.coord.replication import store
from twlog.coord.replication.controller import Controller, ControllerState
from twlog.coord.replication.values import PartitionState
from twlog.coord.zk import ZooKeeper
from twlog.partition import TopicPartition


async def until(predicate, what: str, timeout_s: float = 20.0) -> None:
    """Wait (polling every 50 ms, at most C{timeout_s}) until C{predicate()} is true."""
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await deferLater(reactor, 0.05, lambda: None)
    raise AssertionError(f"timed out waiting until {what}")


class StoreTests(TestCase):
    timeout = 60

    async def test_compare_and_set_on_a_real_server(self) -> None:
        zk = await connect(self)
        await zk.create(paths.broker_topic_path("old", 1), b"2", makepath=True)
        with self.assertRaises(store.ReplicatedTopicExists):
            await store.create_replicated_topic(zk, "old", {0: (1,)})
        await store.create_replicated_topic(zk, "clicks", {0: (1, 2)}, {"min.insync.replicas": "2"})
        first = PartitionState(1, 0, 1, (1, 2))
        self.assertEqual(await store.create_state(zk, "clicks", 0, first), 0)
        self.assertEqual(await store.write_state_cas(zk, "clicks", 0, PartitionState(2, 1, 1, (2,)), 0), 1)
        with self.assertRaises(store.StateChanged):
            await store.write_state_cas(zk, "clicks", 0, first, 0)
        self.assertEqual((await store.read_state(zk, "clicks", 0))[0].leader, 2)
        with self.assertRaises(store.StateChanged):
            await store.create_state(zk, "deleted", 0, first)
        self.assertIsNone(await zk.exists(paths.replicated_topic_path("deleted")))


class ControllerTests(TestCase):
    timeout = 120

    async def session(self, hosts: str, broker: int | None = None) -> ZooKeeper:
        zk = ZooKeeper(hosts, reactor=reactor)
        await zk.start()
        self.addCleanup(zk.stop)
        if broker is not None:
            await zk.create(paths.broker_id_path(broker), f"127.0.0.1:{9000 + broker}".encode(), ephemeral=True,
                            makepath=True)
        return zk

    def controller(self, zk: ZooKeeper, broker: int) -> Controller:
        controller = Controller(zk, broker, clock=reactor, check_interval_s=1.0)
        controller.start()
        self.addCleanup(controller.stop)
        return controller

    async def test_failover_and_broker_loss(self) -> None:
        admin = await connect(self)
        brokers = {b: await self.session(admin.hosts, b) for b in (1, 2, 3)}
        first = self.controller(await self.session(admin.hosts, 4), 4)
        await until(lambda: first.active, "broker 4 is the controller")
        second_zk = await self.session(admin.hosts, 5)
        second = self.controller(second_zk, 5)
        await until(lambda: second.state is ControllerState.STANDBY, "broker 5 stands by")
        view = ClusterView(admin, ["clicks"])
        await view.start()
        self.addCleanup(view.stop)

        await store.create_replicated_topic(admin, "clicks", {0: (1, 2, 3), 1: (2, 3, 1)}, {"min.insync.replicas": "2"})
        p0, p1 = TopicPartition("clicks", "0"), TopicPartition("clicks", "1")
        await until(lambda: view.layout().leader(p0) == 1 and view.layout().leader(p1) == 2, "first leaders")

        await first._zk.stop()  # the controller's session ends: the other is elected, with the next epoch
        await until(lambda: second.active, "broker 5 takes over")
        self.assertEqual(second.epoch, 2)
        self.assertEqual(first.state, ControllerState.SESSION_LOST)

        await brokers[1].stop()  # broker 1 dies: partition 0 moves to broker 2, its epoch goes up
        await until(lambda: view.layout().leader(p0) == 2, "partition 0 led by broker 2")
        state, _ = await store.read_state(admin, "clicks", 0)
        self.assertEqual(state, PartitionState(2, 1, 2, (2, 3)))
        state, _ = await store.read_state(admin, "clicks", 1)
        self.assertEqual(state, PartitionState(2, 0, 2, (2, 3)))
