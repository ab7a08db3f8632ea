"""The message browser (/api/topics/{topic}/messages) over a fake cluster: seeking by offset, time, newest N and
oldest; cursor paging; max_bytes; formats; the filter; bad parameters."""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from tests.console.cluster_support import OVERHEAD, FakeCluster, FakeLog
from twlog.console.messages import render

T0_MS = 1_600_000_000_000


class BrowserTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.cluster = FakeCluster(self)
        #: clicks:0-0: three segments, written at T0, T0+1 min and T0+2 min: m0..m2, m3..m5, m6..m8.
        self.log = self.cluster.logs[("clicks", "0-0")] = FakeLog()
        for segment in range(3):
            self.log.append([f"m{segment * 3 + i}".encode() for i in range(3)], T0_MS + segment * 60_000)
        self.offsets = [m.offset for m in self.log.messages()]
        other = self.cluster.logs[("clicks", "1-0")] = FakeLog()
        other.append([b'{"n": 1}', b'{"n": 2}', b"not json"], T0_MS)

    def browse(self, query: str, status: int = 200) -> dict:
        got, answer = self.cluster.call("/api/topics/clicks/messages?" + query)
        self.assertEqual(got, status, answer)
        return answer

    def values(self, answer: dict) -> list[str]:
        return [m["value"] for m in answer["messages"]]

    def test_oldest_and_paging(self) -> None:
        """By default from the oldest message; limit messages per answer, next_cursor going on from the last one
        looked at, until the end (an empty page, not truncated)."""
        answer = self.browse("partition=0-0&limit=4")
        self.assertEqual(self.values(answer), ["m0", "m1", "m2", "m3"])
        self.assertEqual(answer["messages"][0], {"partition": "0-0", "offset": 0, "next_offset": OVERHEAD + 2,
                                                 "size": 2, "value": "m0", "format": "text", "error": None})
        self.assertEqual(answer["partitions"], [{"partition": "0-0", "first_offset": 0, "end_offset": self.log.end}])
        self.assertEqual(answer["next_cursor"], f"0-0:{self.offsets[4]}")
        self.assertTrue(answer["truncated"])
        self.assertEqual((answer["scanned"], answer["matched"], answer["bytes_read"]), (4, 4, 4 * (OVERHEAD + 2)))
        second = self.browse(f"cursor={answer['next_cursor']}&limit=4")
        self.assertEqual(self.values(second), ["m4", "m5", "m6", "m7"])
        third = self.browse(f"cursor={second['next_cursor']}&limit=4")
        self.assertEqual((self.values(third), third["truncated"]), (["m8"], False))
        self.assertEqual(self.browse(f"cursor={third['next_cursor']}")["messages"], [])

    def test_offset(self) -> None:
        """An offset that starts a message lands on it; the end gives an empty page; one inside a message is
        refused with the nearest boundaries; one past the end with the valid range."""
        answer = self.browse(f"partition=0-0&offset={self.offsets[5]}&limit=2")
        self.assertEqual(self.values(answer), ["m5", "m6"])
        self.assertEqual(self.browse(f"partition=0-0&offset={self.log.end}")["messages"], [])
        refused = self.browse(f"partition=0-0&offset={self.offsets[5] + 3}", 400)
        self.assertEqual(refused["error"], f"parameter offset: offset {self.offsets[5] + 3} does not start a message "
                         f"of clicks:0-0: the nearest message boundaries are {self.offsets[5]} and {self.offsets[6]}")
        past = self.browse(f"partition=0-0&offset={self.log.end + 1}", 400)
        self.assertIn(f"is past the end of clicks:0-0: its offsets run from 0 to {self.log.end}", past["error"])

    def test_time(self) -> None:
        """A time lands on the first message of the first segment still written at or after it (Kafka 0.7's
        resolution, a segment); before every segment: the oldest; after them all: the end."""
        for when, first in [(T0_MS + 60_000, "m6"), (T0_MS + 30_000, "m3"), (T0_MS - 1, "m0"), (T0_MS, "m3")]:
            self.assertEqual(self.values(self.browse(f"partition=0-0&time={when}&limit=1")), [first], when)
        iso = self.browse("partition=0-0&time=2020-09-13T12:26:40Z&limit=1")  # (T0_MS, in ISO 8601)
        self.assertEqual(self.values(iso), ["m3"])
        self.assertEqual(self.browse(f"partition=0-0&time={T0_MS + 3_600_000}")["messages"], [])

    def test_newest(self) -> None:
        self.assertEqual(self.values(self.browse("partition=0-0&newest=2")), ["m7", "m8"])
        answer = self.browse("partition=0-0&newest=5&max_bytes=30")  # (30 bytes: the last 2 whole messages)
        self.assertEqual(self.values(answer), ["m7", "m8"])
        self.assertEqual(answer["next_cursor"], f"0-0:{self.log.end}")

    def test_max_bytes(self) -> None:
        """At most max_bytes are read per partition: the page stops there, truncated; a message larger than
        max_bytes is a problem saying to ask for more."""
        answer = self.browse("partition=0-0&max_bytes=30")
        self.assertEqual((self.values(answer), answer["truncated"]), (["m0", "m1"], True))
        small = self.browse("partition=0-0&max_bytes=5")
        self.assertEqual(small["messages"], [])
        self.assertEqual(small["problems"], ["clicks:0-0: the message at offset 0 is larger than max_bytes=5: ask "
                                             "for more (at most 1048576)"])

    def test_several_partitions_take_turns(self) -> None:
        answer = self.browse("partition=0-0,1-0&limit=4")
        self.assertEqual([(m["partition"], m["value"]) for m in answer["messages"]],
                         [("0-0", "m0"), ("1-0", '{"n": 1}'), ("0-0", "m1"), ("1-0", '{"n": 2}')])
        self.assertEqual(answer["next_cursor"], f"0-0:{self.offsets[2]},1-0:{2 * (OVERHEAD + 8)}")
        every = self.browse("limit=2")  # (every partition: 0-1 is empty)
        self.assertEqual([p["partition"] for p in every["partitions"]], ["0-0", "0-1", "1-0"])

    def test_formats_and_filter(self) -> None:
        answer = self.browse("partition=1-0&format=json")
        self.assertEqual([m["error"] for m in answer["messages"]][2][:9], "not JSON:")
        self.assertEqual(answer["messages"][0]["value"], '{\n  "n": 1\n}')
        hexed = self.browse("partition=0-0&format=hex&limit=1")
        self.assertEqual(hexed["messages"][0]["value"], "6d 30")
        found = self.browse("partition=0-0,1-0&filter=M7")
        self.assertEqual(self.values(found), ["m7"])
        self.assertEqual((found["scanned"], found["matched"]), (12, 1))

    def test_broker_down(self) -> None:
        self.cluster.down.add(1)
        answer = self.browse("partition=0-0,1-0&limit=1")
        self.assertEqual(self.values(answer), ["m0"])
        self.assertEqual(answer["unreachable"], ["broker 1 (127.0.0.1:9093)"])
        self.assertEqual(answer["partitions"][1], {"partition": "1-0", "first_offset": None, "end_offset": None})
        self.assertIn("clicks:1-0: cannot reach broker 1", answer["problems"][0])

    def test_bad_parameters(self) -> None:
        for query, name, why in [
                ("partition=9-9", "partition", "'9-9' is not a partition of topic 'clicks'"),
                ("offset=0", "offset", "an offset is in one partition"),
                ("partition=0-0&offset=x", "offset", "is not a whole number"),
                ("partition=0-0&offset=0&time=1", "time", "give one of cursor, offset, time, newest and oldest"),
                ("time=yesterday", "time", "is not a date/time"),
                ("newest=0", "newest", "below 1"),
                ("limit=501", "limit", "above 500"),
                ("max_bytes=2000000", "max_bytes", "above 1048576"),
                ("format=xml", "format", "is not one of text, json, avro, hex"),
                ("format=avro", "format", "avro needs the console's --registry"),
                ("cursor=0-0", "cursor", "is not PARTITION:OFFSET"),
                ("cursor=7-7:0", "cursor", "'7-7' is not a partition")]:
            answer = self.browse(query, 400)
            self.assertTrue(answer["error"].startswith(f"parameter {name}: "), (query, answer["error"]))
            self.assertIn(why, answer["error"], query)

    def test_unknown_topic(self) -> None:
        status, answer = self.cluster.call("/api/topics/nope/messages")
        self.assertEqual((status, answer["error"]), (404, "topic 'nope' does not exist"))


