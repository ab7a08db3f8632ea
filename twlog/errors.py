# -*- test-case-name: tests.test_errors -*-
"""Typed exceptions, and the one table that maps them to wire error codes.

Codes exist only at the edges: a server sends C{getattr(exc, "code", UNKNOWN)},
a client turns a code back into an exception with L{error_for} (or L{raise_for},
L{check}), the one mapping used by the Twisted client, the blocking client and
the Spark source, with one message format (L{error_message}).  Codes 0-4 are
Kafka 0.7's; the rest are twlog's additions, which a response to one of 0.7's
request types never carries: L{kafka07_code} turns each into the nearest 0.7
code (the table L{KAFKA07_NEAREST}).
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")

UNKNOWN = -1
NO_ERROR = 0

ERRORS: dict[int, type["BrokerError"]] = {}


def _wire(code: int):
    """Record C{cls} as the exception for wire error C{code} (once per code)."""

    def register(cls: type[BrokerError]) -> type[BrokerError]:
        assert code not in ERRORS, code
        ERRORS[code] = cls
        cls.code = code
        return cls

    return register


def error_message(code: int, context: str = "") -> str:
    """The one message format of a wire error: C{"<context>: <Name> (error <code>): <meaning>"}."""
    cls = ERRORS.get(code, BrokerError)
    meaning = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else f"error code {code}"
    text = f"{cls.__name__} (error {code}): {meaning}"
    return f"{context}: {text}" if context else text


def error_for(code: int, context: str = "") -> BrokerError:
    """The exception a client raises for wire error C{code}; C{context} says what was refused, by whom."""
    return ERRORS.get(code, BrokerError)(error_message(code, context))


def raise_for(code: int, context: str) -> None:
    """Raise L{error_for}C{(code, context)} unless C{code} is L{NO_ERROR}."""
    if code != NO_ERROR:
        raise error_for(code, context)


def check(result: T, context: str) -> T:
    """C{result} (a decoded response or part, with an C{error} field) if its error is L{NO_ERROR}.

    @raise BrokerError: the exception for C{result.error}, its message naming C{context}.
    """
    raise_for(result.error, context)
    return result


class TwlogError(Exception):
    """Base class of every error twlog raises on purpose."""


class BrokerError(TwlogError):
    """An error with a wire code; the catch-all is UNKNOWN (-1)."""

    code = UNKNOWN
    retriable = False


@_wire(1)
class OffsetOutOfRange(BrokerError):
    """The offset is before the log's first message or past its end."""


@_wire(2)
class InvalidMessage(BrokerError):
    """A message is malformed: bad size, unknown magic or codec, or a CRC mismatch."""


@_wire(3)
class WrongPartition(BrokerError):
    """The partition number is outside the topic's partitions on this broker."""


@_wire(4)
class InvalidFetchSize(BrokerError):
    """The fetch size is negative or zero."""


@_wire(5)
class InvalidTopic(BrokerError):
    """The topic name is empty, too long, or has characters a directory name must not have."""


@_wire(6)
class MessageSizeTooLarge(BrokerError):
    """A message or message set exceeds the configured maximum size."""

    #: The size of the message refused (its length field N), when known.
    message_size: int | None = None
    #: The limit it broke (the broker's max_message_bytes), when known.
    limit: int | None = None


@_wire(7)
class FetchSizeTooSmall(BrokerError):
    """The next message at the fetch offset is larger than the fetch size asked for."""


@_wire(8)
class OffsetNotOnBoundary(BrokerError):
    """The offset lies inside the log but does not start a message."""


class CorruptLog(TwlogError):
    """A partition's files cannot be opened safely (a gap between segments, a bad name)."""


class OffsetMismatch(TwlogError):
    """A follower was given the leader's bytes for another offset than its log's end: nothing was appended."""

    def __init__(self, message: str, expected_offset: int, end_offset: int) -> None:
        super().__init__(message)
        #: Where the leader's bytes start, and where this replica's log ends.
        self.expected_offset, self.end_offset = expected_offset, end_offset


class LogTruncated(BrokerError):
    """The set waited for was cut from the log by a truncation (a replica following a new leader): it is not
    stored here, so a resend cannot store it twice."""

    retriable = True


