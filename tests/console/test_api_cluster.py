"""The cluster's routes (/api/overview, /api/topics, /api/topics/{topic}, /api/brokers) over a fake cluster:
their shapes (docs/console.md), bad parameters (400 naming them), unknown topics (404), ZooKeeper down (503 naming
it) and a broker down (problems)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from tests.console.cluster_support import FakeCluster, FakeLog


class OverviewTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.cluster = FakeCluster(self)

    def test_overview(self) -> None:
        """The brokers (the down one too), the controller, topics and partitions counted, under-replicated and
        offline partitions named; rates unknown (null) before the sampler has two samples."""
        status, answer = self.cluster.call("/api/overview")
        self.assertEqual(status, 200)
        self.assertEqual(answer["brokers"], [
            {"id": 0, "host": "127.0.0.1", "port": 9092, "alive": True},
            {"id": 1, "host": "127.0.0.1", "port": 9093, "alive": True},
            {"id": 2, "host": None, "port": None, "alive": False}])
        self.assertEqual((answer["controller"], answer["topics"], answer["partitions"]), (0, 3, 6))
        self.assertEqual(answer["under_replicated"], [{"topic": "rep", "partition": "1"}])
        self.assertEqual(answer["offline"], [{"topic": "old", "partition": "2-0"}])
        self.assertEqual(answer["rates"], {"messages_in": None, "bytes_in": None, "bytes_out": None})

    def test_rates_from_samples(self) -> None:
        """Two samples 10 s apart give the cluster's bytes in and out per second, summed over the brokers."""
        cluster = self.cluster
        cluster.set_metrics(0, received=1000, sent=500)
        cluster.set_metrics(1, received=0, sent=0)
        cluster.sampler.tick()
        cluster.clock.advance(10)
        cluster.set_metrics(0, received=2000, sent=1500)
        cluster.set_metrics(1, received=500, sent=0)
        cluster.sampler.tick()
        _, answer = cluster.call("/api/overview")
        self.assertEqual(answer["rates"], {"messages_in": None, "bytes_in": 150.0, "bytes_out": 100.0})
        self.assertEqual(answer["problems"], [])

    def test_zookeeper_down(self) -> None:
        """ZooKeeper not connected: every cluster route is 503 naming it, at once."""
        self.cluster.zk.suspend()
        for path in ("/api/overview", "/api/topics", "/api/topics/clicks", "/api/brokers",
                     "/api/topics/clicks/messages"):
            status, answer = self.cluster.call(path)
            self.assertEqual(status, 503, path)
            self.assertEqual(answer["unreachable"], ["zookeeper zk:2181"], path)
            self.assertIn("cannot reach ZooKeeper at zk:2181", answer["error"])

    def test_zookeeper_down_from_the_start(self) -> None:
        cluster = FakeCluster(self, connected=False)
        cluster.zk.suspend()
        status, answer = cluster.call("/api/overview")
        self.assertEqual((status, answer["unreachable"]), (503, ["zookeeper zk:2181"]))


class TopicsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.cluster = FakeCluster(self)

    def names(self, query: str = "") -> list[str]:
        status, answer = self.cluster.call("/api/topics" + query)
        self.assertEqual(status, 200, answer)
        return [t["name"] for t in answer["topics"]]

    def test_list(self) -> None:
        status, answer = self.cluster.call("/api/topics")
        self.assertEqual((answer["total"], answer["offset"], answer["limit"]), (3, 0, 50))
        rep = answer["topics"][2]
        self.assertEqual(rep, {"name": "rep", "partitions": 2, "replicated": True, "replication_factor": 2,
                               "size_bytes": None, "messages_in_per_s": None, "bytes_in_per_s": None,
                               "retention_hours": 2.0, "under_replicated": 1})
        self.assertEqual(answer["topics"][0]["replication_factor"], 1)

    def test_filter_sort_page(self) -> None:
        self.assertEqual(self.names("?filter=CLI"), ["clicks"])
        self.assertEqual(self.names("?sort=partitions&order=desc"), ["clicks", "rep", "old"])
        self.assertEqual(self.names("?offset=1&limit=1"), ["old"])
        self.assertEqual(self.names("?offset=5"), [])

    def test_sort_by_size_and_rate_from_samples(self) -> None:
        """Sizes are the leaders' (twlog_log_size_bytes), rates the growth of their end offsets; a topic whose size
        is unknown sorts last whatever the order."""
        cluster = self.cluster
        cluster.set_metrics(0, received=0, sent=0, sizes={("clicks", "0"): 100, ("clicks", "1"): 50,
                                                          ("rep", "0"): 1000, ("rep", "1"): 999},
                            ends={("clicks", "0"): 100, ("rep", "0"): 1000})
        cluster.set_metrics(1, received=0, sent=0, sizes={("clicks", "0"): 10, ("rep", "1"): 7, ("rep", "0"): 999},
                            ends={("clicks", "0"): 10, ("rep", "1"): 7})
        cluster.sampler.tick()
        cluster.clock.advance(10)
        cluster.set_metrics(0, received=0, sent=0, sizes={("clicks", "0"): 300, ("clicks", "1"): 50,
                                                          ("rep", "0"): 1000},
                            ends={("clicks", "0"): 300, ("rep", "0"): 1000})
        cluster.sampler.tick()
        _, answer = cluster.call("/api/topics?sort=size&order=desc")
        sizes = {t["name"]: (t["size_bytes"], t["bytes_in_per_s"]) for t in answer["topics"]}
        self.assertEqual(sizes, {"rep": (1007.0, 0.0), "clicks": (360.0, 20.0), "old": (None, None)})
        self.assertEqual([t["name"] for t in answer["topics"]], ["rep", "clicks", "old"])
        self.assertEqual(self.names("?sort=size&order=asc"), ["clicks", "rep", "old"])
        self.assertEqual(self.names("?sort=rate&order=desc"), ["clicks", "rep", "old"])

    def test_bad_parameters(self) -> None:
        for query, name in [("?sort=colour", "sort"), ("?order=up", "order"), ("?limit=501", "limit"),
                            ("?limit=0", "limit"), ("?offset=-1", "offset"), ("?offset=x", "offset")]:
            status, answer = self.cluster.call("/api/topics" + query)
            self.assertEqual(status, 400, query)
            self.assertTrue(answer["error"].startswith(f"parameter {name}: "), answer["error"])


class TopicTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.cluster = FakeCluster(self)
        self.cluster.logs[("rep", "0")] = log = FakeLog()
        log.append([b"a", b"bb"], 1)

    def test_replicated(self) -> None:
        status, answer = self.cluster.call("/api/topics/rep")
        self.assertEqual(status, 200)
        self.assertEqual(answer["partitions"], [
            {"partition": "0", "leader": 0, "replicas": [0, 1], "isr": [0, 1], "first_offset": 0, "last_offset": 23,
             "size_bytes": 23, "high_watermark": 23},
            {"partition": "1", "leader": 1, "replicas": [1, 0], "isr": [1], "first_offset": 0, "last_offset": 0,
             "size_bytes": 0, "high_watermark": 0}])
        self.assertEqual((answer["replicated"], answer["config"], answer["problems"]),
                         (True, {"retention.ms": "7200000"}, []))

    def test_unreplicated_with_a_broker_down(self) -> None:
        """0.7 topic clicks with broker 1 not answering: its partition's offsets are unknown and said in problems;
        topic old's broker is not registered: its partition is offline."""
        self.cluster.down.add(1)
        status, answer = self.cluster.call("/api/topics/clicks")
        self.assertEqual(status, 200)
        by_name = {p["partition"]: p for p in answer["partitions"]}
        self.assertEqual(list(by_name), ["0-0", "0-1", "1-0"])
        self.assertEqual((by_name["0-0"]["first_offset"], by_name["0-0"]["replicas"]), (0, [0]))
        self.assertEqual((by_name["1-0"]["first_offset"], by_name["1-0"]["last_offset"]), (None, None))
        self.assertEqual(len(answer["problems"]), 1)
        self.assertIn("clicks:1-0: cannot reach broker 1", answer["problems"][0])
        self.assertEqual(answer["unreachable"], ["broker 1 (127.0.0.1:9093)"])
        _, old = self.cluster.call("/api/topics/old")
        self.assertEqual(old["partitions"][0]["leader"], None)
        self.assertIn("old: partition 2-0 has no live leader", old["problems"])

    def test_groups_reading_it(self) -> None:
        """The groups whose lag on the topic the console sampled, lag summed per group."""
        history = self.cluster.context.history
        history.record("group.g1.rep:0.lag", 1, 10)
        history.record("group.g1.rep:1.lag", 1, 5)
        history.record("group.g2.clicks:0-0.lag", 1, 7)
        _, answer = self.cluster.call("/api/topics/rep")
        self.assertEqual(answer["groups"], [{"group": "g1", "lag_bytes": 15.0}])

    def test_unknown_topic(self) -> None:
        status, answer = self.cluster.call("/api/topics/nope")
        self.assertEqual((status, answer["error"]), (404, "topic 'nope' does not exist"))


class BrokersTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.cluster = FakeCluster(self)

    def test_brokers(self) -> None:
        """Each broker: address, controller, metrics URL, rates from two scrapes, connections, request latency
        percentiles (waiting fetches left out), partitions led and followed; the down one too, with a problem."""
        cluster = self.cluster
        cluster.set_metrics(0, received=0, sent=0, latency=(0, 0, 0))
        cluster.set_metrics(1, received=0, sent=0)
        cluster.sampler.tick()
        cluster.clock.advance(5)
        cluster.set_metrics(0, received=500, sent=1000, connections=7, latency=(900, 995, 1000))
        cluster.sampler.tick()
        status, answer = cluster.call("/api/brokers")
        self.assertEqual(status, 200)
        zero, one, two = answer["brokers"]
        self.assertEqual(zero, {
            "id": 0, "host": "127.0.0.1", "port": 9092, "tls_port": None, "alive": True, "controller": True,
            "metrics_url": "http://127.0.0.1:9192/metrics", "bytes_in_per_s": 100.0, "bytes_out_per_s": 200.0,
            "messages_in_per_s": None, "connections": 7.0, "request_latency_ms": {"p50": 1.0, "p99": 10.0,
                                                                                 "p999": 10.0},
            "leader_partitions": 3, "follower_partitions": 1})
        self.assertEqual((one["bytes_in_per_s"], one["leader_partitions"], one["follower_partitions"]), (0.0, 2, 1))
        self.assertEqual((two["alive"], two["host"], two["metrics_url"]), (False, None, None))
        self.assertEqual(answer["problems"], ["broker 2 is down (not registered; it holds partitions)"])

    def test_metrics_unreachable(self) -> None:
        """A broker whose metrics do not answer: its figures are null and a problem names it."""
        self.cluster.set_metrics(0, received=0, sent=0)
        status, answer = self.cluster.call("/api/brokers")
        self.assertEqual(status, 200)
        self.assertIsNone(answer["brokers"][1]["connections"])
        self.assertIn("cannot read the metrics of broker 1 (127.0.0.1:9093): connection refused by "
                      "http://127.0.0.1:9193/metrics", answer["problems"])
