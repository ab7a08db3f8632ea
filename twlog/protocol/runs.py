# -*- test-case-name: tests.protocol.test_runs -*-
"""L{ProduceRuns}: the broker's bulk path for runs of fire-and-forget PRODUCE frames.

A producer at batch 1 sends one 200-byte PRODUCE frame per message, and a read
brings hundreds of them.  Framed, decoded, dispatched and appended one at a
time, each cost the broker about 30 Python calls and 34 us of CPU.  Here the
frames at the head of a connection's buffer are taken whole instead: the
kernel (L{twlog.storage.kernel.produce_frames}, compiled when built) walks
their size prefixes, request types, topics, partitions and set bounds and
checks every message's size and CRC in one pass, grouping consecutive frames
for one partition in runs; each run is checked once (the ACL, the partition's
leader) and appended as one L{Log.append} of its sets end to end (0.7
offsets are byte offsets, so the log's bytes and every set's offset are those
of appending them one by one; a run is split where the active segment rolls,
as the sets would have been).  The request counts, the messages and bytes in,
and the latency observations stay per request.

Only what the per-frame path would surely append is taken this way: the walk
stops at the first frame that is not a whole, well-formed PRODUCE of an
uncompressed, valid set small enough not to be checked in slices, and that
frame goes the per-frame way (L{BrokerProtocol.stringReceived}), with its
error, log line and close.  A run the ACLs refuse, for a partition this broker
does not lead, with a topic that is not UTF-8, or whose log refuses the
append, is handed frame by frame to the same per-frame path, which refuses
each set as it always has.

A run counts against the connection's turn (L{twlog.protocol.turns}) by its
bytes, and as one frame for every L{RUN_FRAMES_PER_TURN_FRAME} of its frames:
a turn takes at most 1 MiB, or 64 x 16 small produces, which the bulk path
appends in well under the round's 10 ms.
"""

from __future__ import annotations

from typing import Any

from twlog.protocol.codec import PRODUCE, VIEW_BYTES, ProduceRequest
from twlog.protocol.frames import FrameBuffer
from twlog.protocol.framing import IN_PLACE_FRAME_BYTES
from twlog.protocol.server import Broker
from twlog.protocol.slicing import SLICED_FRAME_BYTES
from twlog.storage.kernel import FRAME_FIELDS, RUN_FIELDS, produce_frames

__all__ = ["RUN_FRAMES_PER_TURN_FRAME", "ProduceRuns"]

#: Produce frames taken in bulk that count as one frame of a turn.
RUN_FRAMES_PER_TURN_FRAME = 16
#: Topic names decoded, kept per connection (bounded: a client naming ever new topics does not grow it).
_TOPICS_KEPT = 256
_PRODUCE_TYPE = PRODUCE.to_bytes(2, "big")


class ProduceRuns:
    """A connection's bulk produce path (see the module): L{take} is its L{FrameReceiver.take_run}.

    The connection is a L{twlog.protocol.connection.BrokerProtocol}: its turn's allowance (frames and bytes left)
    is counted down here as its own L{BrokerProtocol.stringReceived} does.
    """

    def __init__(self, connection: Any, broker: Broker) -> None:
        self._connection = connection
        self._broker = broker
        log = broker.config.log
        self._max_set = min(VIEW_BYTES - 1, log.segment_bytes)  # (a larger set is a view, or refused as too large)
        self._max_message = min(log.max_message_bytes, log.segment_bytes)  # (what each log checks, L{Log.append})
        self._topics: dict[bytes, str | None] = {}
        #: Frames taken in bulk and runs appended so far (for tests and benchmarks).
        self.frames = self.runs = 0

    def take(self, buffer: FrameBuffer) -> bool:
        """Take the run(s) of produce frames at the head of C{buffer} (False: none; the caller takes one frame)."""
        head = buffer.head()
        if head is None:
            return False
        chunk, pos = head
        if chunk[pos + 4 : pos + 6] != _PRODUCE_TYPE:
            return False
        connection, broker = self._connection, self._broker
        if broker.handlers.get(ProduceRequest) is not broker.produce:  # (a broker whose produce is not its own)
            return False
        max_frame = min(connection.MAX_LENGTH, SLICED_FRAME_BYTES - 1, IN_PLACE_FRAME_BYTES - 1)
        _, fields, runs = produce_frames(chunk, pos, -1, max_frame, connection._turn_frames * RUN_FRAMES_PER_TURN_FRAME,
                                         connection._turn_bytes, self._max_set, self._max_message)
        if not runs:
            return False
        connection.factory.active(connection)
        for r in range(0, len(runs), RUN_FIELDS):
            if connection.paused or connection.discarding:  # (a frame handled one by one closed it)
                break
            first, count, messages, set_bytes = runs[r : r + RUN_FIELDS]
            start, end = fields[first * FRAME_FIELDS], fields[(first + count - 1) * FRAME_FIELDS + 1]
            buffer.skip(end - start, count)
            observer = connection.factory.request_observer
            started = broker.clock.seconds() if observer is not None else 0.0
            done = self._append(chunk, fields, first, count, messages, set_bytes)
            if done:
                self._taken(done, start, fields[(first + done - 1) * FRAME_FIELDS + 1])
                if observer is not None:  # each request's time, from its arrival until it was handled
                    elapsed = broker.clock.seconds() - started
                    for _ in range(done):
                        observer(PRODUCE, elapsed)
            for i in range(first + done, first + count):  # the rest: one by one, as if they came alone
                if connection.discarding:
                    break
                connection.stringReceived(chunk[fields[i * FRAME_FIELDS] + 4 : fields[i * FRAME_FIELDS + 1]])
        return True

    def _append(self, chunk: bytes, fields, first: int, count: int, messages: int, set_bytes: int) -> int:
        """Append the run of C{count} frames from C{first} in bulk; how many of its frames were (0: none)."""
        at = first * FRAME_FIELDS
        key = chunk[fields[at + 2] : fields[at + 2] + fields[at + 3]]
        topic = self._topics.get(key, "")
        if topic == "":
            topic = self._topic(key)
        if topic is None:
            return 0
        guard = self._broker.guard
        if guard is not None and not guard.allows_produce(topic, self._connection):
            return 0
        return self._broker.producing.produce_run(topic, fields[at + 4], chunk, fields, first, count, messages,
                                                  set_bytes)

    def _topic(self, key: bytes) -> str | None:
        if len(self._topics) >= _TOPICS_KEPT:
            self._topics.clear()
        try:
            topic = self._topics[key] = str(key, "utf-8")
        except UnicodeDecodeError:
            topic = self._topics[key] = None
        return topic

    def _taken(self, done: int, start: int, end: int) -> None:
        """Count C{done} frames, C{start} to C{end} of the chunk, as handled requests, and against the turn."""
        connection = self._connection
        factory = connection.factory
        requests = factory.requests
        requests[PRODUCE] = requests.get(PRODUCE, 0) + done
        connection._turn_frames -= -(-done // RUN_FRAMES_PER_TURN_FRAME)
        connection._turn_bytes -= end - start - 4 * done
        self.frames += done
        self.runs += 1
