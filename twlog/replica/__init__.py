"""The broker's replica side of replication (issue 22): the leader's view of its followers
(L{twlog.replica.state}), the REPLICA_FETCH, EPOCH_END_OFFSET and REPLICA_STATUS handlers, the follower's fetcher and
C{ack=all}; docs/replication.md, "Leaders and followers"."""
