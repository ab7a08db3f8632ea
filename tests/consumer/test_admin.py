"""The admin side of consumer groups on a FakeZooKeeper, and the reset checks against a fake broker's answers."""

from __future__ import annotations

import bisect

from twisted.internet.defer import Deferred, succeed
from twisted.trial.unittest import SynchronousTestCase

from tests.fakezk import FakeZooKeeper
from twlog.consumer.admin import (
    NOT_REGISTERED,
    BrokerProblem,
    GroupDescription,
    GroupMember,
    GroupNotFound,
    OffsetRefused,
    PartitionStatus,
    boundary_before,
    check_group,
    check_reset_offset,
    committed_partitions,
    delete_group,
    describe_groups,
    reset_offsets,
)
from twlog.coord import paths
from twlog.partition import TopicPartition
from twlog.protocol.codec import EARLIEST, LATEST, BoundariesRequest, OffsetsRequest
from twlog.protocol.responses import BoundariesResponse, OffsetsResponse


class AdminTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.zk = FakeZooKeeper()
        self.zk.start()

    def test_describe(self) -> None:
        """Members, and per partition (owned, committed, or registered by a live broker) owner and offset; a
        partition whose broker is not registered has an unknown lag, with the problem naming the broker."""
        self.successResultOf(self.zk.create(paths.consumer_ids_path("g", "c"), b'{"t":1}', makepath=True))
        self.successResultOf(self.zk.create(paths.owner_path("g", "t", "0-1"), b"c-0", makepath=True))
        self.successResultOf(self.zk.set_or_create(paths.offset_path("g", "t", "0-0"), b"12"))
        self.successResultOf(self.zk.create(paths.offset_path("g", "t", "junk"), b"1"))
        self.successResultOf(self.zk.create(paths.broker_topic_path("t", 3), b"2", makepath=True))  # broker 3 is dead
        [group] = self.successResultOf(describe_groups(self.zk))
        self.assertEqual(group.members, [GroupMember("c", {"t": 1})])
        down = BrokerProblem(0, NOT_REGISTERED)
        self.assertEqual(group.partitions, [PartitionStatus("t", "0-0", None, 12, None, down),
                                            PartitionStatus("t", "0-1", "c-0", None, None, down)])
        self.assertEqual(group.partitions[1].topic_partition, TopicPartition("t", "0-1"))
        self.assertIsNone(group.lag)
        self.assertEqual(group.unknown, group.partitions[:1])  # 0-1 has no committed offset: no lag either way
        self.assertEqual(group.problems(), ["broker 0, which holds t:0-0..0-1, is not registered: down?"])

    def test_no_groups(self) -> None:
        self.assertEqual(self.successResultOf(describe_groups(self.zk)), [])

    def test_reset_offsets(self) -> None:
        """Offsets are set; bad names, negative offsets and owned partitions are refused."""
        self.successResultOf(reset_offsets(self.zk, "g", "t", {"0-0": 5}))
        self.assertEqual(self.successResultOf(self.zk.get(paths.offset_path("g", "t", "0-0")))[0], b"5")
        self.failureResultOf(reset_offsets(self.zk, "g", "t", {"x": 5}), ValueError)
        self.failureResultOf(reset_offsets(self.zk, "g", "t", {"0-0": -1}), ValueError)
        self.successResultOf(self.zk.create(paths.owner_path("g", "t", "0-0"), b"c-0", makepath=True))
        self.failureResultOf(reset_offsets(self.zk, "g", "t", {"0-0": 1}), ValueError)

    def test_committed_partitions(self) -> None:
        """The partitions with an offset node, whatever their broker, in name order (bad names skipped)."""
        for name in ("1-0", "0-10", "0-2", "junk"):
            self.successResultOf(self.zk.set_or_create(paths.offset_path("g", "t", name), b"0"))
        self.assertEqual([tp.name for tp in self.successResultOf(committed_partitions(self.zk, "g", "t"))],
                         ["0-2", "0-10", "1-0"])
        self.assertEqual(self.successResultOf(committed_partitions(self.zk, "nosuch", "t")), [])


class GroupDescriptionTests(SynchronousTestCase):
    def test_total_leaves_out_unknown_lags(self) -> None:
        """The total is over known lags; the partitions of a down broker are listed apart, one line per broker."""
        down = BrokerProblem(1, NOT_REGISTERED)
        silent = BrokerProblem(2, "did not answer (timed out)", "127.0.0.1:9094")
        group = GroupDescription("g", [], [
            PartitionStatus("clicks", "0-0", None, 10, 30),
            *[PartitionStatus("clicks", f"1-{n}", None, 5, None, down) for n in range(4)],
            PartitionStatus("clicks", "2-0", None, 7, None, silent),
        ])
        self.assertEqual(group.lag, 20)
        self.assertEqual([p.partition for p in group.unknown], ["1-0", "1-1", "1-2", "1-3", "2-0"])
        self.assertEqual(group.problems(), [
            "broker 1, which holds clicks:1-0..1-3, is not registered: down?",
            "broker 2 at 127.0.0.1:9094, which holds clicks:2-0, did not answer (timed out)",
        ])


class GroupNamesTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.zk = FakeZooKeeper(hosts="zk:2181")
        self.zk.start()
        for group in ("clicks-etl", "views"):
            self.successResultOf(self.zk.set_or_create(paths.offset_path(group, "t", "0-0"), b"0"))

    def test_did_you_mean(self) -> None:
        """An unknown group names the nearest existing one, then the hint."""
        error = self.failureResultOf(check_group(self.zk, "clickz", "use --create to start a new group"),
                                     GroupNotFound).value
        self.assertEqual(str(error), "no group 'clickz' in ZooKeeper at zk:2181; did you mean 'clicks-etl'? "
                                     "use --create to start a new group")
        error = self.failureResultOf(check_group(self.zk, "zzz"), GroupNotFound).value
        self.assertEqual(str(error), "no group 'zzz' in ZooKeeper at zk:2181 (groups: clicks-etl, views)")
        self.successResultOf(check_group(self.zk, "views"))

    def test_delete(self) -> None:
        """A stopped group's nodes are all deleted; live members or owners refuse it; an unknown group too."""
        self.successResultOf(self.zk.set_or_create(paths.offset_path("clicks-etl", "u", "0-1"), b"3"))
        self.successResultOf(self.zk.ensure_path(paths.consumer_ids_path("clicks-etl")))
        member = self.zk.create(paths.consumer_ids_path("clicks-etl", "c1"), b'{"t":1}', ephemeral=True)
        self.successResultOf(member)
        error = self.failureResultOf(delete_group(self.zk, "clicks-etl"), ValueError).value
        self.assertEqual(str(error), "group 'clicks-etl' has 1 live member (c1); stop them before deleting it")
        self.successResultOf(self.zk.delete(paths.consumer_ids_path("clicks-etl", "c1")))
        self.successResultOf(self.zk.create(paths.owner_path("clicks-etl", "t", "0-0"), b"c1-0", makepath=True))
        error = self.failureResultOf(delete_group(self.zk, "clicks-etl"), ValueError).value
        self.assertIn("still owns t:0-0", str(error))
        self.successResultOf(self.zk.delete(paths.owner_path("clicks-etl", "t", "0-0")))
        self.assertEqual(self.successResultOf(delete_group(self.zk, "clicks-etl")), {"t": 1, "u": 1})
        self.assertIsNone(self.successResultOf(self.zk.exists(paths.group_path("clicks-etl"))))
        self.assertIsNotNone(self.successResultOf(self.zk.exists(paths.group_path("views"))))
        self.failureResultOf(delete_group(self.zk, "clicks-etl"), GroupNotFound)


class FakeLog:
    """A broker's answers for one partition whose messages start at C{starts}; C{end} is the flushed end."""

    def __init__(self, starts: list[int], end: int) -> None:
        self.starts = starts
        self.end = end
        self.asked: list[tuple[int, ...]] = []

    def boundary(self, position: int) -> int:
        assert self.starts[0] <= position <= self.end, position  # the broker refuses the rest
        i = bisect.bisect_left(self.starts, position)
        return self.starts[i] if i < len(self.starts) else self.end

    def request(self, request) -> Deferred:
        if isinstance(request, OffsetsRequest):
            return succeed(OffsetsResponse(0, ({EARLIEST: self.starts[0], LATEST: self.end}[request.time],)))
        assert isinstance(request, BoundariesRequest) and len(request.positions) <= 1024
        self.asked.append(request.positions)
        return succeed(BoundariesResponse(0, tuple(self.boundary(p) for p in request.positions)))


class ResetOffsetTests(SynchronousTestCase):
    tp = TopicPartition("clicks", "0-0")

    def refused(self, log: FakeLog, offset: int) -> str:
        return str(self.failureResultOf(check_reset_offset(log.request, self.tp, offset), OffsetRefused).value)

    def test_message_starts_and_the_end_are_accepted(self) -> None:
        log = FakeLog([0, 109, 218], 327)
        for offset in (0, 109, 218, 327):
            self.successResultOf(check_reset_offset(log.request, self.tp, offset))

    def test_inside_a_message(self) -> None:
        """An offset inside a message is refused with the boundaries either side."""
        log = FakeLog([0, 109, 218], 327)
        self.assertEqual(self.refused(log, 13), "offset 13 does not start a message of clicks:0-0: the nearest "
                                                "message boundaries are 0 and 109")
        self.assertIn("are 218 and 327", self.refused(log, 300))

    def test_outside_the_partition(self) -> None:
        """Past the end, or before the earliest offset (deleted by retention): refused with the range."""
        log = FakeLog([1000, 1109], 1218)
        self.assertEqual(self.refused(log, 99999999), "offset 99999999 is past the end of clicks:0-0: its offsets "
                                                      "run from 1000 to 1218 (the end, where the next message goes)")
        self.assertEqual(self.refused(log, 5), "offset 5 is before the earliest offset of clicks:0-0 (retention "
                                               "deleted what was before 1000): its offsets run from 1000 to 1218 "
                                               "(the end, where the next message goes)")

    def test_boundary_before_a_far_offset(self) -> None:
        """The boundary before an offset deep in a big log is found in a few requests, whatever the sizes."""
        starts, position = [], 500
        for size in [7, 300, 1, 90_000, 12, 5] * 2000:
            starts.append(position)
            position += size
        log = FakeLog(starts, position)
        for target in (starts[-1] + 2, starts[6001] + 40_000, starts[3] + 1, starts[1] + 1):
            before = max(s for s in starts if s < target)
            found = self.successResultOf(boundary_before(
                lambda positions: succeed([log.boundary(p) for p in positions]), starts[0], target, 64))
            self.assertEqual(found, before)
        self.assertIsNone(self.successResultOf(boundary_before(
            lambda positions: succeed([log.boundary(p) for p in positions]), starts[0], starts[0], 64)))

    def test_a_few_requests(self) -> None:
        """Refusing an offset inside a 200 MB log asks BOUNDARIES a handful of times."""
        starts = list(range(0, 200_000_000, 1000))
        log = FakeLog(starts, 200_000_000)
        self.assertIn("are 123456000 and 123457000", self.refused(log, 123_456_789))
        self.assertLessEqual(len(log.asked), 6)
