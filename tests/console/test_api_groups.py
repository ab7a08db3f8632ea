"""The groups' routes over HTTP (docs/console.md, "Groups"): a FakeZooKeeper, fake brokers, a Clock."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import LogLevel, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from tests.console.web import call
from tests.fakelog import FakeBrokers, FakeLog
from tests.fakezk import FakeZooKeeper
from twlog.console import api_groups
from twlog.console.app import make_site
from twlog.console.context import ConsoleContext
from twlog.console.groups import CONNECT, SAMPLER, LagSampler
from twlog.consumer.admin import describe_groups
from twlog.consumer.group_reset import group_json
from twlog.coord import paths
from twlog.coord.zk import ConnectionLoss
from twlog.protocol.codec import OffsetsRequest

BROKER = ("127.0.0.1", 9092)


class GroupsApiTestCase(SynchronousTestCase):
    """A broker 0 holding clicks:0-0 (20 messages) and 0-1 (5), and a stopped group etl 3 messages into 0-0 and at
    the start of 0-1."""

    def setUp(self) -> None:
        self.zk = FakeZooKeeper()
        self.zk.start()
        self.brokers = FakeBrokers()
        self.logs = [self.brokers.add(BROKER, "clicks", n, FakeLog([b"m" * (10 + i) for i in range(count)]))
                     for n, count in ((0, 20), (1, 5))]
        self.ok(self.zk.create(paths.broker_id_path(0), b"host-1:127.0.0.1:9092", ephemeral=True, makepath=True))
        self.ok(self.zk.create(paths.broker_topic_path("clicks", 0), b"2", ephemeral=True, makepath=True))
        self.commit("etl", "0-0", self.logs[0].starts[3])
        self.commit("etl", "0-1", self.logs[1].starts[0])
        self.clock = Clock()
        self.context = ConsoleContext(zk=self.zk, zookeeper="fake:2181", reactor=self.clock)
        self.context.parts[CONNECT] = self.brokers.connect
        self.site = make_site(self.context)

    def ok(self, d):
        return self.successResultOf(d)

    def commit(self, group: str, name: str, offset: int, topic: str = "clicks") -> None:
        self.ok(self.zk.set_or_create(paths.offset_path(group, topic, name), str(offset).encode()))

    def committed(self, group: str, name: str) -> int:
        return int(self.ok(self.zk.get(paths.offset_path(group, "clicks", name)))[0])

    def join(self, group: str, member: str = "c1") -> None:
        self.ok(self.zk.create(paths.consumer_ids_path(group, member), b'{"clicks": 1}', ephemeral=True,
                               makepath=True))

    def get(self, path: str, status: int = 200):
        answer = call(self.site, "GET", path)
        self.assertEqual(answer.status, status, answer.body)
        return answer.json


class ListTests(GroupsApiTestCase):
    def test_list_before_and_after_a_sample(self) -> None:
        """Names, members and topics from ZooKeeper; the lag is the sampler's last (null before one)."""
        self.join("etl")
        listed = self.get("/api/groups")
        self.assertEqual(listed, {"total": 1, "offset": 0, "limit": 50, "problems": [], "groups": [
            {"group": "etl", "members": 1, "topics": ["clicks"], "lag_bytes": None, "sampled_at": None}]})
        sampler = LagSampler(self.context)
        self.context.parts[SAMPLER] = sampler
        self.ok(sampler.sample())
        self.join("etl", "c2")  # (after the sample: the list shows the sample's count until the next)
        del self.zk.operations[:]
        [row] = self.get("/api/groups")["groups"]
        lag = (self.logs[0].end - self.logs[0].starts[3]) + self.logs[1].end
        self.assertEqual((row["lag_bytes"], row["sampled_at"], row["members"]), (lag, self.clock.seconds(), 1))
        self.assertEqual(self.zk.operations, [("children", paths.CONSUMERS)])  # (one read, whatever the groups)
        self.ok(sampler.sample())
        self.assertEqual(self.get("/api/groups")["groups"][0]["members"], 2)

    def test_zookeeper_lost_during_a_sample_is_one_line(self) -> None:
        """A tick that loses ZooKeeper logs one warning naming it, without a traceback; the next tick runs."""
        events = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        sampler = LagSampler(self.context)

        async def lost() -> None:
            raise ConnectionLoss()

        sampler.sample = lost
        sampler._tick()
        [event] = [e for e in events if e.get("log_namespace") == "twlog.console"]
        self.assertEqual((event["log_level"], event["error"]), (LogLevel.warn, "ConnectionLoss"))
        self.assertNotIn("log_failure", event)
        self.assertIsNone(sampler._running)  # (the next tick is not skipped)

    def test_stop_ends_a_waiting_sample_quietly(self) -> None:
        """Stopping the sampler while a tick waits ends the tick, and logs nothing."""
        events = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        sampler = LagSampler(self.context)
        waiting = Deferred()

        async def slow() -> None:
            await waiting

        sampler.sample = slow
        sampler._tick()
        self.assertIsNotNone(sampler._running)
        self.ok(sampler.stop())
        self.assertIsNone(sampler._running)
        self.assertEqual([e for e in events if e.get("log_namespace") == "twlog.console"], [])

    def test_filter_sort_page(self) -> None:
        for n in range(12):
            self.commit(f"g{n}", "0-0", self.logs[0].starts[n])
        for n in range(3):
            self.join("g5", f"c{n}")
        self.context.parts[SAMPLER] = sampler = LagSampler(self.context)
        self.ok(sampler.sample())
        listed = self.get("/api/groups?filter=G1&limit=2")
        self.assertEqual((listed["total"], [r["group"] for r in listed["groups"]]), (3, ["g1", "g10"]))
        listed = self.get("/api/groups?filter=g1&offset=2")
        self.assertEqual([r["group"] for r in listed["groups"]], ["g11"])
        names = [r["group"] for r in self.get("/api/groups?sort=name&order=desc&limit=3")["groups"]]
        self.assertEqual(names, ["g11", "g10", "g9"])
        by_lag = [r["group"] for r in self.get("/api/groups?sort=lag&order=desc&limit=500")["groups"]]
        self.assertEqual(by_lag[:3], ["etl", "g0", "g1"])  # etl: 3 messages into 0-0, plus all of 0-1
        self.assertEqual(by_lag[-1], "g11")
        by_members = self.get("/api/groups?sort=members&order=desc&limit=1")["groups"]
        self.assertEqual((by_members[0]["group"], by_members[0]["members"]), ("g5", 3))

    def test_bad_parameters(self) -> None:
        for query, name in (("limit=0", "limit"), ("limit=501", "limit"), ("offset=-1", "offset"),
                            ("sort=size", "sort"), ("order=up", "order"), ("limit=x", "limit")):
            answer = call(self.site, "GET", f"/api/groups?{query}")
            self.assertEqual(answer.status, 400, query)
            self.assertTrue(answer.error.startswith(f"parameter {name}: "), answer.error)

    def test_zookeeper_unreachable(self) -> None:
        self.zk.suspend()
        for path in ("/api/groups", "/api/groups/etl"):
            answer = call(self.site, "GET", path)
            self.assertEqual((answer.status, answer.json["unreachable"]), (503, ["zookeeper fake:2181"]))
            self.assertEqual(answer.error, "ZooKeeper at fake:2181 is unreachable")


