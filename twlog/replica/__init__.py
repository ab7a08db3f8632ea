"""The broker's replica side of replication (issue 22): the leader's view of its followers
(L{twlog.replica.state}), the REPLICA_FETCH and EPOCH_END_OFFSET handlers, the follower's fetcher and
C{ack=all}; docs/replication.md, "Leaders and followers"."""