@_wire(9)
class RequestTimedOut(BrokerError):
    """The broker could not do what the request asked (an acknowledged flush or ack=all) within its timeout.

    An acknowledged produce's set was appended, and is most likely flushed (with ack=all: replicated) and shown
    soon after: a resend would store it twice.
    """

    retriable = True


@_wire(10)
class RequestTooLarge(BrokerError):
    """The request frame is larger than the broker accepts."""


@_wire(12)
class BrokerShuttingDown(BrokerError):
    """The broker's log directory is closed: it is starting or shutting down; try again or elsewhere."""

    retriable = True


@_wire(13)
class StorageFailed(BrokerError):
    """The partition's log could not be written (disk full, no inodes, quota, read-only, I/O): nothing was stored.

    After a failed write or segment roll the partition refuses writes for the broker's --storage-retry-s, then
    takes them again once the disk has room; after a failed fsync only a restart recovers it.  Retriable, as
    Kafka's KafkaStorageException: nothing was stored, so a later resend (or one to another partition) cannot
    store it twice.
    """

    retriable = True


@_wire(14)
class TooManyOpenFiles(BrokerError):
    """The broker is out of file descriptors (EMFILE/ENFILE) and could not open a segment file or directory;
    nothing was written, and the partition takes appends again once descriptors free up: retry."""

    retriable = True


@_wire(23)
class OutcomeUnknown(BrokerError):
    """The set was appended but its flush failed: it may or may not be stored, and a resend may store it twice.

    It may reappear after the broker restarts.  The partition takes no more writes until then.
    """

    retriable = True


@_wire(25)
class NotEnoughReplicas(BrokerError):
    """The partition has fewer in-sync replicas than its min.insync.replicas: the ack=all set was refused
    before anything was appended; retry once the followers have caught up."""

    retriable = True


@_wire(26)
class NotEnoughReplicasAfterAppend(BrokerError):
    """The set was appended on the leader but the in-sync replicas fell below min.insync.replicas before they
    all held it: it may or may not survive a failover, and a resend may store it twice (as OutcomeUnknown)."""

    retriable = True


@_wire(27)
class FencedLeaderEpoch(BrokerError):
    """The request's leader epoch is older than the partition's on this broker: the asker follows a deposed
    leader; it refreshes the partition's state and asks again."""

    retriable = True


@_wire(28)
class UnknownLeaderEpoch(BrokerError):
    """The request's leader epoch is newer than the partition's on this broker: this broker has not yet
    learnt of the election; ask again shortly."""

    retriable = True


@_wire(29)
class NotFollower(BrokerError):
    """The fetching broker is not one of the partition's assigned replicas: it must stop fetching it."""


@_wire(30)
class ReplicatedTopic(BrokerError):
    """The topic is replicated, which CLUSTER_METADATA (type 8) cannot describe: a client that asks with
    CLUSTER_METADATA_V2 (type 14), a newer twlog, can."""


@_wire(15)
class TopicExists(BrokerError):
    """The topic already exists on this broker with a different partition count (CREATE_TOPIC)."""


@_wire(16)
class NotLeader(BrokerError):
    """The broker does not lead the partition (any more): refresh the cluster layout and ask its leader."""

    retriable = True


@_wire(17)
class LeaderNotAvailable(BrokerError):
    """The partition has no live leader right now (its broker left, or an election is under way): retry after
    refreshing the cluster layout."""

    retriable = True


class PartitionsOffline(LeaderNotAvailable):
    """Partitions the cluster knows of have no live leader (their broker is down): the reader was not asked
    for what is reachable only, so it fails naming them rather than leave them out.

    C{offline} are those partitions; C{available}, the located partitions that can be read (what a reader
    that accepts a partial answer, such as C{--allow-partial} or Spark's C{failOnDataLoss=false}, reads).
    """

    def __init__(self, message: str, offline=(), available=()) -> None:
        super().__init__(message)
        self.offline = list(offline)
        self.available = list(available)

@_wire(18)
class TopicDeleted(BrokerError):
    """The topic was deleted on this broker (DELETE_TOPIC) while the request read or wrote it; a write
    creates it again, empty."""


class MalformedRequest(TwlogError):
    """The peer sent bytes that do not parse as a request or response (a protocol error, not a user error)."""


class ConnectionFailed(TwlogError):
    """The broker could not be reached, or the connection to it was lost before an answer came."""

    retriable = True


