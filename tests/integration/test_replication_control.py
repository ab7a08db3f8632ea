"""The control plane on loopback with the suite's real ZooKeeper: brokers run for controller, `twlog topics create
--replication-factor` creates a replicated topic, `twlog topics describe` reads it back through a broker's
CLUSTER_METADATA_V2 answer, and a stopping controller (SIGTERM's path) moves its leaderships first."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

from twisted.internet import reactor
from twisted.trial.unittest import TestCase

from tests.integration.broker import start_broker
from tests.integration.test_replication_zk import until
from tests.integration.zookeeper import fresh_connect_string
from twlog.cli.inspect import create_topic, describe_topic
from twlog.cli.main import build_parser
from twlog.coord.replication.controller import ControllerState


async def run(command, *argv: str) -> str:
    """Run a `twlog topics ...` coroutine in this reactor; its stdout."""
    args = build_parser().parse_args(["topics", *argv])
    out = io.StringIO()
    with redirect_stdout(out):
        await command(reactor, args)
    return out.getvalue()


class ReplicatedTopicTests(TestCase):
    timeout = 30

    async def test_create_describe_and_controlled_shutdown(self) -> None:
        hosts = fresh_connect_string()
        brokers = {b: await start_broker(self, broker_id=b, zookeeper=hosts) for b in (1, 2)}
        await until(lambda: any(s.control.controller.active for s in brokers.values()), "a controller is elected")
        controller = next(b for b, s in brokers.items() if s.control.controller.active)
        other = 3 - controller
        # The other broker's own attempt (IDLE, then ELECTING) ends once it has read the winner's node: it stands by.
        await until(lambda: brokers[other].control.controller.state not in (ControllerState.IDLE,
                                                                             ControllerState.ELECTING),
                    "the other broker's election attempt ends")
        self.assertEqual(brokers[other].control.controller.state, ControllerState.STANDBY)

        created = json.loads(await run(create_topic, "create", "-z", hosts, "-t", "orders", "-n", "4",
                                       "--replication-factor", "2", "--min-insync-replicas", "2", "--json"))
        self.assertEqual((created["partitions"], created["replication_factor"], created["min_insync_replicas"],
                          created["started"]), (4, 2, 2, True))

        address = f"127.0.0.1:{brokers[other].broker.port}"
        await until(lambda: brokers[other].cluster.replicated("orders") is not None
                    and all(p.leader >= 0 for p in brokers[other].cluster.replicated("orders").partitions),
                    "the broker's view has the leaders")
        described = json.loads(await run(describe_topic, "describe", "-b", address, "-t", "orders", "--json"))
        partitions = described["partitions"]
        self.assertEqual([p["name"] for p in partitions], ["0", "1", "2", "3"])
        for p in partitions:
            self.assertEqual(p["replicas"], created["replicas"][p["name"]])
            self.assertEqual((p["leader"], p["leader_epoch"], sorted(p["isr"])), (p["replicas"][0], 0, [1, 2]))
        by_zookeeper = json.loads(await run(describe_topic, "describe", "-z", hosts, "-t", "orders", "--json"))
        self.assertEqual(by_zookeeper["partitions"], partitions)

        # The controller stops (what SIGTERM does): its leaderships move to the other broker first.
        led = [p["name"] for p in partitions if p["leader"] == controller]
        self.assertTrue(led)
        control = brokers[controller].control
        await brokers[controller].stopService()
        self.assertEqual(control.still_led, [], "the controlled shutdown ran, and moved every leadership")
        await until(lambda: brokers[other].control.controller.active, "the other broker is the controller")
        await until(lambda: all(p.leader == other for p in brokers[other].cluster.replicated("orders").partitions),
                    "the view has the moved leaders")
        after = json.loads(await run(describe_topic, "describe", "-b", address, "-t", "orders", "--json"))
        for before, now in zip(partitions, after["partitions"], strict=True):
            moved = before["name"] in led
            self.assertEqual((now["leader"], now["leader_epoch"], now["isr"]),
                             (other, 1 if moved else 0, [other]), now)
