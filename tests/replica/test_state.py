"""Tests for twlog.replica.state: the leader's ReplicaState (high watermark, ISR shrink and expand, fencing)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from twlog.replica.state import JOIN_FETCH_WINDOW_S, ReplicaState


def state(**overrides) -> ReplicaState:
    settings = dict(leader=1, leader_epoch=3, replicas=(1, 2, 3), isr=(1, 2, 3), high_watermark=100, now=0.0,
                    lag_time_ms=10_000, min_isr=2)
    settings.update(overrides)
    return ReplicaState(**settings)


class HighWatermarkTests(SynchronousTestCase):
    def test_minimum_end_over_the_isr(self) -> None:
        """The high watermark is the smallest end over the ISR, the leader's included."""
        s = state()
        self.assertFalse(s.fetched(2, 150, leader_end=200, now=1.0))  # 3 still at 100
        self.assertEqual(s.high_watermark, 100)
        self.assertTrue(s.fetched(3, 180, leader_end=200, now=1.0))
        self.assertEqual(s.high_watermark, 150)
        self.assertTrue(s.fetched(2, 200, leader_end=200, now=1.0))
        self.assertEqual(s.high_watermark, 180)

    def test_never_past_the_leader_end(self) -> None:
        """Followers' ends do not carry the high watermark past the leader's own end."""
        s = state(isr=(1, 2), replicas=(1, 2))
        s.fetched(2, 120, leader_end=110, now=0.0)
        self.assertEqual(s.high_watermark, 110)

    def test_never_backwards(self) -> None:
        """A follower fetching from below the high watermark (it truncated) does not pull it back."""
        s = state(isr=(1, 2), replicas=(1, 2))
        s.fetched(2, 200, leader_end=200, now=0.0)
        self.assertEqual(s.high_watermark, 200)
        self.assertFalse(s.fetched(2, 150, leader_end=200, now=0.0))
        self.assertEqual(s.high_watermark, 200)

    def test_leader_alone_follows_its_end(self) -> None:
        """With the leader alone in the ISR, its appends move the high watermark."""
        s = state(isr=(1,), min_isr=1)
        self.assertTrue(s.advance(leader_end=130))
        self.assertEqual(s.high_watermark, 130)

    def test_followers_outside_the_isr_do_not_count(self) -> None:
        """A follower outside the ISR does not hold the high watermark back."""
        s = state(isr=(1, 2))
        s.fetched(2, 170, leader_end=170, now=0.0)
        self.assertEqual(s.high_watermark, 170)

    def test_a_shrink_can_move_it_on(self) -> None:
        """Once a slow member is written out of the ISR, the high watermark moves to the others' minimum."""
        s = state()
        s.fetched(2, 190, leader_end=200, now=0.0)
        self.assertEqual(s.high_watermark, 100)
        self.assertTrue(s.isr_written((1, 2), leader_end=200))
        self.assertEqual(s.high_watermark, 190)

    def test_a_fetch_by_a_non_follower_is_refused(self) -> None:
        """Only assigned followers have ends (the handler answers NotFollower before asking)."""
        self.assertRaises(ValueError, state().fetched, 7, 10, 10, 0.0)
        self.assertRaises(ValueError, state().fetched, 1, 10, 10, 0.0)


class IsrTests(SynchronousTestCase):
    def test_a_lagging_follower_leaves_after_the_lag_time(self) -> None:
        """A follower not caught up for more than replica_lag_time_ms is asked out of the ISR; not before."""
        s = state()
        s.fetched(2, 200, leader_end=200, now=5.0)
        s.fetched(3, 100, leader_end=200, now=5.0)
        self.assertIsNone(s.wanted_isr(leader_end=200, now=10.0))  # 3 was caught up at 0 (the start)
        self.assertEqual(s.lagging(10.5), (3,))
        self.assertEqual(s.wanted_isr(leader_end=200, now=10.5), (1, 2))

    def test_one_fetch_behind_a_stream_stays_in_sync(self) -> None:
        """A follower that reaches, at each fetch, the leader's end of its previous fetch stays caught up
        (Kafka's lastCaughtUpTime), though never at the end itself."""
        s = state(replicas=(1, 2), isr=(1, 2))
        end = 100
        for second in range(1, 40):
            s.fetched(2, end, leader_end=end + 10, now=float(second))
            end += 10
        self.assertIsNone(s.wanted_isr(leader_end=end, now=40.0))
        self.assertEqual(s.caught_up_at[2], 38.0)

    def test_a_follower_rejoins_once_at_the_high_watermark(self) -> None:
        """A follower out of the ISR joins again once its end has reached the high watermark."""
        s = state(isr=(1, 2))
        s.fetched(2, 300, leader_end=300, now=1.0)
        self.assertEqual(s.high_watermark, 300)
        s.fetched(3, 250, leader_end=300, now=1.0)
        self.assertIsNone(s.wanted_isr(leader_end=300, now=1.0))
        s.fetched(3, 300, leader_end=300, now=2.0)
        self.assertEqual(s.wanted_isr(leader_end=300, now=2.0), (1, 2, 3))
        s.isr_written((1, 2, 3), leader_end=300)
        self.assertIsNone(s.wanted_isr(leader_end=300, now=2.0))

    def test_a_follower_that_stopped_fetching_does_not_rejoin(self) -> None:
        """A follower that died caught up, and that the controller took out of the ISR, is not added back on its
        last fetch: joining needs a fetch within JOIN_FETCH_WINDOW_S."""
        s = state(isr=(1, 2, 3))
        s.fetched(3, 300, leader_end=300, now=1.0)
        s.isr_written((1, 2), leader_end=300)  # (the controller's shrink, read again)
        self.assertIsNone(s.wanted_isr(leader_end=300, now=1.0 + JOIN_FETCH_WINDOW_S + 0.1))
        s.fetched(3, 300, leader_end=300, now=9.0)  # it fetches again: it joins
        self.assertEqual(s.wanted_isr(leader_end=300, now=9.0), (1, 2, 3))

    def test_the_leader_always_stays(self) -> None:
        """Every follower lagging leaves the leader alone in the ISR, never an empty one."""
        s = state()
        self.assertEqual(s.wanted_isr(leader_end=500, now=60.0), (1,))

    def test_enough_replicas(self) -> None:
        """ack=all may append while the ISR is at least min.insync.replicas."""
        s = state(min_isr=2)
        self.assertTrue(s.enough_replicas)
        s.isr_written((1,), leader_end=100)
        self.assertFalse(s.enough_replicas)


class FencingTests(SynchronousTestCase):
    def test_fenced_stops_acknowledging_and_asking(self) -> None:
        """A fenced leader acknowledges nothing and asks for no ISR change until unfenced."""
        s = state()
        self.assertTrue(s.acknowledging)
        s.fence()
        self.assertFalse(s.acknowledging)
        self.assertIsNone(s.wanted_isr(leader_end=500, now=60.0))
        s.unfence((1, 2, 3), leader_end=500)
        self.assertTrue(s.acknowledging)
        self.assertEqual(s.wanted_isr(leader_end=500, now=60.0), (1,))

    def test_unfence_takes_the_isr_read(self) -> None:
        """Unfencing takes the ISR read back from ZooKeeper (someone else may have changed it)."""
        s = state()
        s.fetched(2, 180, leader_end=200, now=0.0)
        s.fence()
        self.assertTrue(s.unfence((1, 2), leader_end=200))
        self.assertEqual((s.isr, s.high_watermark), ((1, 2), 180))