class BrokerUnreachable(ConnectionFailed):
    """A broker that holds (leads) C{held}, the partitions a reader located on it, cannot be reached."""

    def __init__(self, message: str, held=()) -> None:
        super().__init__(message)
        self.held = list(held)


class BrokerTimeout(TwlogError):
    """No answer came from the broker within the timeout."""

    retriable = True


@_wire(11)
class InvalidRequest(BrokerError):
    """The request could not be parsed (unknown type, truncated body); the broker closes the connection after it."""


class QueueFull(TwlogError):
    """An async producer's queue has no room for the messages, and its full-queue policy is "drop"."""

    retriable = True


class ClientClosed(TwlogError):
    """The producer, consumer or connection was closed before (or while) the call was made.

    C{written}: the request had been written to the connection when it was closed (its outcome is unknown);
    False when it was closed before the request could be written.
    """

    def __init__(self, message: str = "", *, written: bool = False) -> None:
        super().__init__(message)
        self.written = written


class ProtocolViolation(ConnectionFailed, MalformedRequest):
    """The broker broke the protocol: a response that does not parse, one nobody asked for, or one over
    C{max_response_bytes}.  The connection cannot be trusted any more and is dropped.

    It is the one such error on the client side: a L{ConnectionFailed} (what clients retry or report)
    and a L{MalformedRequest} (what the codec raises for bytes that do not parse).
    """


class ConnectionLost(ConnectionFailed):
    """The connection broke after the request was written: the broker may or may not have acted on it."""


@_wire(19)
class TooManyConnections(BrokerError, ConnectionFailed):
    """The broker is at its connection cap (--max-connections), none idle long enough to replace: retry later.

    The broker refused the connection before reading any request on it (nothing was done); it replaces
    its longest-idle connection instead when one has sent nothing for --reap-idle-s."""

    retriable = True


@_wire(20)
class TooManyConnectionsFromAddress(BrokerError, ConnectionFailed):
    """This address holds the most connections the broker allows one (--max-connections-per-ip): retry later.

    The broker refused the connection before reading any request on it (nothing was done); it replaces
    the address's longest-idle connection instead when one has sent nothing for --reap-idle-s."""

    retriable = True


# -- authentication (SASL, issue 23): Kafka's codes and names -------------------------------


@_wire(33)
class UnsupportedSaslMechanism(BrokerError):
    """The broker does not enable the SASL mechanism asked for (or serves no SASL at all, or not PLAIN over
    plaintext); its answer lists those it enables."""


@_wire(34)
class IllegalSaslState(BrokerError):
    """A SASL request out of order (SASL_AUTHENTICATE before SASL_HANDSHAKE, or after authenticating)."""


@_wire(58)
class SaslAuthenticationFailed(BrokerError, ConnectionFailed):
    """Authentication failed (unknown user or wrong password, not said which) or is required first (--user).

    The broker closes the connection after this answer."""

    retriable = False


#: The codes a broker writes on a connection it refuses, in place of the first request's answer
#: (docs/protocol.md, "Connection limits"): the client fails every request on it with the typed error.
CONNECTION_REFUSALS = frozenset((TooManyConnections.code, TooManyConnectionsFromAddress.code))


class RebalanceFailed(TwlogError):
    """A group consumer could not claim its partitions within its rebalance retries: it consumes nothing
    until a later rebalance (the next change in the group or the cluster) succeeds."""


class UnknownTopic(TwlogError):
    """No broker asked holds the topic (it has never been written to, or the name is misspelt)."""


# -- authorization (issue 23: ACLs, docs/security.md) ------------------------------------------
# Kafka's codes are 29, 30 and 31; twlog's replication took 29 and 30 first, so the topic's and the group's are
# 21 and 22 (codes Kafka gave to requests twlog does not have), and the cluster's is Kafka's 31.


class AuthorizationFailed(BrokerError):
    """The principal lacks an ACL this request needs (docs/security.md, "Authorization")."""


@_wire(21)
class TopicAuthorizationFailed(AuthorizationFailed):
    """Not authorized: the topic's ACLs do not allow this request (produce: Write; fetch: Read; offsets: Describe).

    A produce to a new topic needs Create too, CREATE_TOPIC Create and DELETE_TOPIC Delete (docs/security.md).
    """