class DescribeTests(GroupsApiTestCase):
    def test_as_twlog_groups_json(self) -> None:
        """What `twlog groups --json` prints for the group, plus lag in messages, live and problems."""
        [description] = self.ok(describe_groups(self.zk, "etl", connect=self.brokers.connect))
        expected = group_json(description)
        answer = self.get("/api/groups/etl")
        self.assertEqual([p.pop("lag_messages") for p in answer["partitions"]], [17, 5])
        self.assertEqual((answer.pop("live"), answer.pop("problems")), (False, []))
        self.assertEqual(answer, expected)
        self.assertEqual(expected["lag_bytes"], (self.logs[0].end - self.logs[0].starts[3]) + self.logs[1].end)
        self.join("etl")
        self.assertTrue(self.get("/api/groups/etl")["live"])

    def test_large_lag_is_not_counted(self) -> None:
        self.patch(api_groups, "LAG_COUNT_MAX_BYTES", self.logs[1].end)  # (0-1's lag; 0-0's is more)
        self.assertEqual([p["lag_messages"] for p in self.get("/api/groups/etl")["partitions"]], [None, 5])

    def test_down_broker(self) -> None:
        """A broker that does not answer: its partitions' lag is null with the problem; the rest are known."""
        self.brokers.down.add(BROKER)
        answer = self.get("/api/groups/etl")
        self.assertEqual([p["lag_bytes"] for p in answer["partitions"]], [None, None])
        self.assertEqual(answer["problems"], ["broker 0 at 127.0.0.1:9092, which holds clicks:0-0..0-1, did not "
                                              "answer (broker at 127.0.0.1:9092 is unreachable)"])

    def test_unknown_group(self) -> None:
        answer = call(self.site, "GET", "/api/groups/etk")
        self.assertEqual(answer.status, 404)
        self.assertEqual(answer.error, "no group 'etk' in ZooKeeper at fake:2181; did you mean 'etl'?")