class RenderTests(SynchronousTestCase):
    def test_render(self) -> None:
        self.assertEqual(render(b"caf\xc3\xa9", "text"), ("café", None))
        self.assertEqual(render(b"\xff", "text"), ("\ufffd", "not UTF-8 (shown with U+FFFD)"))
        self.assertEqual(render(b'[1,2]', "json"), (json.dumps([1, 2], indent=2), None))
        self.assertEqual(render(b"\x00\x01", "hex"), ("00 01", None))


class AvroTests(SynchronousTestCase):
    def test_avro_through_the_registry(self) -> None:
        """format=avro decodes each message with the console's registry client (here a fake deserializer); one it
        cannot decode is shown as text, with why."""
        from twisted.internet.defer import fail, succeed

        cluster = FakeCluster(self)
        cluster.context.registry_url = "http://registry:8081"
        log = cluster.logs[("clicks", "0-0")] = FakeLog()
        log.append([b"\x00\x00\x00\x00\x01alice", b"plain"], T0_MS)

        def deserialize(topic: str, payload: bytes):
            if payload.startswith(b"\x00"):
                return succeed({"topic": topic, "name": payload[5:].decode(), "raw": payload[5:]})
            return fail(ValueError("a message of 'clicks' is not Avro in Confluent's wire format: no magic byte"))

        cluster.context.parts["avro"] = deserialize
        status, answer = cluster.call("/api/topics/clicks/messages?partition=0-0&format=avro")
        self.assertEqual(status, 200)
        first, second = answer["messages"]
        self.assertEqual(json.loads(first["value"]), {"topic": "clicks", "name": "alice", "raw": "alice"})
        self.assertEqual((first["format"], first["error"]), ("avro", None))
        self.assertEqual(second["value"], "plain")
        self.assertEqual(second["error"], "not decoded as Avro: a message of 'clicks' is not Avro in Confluent's "
                                          "wire format: no magic byte")