@_wire(22)
class GroupAuthorizationFailed(AuthorizationFailed):
    """Not authorized: the consumer group's ACLs do not allow Read on it."""


@_wire(31)
class ClusterAuthorizationFailed(AuthorizationFailed):
    """Not authorized: the cluster's ACLs do not allow this request (replication and replica status: ClusterAction).
    """


# -- what a Kafka 0.7 client is told ---------------------------------------------------------

#: The codes a Kafka 0.7 client knows (0.7's C{ErrorMapping}): Unknown, none, and 1 to 4.
KAFKA07_CODES = frozenset(range(UNKNOWN, InvalidFetchSize.code + 1))

#: Each twlog-only condition, as the nearest code a Kafka 0.7 client knows.  The broker answers
#: request types 0-4 (0.7's) through this table; twlog's own types (5-7) carry the precise code.
#: docs/protocol.md ("Kafka 0.7 compatibility") shows it with what a 0.7 client then does.
KAFKA07_NEAREST: dict[type[BrokerError], type[BrokerError]] = {
    # 0.7 had no topic-name check of its own: its InvalidTopicException was outside ErrorMapping.
    InvalidTopic: BrokerError,
    # A message the broker refuses: what 0.7 called an invalid message.
    MessageSizeTooLarge: InvalidMessage,
    # 0.7 mapped its InvalidMessageSizeException ("the fetch size may be too small") to 4.  A
    # FETCH or MULTIFETCH never gets it: it gets error 0 and a partial message, as from 0.7.
    FetchSizeTooSmall: InvalidFetchSize,
    # An offset that is no message's: 0.7's "bad offset" code, on which its consumers reset
    # (autooffset.reset) instead of decoding bytes from the middle of a message.
    OffsetNotOnBoundary: OffsetOutOfRange,
    RequestTimedOut: BrokerError,
    RequestTooLarge: BrokerError,
    InvalidRequest: BrokerError,
    BrokerShuttingDown: BrokerError,
    StorageFailed: BrokerError,
    OutcomeUnknown: BrokerError,
    TooManyOpenFiles: BrokerError,
    # Only CREATE_TOPIC (type 9, twlog's) answers it; listed so that every twlog code has its 0.7 code.
    TopicExists: BrokerError,
    # 0.7's code for "this broker does not hold that partition".
    NotLeader: WrongPartition,
    LeaderNotAvailable: BrokerError,
    # The partition's log is gone: a 0.7 consumer resets its offset (autooffset.reset), as after a log
    # directory removed by hand on a 0.7 broker, whose empty log put every offset out of range.
    TopicDeleted: OffsetOutOfRange,
    # A refused connection: a 0.7 request type is never answered with these (the broker closes the
    # connection without a response, as Kafka's does past max.connections.per.ip); listed for completeness.
    TooManyConnections: BrokerError,
    TooManyConnectionsFromAddress: BrokerError,
    # Replication's codes answer only twlog's types: ACK_PRODUCE with ack=all (25, 26), REPLICA_FETCH and
    # EPOCH_END_OFFSET (27-29), CLUSTER_METADATA (30); listed so that every twlog code has its 0.7 code.
    NotEnoughReplicas: BrokerError,
    NotEnoughReplicasAfterAppend: BrokerError,
    FencedLeaderEpoch: BrokerError,
    UnknownLeaderEpoch: BrokerError,
    NotFollower: BrokerError,
    ReplicatedTopic: BrokerError,
    # SASL's codes answer only its own types (16, 17); listed so that every twlog code has its 0.7 code.
    UnsupportedSaslMechanism: BrokerError,
    IllegalSaslState: BrokerError,
    SaslAuthenticationFailed: BrokerError,
}

# An ACL refusal: 0.7 had no such code.
KAFKA07_NEAREST.update({TopicAuthorizationFailed: BrokerError, GroupAuthorizationFailed: BrokerError,
                        ClusterAuthorizationFailed: BrokerError})


def kafka07_code(code: int) -> int:
    """C{code} as a Kafka 0.7 client may see it: itself if 0.7 knew it, else its L{KAFKA07_NEAREST} code
    (Unknown, -1, for a code in neither)."""
    if code in KAFKA07_CODES:
        return code
    cls = ERRORS.get(code)
    return KAFKA07_NEAREST[cls].code if cls in KAFKA07_NEAREST else UNKNOWN