class ResetTests(GroupsApiTestCase):
    def reset(self, body, status: int = 200, group: str = "etl", **kwargs):
        answer = call(self.site, "POST", f"/api/groups/{group}/reset", body, **kwargs)
        self.assertEqual(answer.status, status, answer.body)
        return answer.json

    def test_preview_then_apply(self) -> None:
        """A preview changes nothing; the same request with dry_run false writes what it showed."""
        start = self.logs[0].starts[3]
        body = {"topic": "clicks", "partition": None, "to": "earliest", "dry_run": True}
        preview = self.reset(body)
        rows = [{"topic": "clicks", "partition": "0-0", "offset": start, "new_offset": 0, "clamped": False},
                {"topic": "clicks", "partition": "0-1", "offset": 0, "new_offset": 0, "clamped": False}]
        self.assertEqual(preview, {"rows": rows, "applied": False, "left_out": []})
        self.assertEqual(self.committed("etl", "0-0"), start)
        self.assertEqual(self.reset({**body, "dry_run": False}), {"rows": rows, "applied": True, "left_out": []})
        self.assertEqual(self.committed("etl", "0-0"), 0)

    def test_targets(self) -> None:
        """latest, a time, a byte offset of one partition, a shift (clamped at the end: said)."""
        starts = self.logs[0].starts
        self.reset({"topic": "clicks", "to": "latest", "dry_run": False})
        self.assertEqual((self.committed("etl", "0-0"), self.committed("etl", "0-1")),
                         (self.logs[0].end, self.logs[1].end))
        self.reset({"topic": "clicks", "partition": "0-0", "to": {"offset": starts[7]}, "dry_run": False})
        self.assertEqual(self.committed("etl", "0-0"), starts[7])
        rows = self.reset({"to": {"shift": -2}, "dry_run": False})["rows"]  # every topic the group has offsets for
        self.assertEqual([(r["new_offset"], r["clamped"]) for r in rows],
                         [(starts[5], False), (self.logs[1].starts[3], False)])
        rows = self.reset({"topic": "clicks", "partition": 0, "to": {"shift": 100}})["rows"]
        self.assertEqual([(r["partition"], r["new_offset"], r["clamped"]) for r in rows],
                         [("0-0", self.logs[0].end, True)])
        rows = self.reset({"topic": "clicks", "to": {"time": "2011-03-13T07:06:40Z"}})["rows"]
        self.assertEqual([r["new_offset"] for r in rows], [0, 0])

    def test_refusals(self) -> None:
        """Bad parameters name themselves (400); an unknown group or topic is 404; live members 409."""
        inside = self.logs[0].starts[1] + 3
        for body, name in (({"to": "start"}, "to"), ({"to": {"offset": -1}}, "to"), ({}, "to"),
                           ({"to": {"time": "yesterday"}}, "to"), ({"to": "earliest", "dry_run": "no"}, "dry_run"),
                           ({"topic": 5, "to": "earliest"}, "topic"), ([], "body"),
                           ({"to": {"offset": 9}}, "partition"),
                           ({"topic": "clicks", "partition": "7-0", "to": "earliest"}, "partition"),
                           ({"topic": "clicks", "partition": "0-0", "to": {"offset": inside}}, "to")):
            error = self.reset(body, 400)["error"]
            self.assertTrue(error.startswith(f"parameter {name}: "), (body, error))
        self.assertIn("does not start a message of clicks:0-0", self.reset(
            {"topic": "clicks", "partition": "0-0", "to": {"offset": inside}}, 400)["error"])
        self.assertEqual(self.reset({"topic": "views", "to": "earliest"}, 404)["error"],
                         "topic 'views' does not exist on the brokers registered in ZooKeeper at fake:2181")
        self.assertIn("no group 'nosuch'", self.reset({"to": "earliest"}, 404, group="nosuch")["error"])
        self.join("etl")
        self.assertRegex(self.reset({"to": "earliest"}, 409)["error"],
                         r"group 'etl' has 1 live member \(c1\); stop them before resetting its offsets")

    def test_changes_need_the_header_and_a_writable_console(self) -> None:
        self.assertEqual(self.reset({"to": "earliest"}, 403, change=False)["error"],
                         "a change must carry the header X-Twlog-Console: 1")
        self.context.read_only = True
        self.assertIn("read-only", self.reset({"to": "earliest"}, 403)["error"])
        self.assertEqual(self.committed("etl", "0-0"), self.logs[0].starts[3])

    def test_applied_changes_are_logged(self) -> None:
        events = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        self.reset({"topic": "clicks", "partition": "0-1", "to": "latest", "dry_run": False})
        [event] = [e for e in events if e.get("log_format", "").startswith("console change")]
        self.assertEqual(event["who"], "anonymous from 127.0.0.1")
        self.assertEqual(event["what"], f"reset group etl's offsets of 1 partition(s) to latest: clicks:0-1 "
                                        f"0->{self.logs[1].end}")


class DeleteTests(GroupsApiTestCase):
    def test_delete(self) -> None:
        self.join("etl")
        answer = call(self.site, "DELETE", "/api/groups/etl")
        self.assertEqual(answer.status, 409)
        self.assertIn("stop them before deleting it", answer.error)
        self.ok(self.zk.delete(paths.consumer_ids_path("etl", "c1")))
        answer = call(self.site, "DELETE", "/api/groups/etl")
        self.assertEqual((answer.status, answer.json), (200, {"deleted": {"clicks": 2}}))
        self.assertEqual(call(self.site, "DELETE", "/api/groups/etl").status, 404)
        self.assertEqual(call(self.site, "GET", "/api/groups/etl").status, 404)


class SamplerTests(GroupsApiTestCase):
    def test_series_and_bounded_ticks(self) -> None:
        """Each tick samples the next groups (at most groups_per_tick), one OFFSETS per partition on one
        connection per broker kept between ticks; the lag series are recorded."""
        for n in range(9):
            self.commit(f"g{n}", "0-1", self.logs[1].starts[2])
        sampler = LagSampler(self.context, interval_s=10, groups_per_tick=4).start()
        self.addCleanup(sampler.stop)
        offsets = [r for _, r in self.brokers.requests if isinstance(r, OffsetsRequest)]
        self.assertEqual(len(offsets), 2)  # etl, g0..g2: two partitions asked once each
        self.assertEqual(sorted(sampler.latest), ["etl", "g0", "g1", "g2"])
        self.clock.advance(10)
        self.clock.advance(10)
        self.assertEqual(len(sampler.latest), 10)
        self.assertEqual(len(self.brokers.connections), 1)
        t = self.clock.seconds()
        lag = self.logs[1].end - self.logs[1].starts[2]
        self.assertEqual(self.context.history.latest("group.g8.lag"), (t, lag))
        self.assertEqual(self.context.history.latest("group.g8.clicks:0-1.lag"), (t, lag))
        self.assertEqual(self.context.history.series("group.etl.lag", 0)[0][0], 0)
        self.ok(self.zk.delete(paths.offset_path("g8", "clicks", "0-1")))
        self.ok(self.zk.delete(paths.offset_path("g8", "clicks")))
        self.ok(self.zk.delete(paths.offset_path("g8", "clicks").rsplit("/", 1)[0]))
        self.ok(self.zk.delete(paths.group_path("g8")))
        self.clock.advance(10)
        self.assertNotIn("g8", sampler.latest)
        self.ok(sampler.stop())
        self.assertTrue(self.brokers.connections[0].closed)
