# -*- test-case-name: tests.bench.test_history -*-
"""The history of a fault run, as Jepsen records one: every send and its outcome, every read, and at the end
every replica's log; kept in memory and, line by line, in a JSON lines file.

A run records:

  - each send when it is made (L{History.invoke}: the producer, its own count
    of sends, which is the send order, the partition and the value) and, when
    its answer comes, its outcome: acknowledged at an offset (L{History.ok}),
    failed, meaning surely not written (L{History.fail}: refused before
    anything was appended), or unknown (L{History.unknown}: a timeout, a lost
    connection).  A send never answered stays unknown.  Values must be unique
    across the run, so that each one names its send.
  - each message read (L{History.read}), by a named reader session that reads
    forward without seeking (a reader that seeks starts a new session name);
    and each read-to-end (L{History.scanned}: the reader read every message
    of a partition in C{[start, end)}).
  - at the end, each replica's log (L{History.replica}, or
    L{History.record_replicas} to read every broker's log directory) and,
    per partition, the final leader and high watermark (L{History.final}).

Each record is one JSON object per line, flushed as it is written, so a run
that fails or is killed leaves a file to inspect; L{History.load} reads it
back.  Values are written as text when they are UTF-8, else as C{{"hex": ...}}.
L{twlog.bench.history_checks} checks a history.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO

import attrs

from twlog.bench.replica_logs import Position, ReplicaContents, read_all_replicas

__all__ = ["FAILED", "OK", "OUTCOMES", "UNKNOWN", "Final", "History", "Read", "Scan", "Send"]

OK = "ok"
FAILED = "failed"
UNKNOWN = "unknown"
OUTCOMES = (OK, FAILED, UNKNOWN)


@attrs.frozen
class Send:
    """One send: C{seq} is its place in its producer's send order; C{offset} and C{index} are set once acknowledged."""

    producer: str
    seq: int
    topic: str
    partition: str
    value: bytes
    outcome: str = UNKNOWN
    offset: int | None = None
    index: int = 0
    error: str | None = None

    @property
    def position(self) -> Position:
        assert self.offset is not None, "only an acknowledged send has a position"
        return (self.offset, self.index)

    def name(self) -> str:
        return f"send {self.producer}#{self.seq} of {show(self.value)}"


@attrs.frozen
class Read:
    """A message read by a reader session: its position and value."""

    reader: str
    topic: str
    partition: str
    offset: int
    value: bytes
    index: int = 0

    @property
    def position(self) -> Position:
        return (self.offset, self.index)


@attrs.frozen
class Scan:
    """A read-to-end: C{reader} read every message of the partition at offsets in C{[start, end)}."""

    reader: str
    topic: str
    partition: str
    start: int
    end: int


@attrs.frozen
class Final:
    """A partition at the end of a run: its leader (the broker whose log is the final log) and high watermark."""

    topic: str
    partition: str
    leader: str
    high_watermark: int | None = None


class History:
    """A run's records, in memory and (with C{path}) appended to a JSON lines file as they come."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._file: IO[str] | None = open(path, "a", encoding="utf-8") if path else None
        self._sends: dict[tuple[str, int], Send] = {}
        self._next_seq: dict[str, int] = {}
        self._values: set[bytes] = set()
        self.reads: list[Read] = []
        self.scans: list[Scan] = []
        self.replicas: dict[tuple[str, str], dict[str, ReplicaContents]] = {}
        self.finals: dict[tuple[str, str], Final] = {}

    @property
    def sends(self) -> list[Send]:
        """Every send, in the order they were made."""
        return list(self._sends.values())

    def invoke(self, producer: str, topic: str, partition: object, value: bytes | str) -> Send:
        """Record a send being made; the pending L{Send} to pass to its outcome.

        @raise ValueError: the value was sent before in this history.
        """
        value = _bytes(value)
        if value in self._values:
            raise ValueError(f"the value {show(value)} was sent before: a history needs unique values")
        self._values.add(value)
        seq = self._next_seq.get(producer, 0)
        self._next_seq[producer] = seq + 1
        send = Send(producer, seq, topic, str(partition), value)
        self._sends[(producer, seq)] = send
        self._write({"type": "invoke", "producer": producer, "seq": seq, "topic": topic,
                     "partition": send.partition, "value": _value_json(value)})
        return send

    def ok(self, send: Send, offset: int, index: int = 0) -> Send:
        """Record C{send} acknowledged: its message is at C{offset} (C{index} inside a compressed wrapper)."""
        return self._complete(send, OK, offset=offset, index=index)

    def fail(self, send: Send, error: object) -> Send:
        """Record C{send} failed: surely not written (refused before anything was appended)."""
        return self._complete(send, FAILED, error=str(error))

    def unknown(self, send: Send, error: object) -> Send:
        """Record C{send}'s outcome as unknown: it may or may not have been written."""
        return self._complete(send, UNKNOWN, error=str(error))

    def _complete(self, send: Send, outcome: str, offset: int | None = None, index: int = 0,
                  error: str | None = None) -> Send:
        done = attrs.evolve(self._sends[(send.producer, send.seq)], outcome=outcome, offset=offset, index=index,
                            error=error)
        self._sends[(send.producer, send.seq)] = done
        record = {"type": outcome, "producer": send.producer, "seq": send.seq}
        if offset is not None:
            record.update(offset=offset, index=index)
        if error is not None:
            record["error"] = error
        self._write(record)
        return done

    def read(self, reader: str, topic: str, partition: object, offset: int, value: bytes | str,
             index: int = 0) -> Read:
        """Record a message read by the session C{reader}."""
        read = Read(reader, topic, str(partition), offset, _bytes(value), index)
        self.reads.append(read)
        self._write({"type": "read", "reader": reader, "topic": topic, "partition": read.partition,
                     "offset": offset, "index": index, "value": _value_json(read.value)})
        return read

    def scanned(self, reader: str, topic: str, partition: object, start: int, end: int) -> Scan:
        """Record that C{reader} read every message of the partition in C{[start, end)} (its L{read}s)."""
        scan = Scan(reader, topic, str(partition), start, end)
        self.scans.append(scan)
        self._write({"type": "scan", **attrs.asdict(scan)})
        return scan

    def replica(self, contents: ReplicaContents) -> None:
        """Record one replica's log at the end of the run."""
        self.replicas.setdefault((contents.topic, contents.partition), {})[contents.broker] = contents
        self._write({"type": "replica", "broker": contents.broker, "topic": contents.topic,
                     "partition": contents.partition, "start": contents.start, "end": contents.end,
                     "high_watermark": contents.high_watermark, "problem": contents.problem,
                     "messages": [[o, i, _value_json(v)] for (o, i), v in contents.messages.items()]})

    def record_replicas(self, log_dirs: Mapping[object, str], topic: str | None = None) -> list[ReplicaContents]:
        """Read and record every partition (of C{topic}) in each broker's log directory (broker -> directory)."""
        found = read_all_replicas(log_dirs, topic)
        for contents in found:
            self.replica(contents)
        return found

    def final(self, topic: str, partition: object, leader: object, high_watermark: int | None = None) -> Final:
        """Record a partition's final leader (whose log is the final log) and high watermark."""
        final = Final(topic, str(partition), str(leader), high_watermark)
        self.finals[(topic, final.partition)] = final
        self._write({"type": "final", **attrs.asdict(final)})
        return final

    def _write(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    @classmethod
    def load(cls, path: str) -> History:
        """The history a JSON lines file holds (read back into memory; nothing is written to it).

        @raise ValueError: a line that is not a record; the message names the file and line.
        """
        history = cls()
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                try:
                    history._replay(json.loads(line))
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"{path}:{number}: not a history record ({e})") from None
        return history

    def _replay(self, r: dict) -> None:
        kind = r["type"]
        if kind == "invoke":
            send = self.invoke(r["producer"], r["topic"], r["partition"], _value_from_json(r["value"]))
            if send.seq != r["seq"]:
                raise ValueError(f"send {r['producer']}#{r['seq']} is out of order")
        elif kind in OUTCOMES:
            send = self._sends[(r["producer"], r["seq"])]
            self._complete(send, kind, r.get("offset"), r.get("index", 0), r.get("error"))
        elif kind == "read":
            self.read(r["reader"], r["topic"], r["partition"], r["offset"], _value_from_json(r["value"]), r["index"])
        elif kind == "scan":
            self.scanned(r["reader"], r["topic"], r["partition"], r["start"], r["end"])
        elif kind == "replica":
            messages = {(o, i): _value_from_json(v) for o, i, v in r["messages"]}
            self.replica(ReplicaContents(r["broker"], r["topic"], r["partition"], r["start"], r["end"], messages,
                                         r["high_watermark"], r["problem"]))
        elif kind == "final":
            self.final(r["topic"], r["partition"], r["leader"], r["high_watermark"])
        else:
            raise ValueError(f"unknown record type {kind!r}")


def show(value: bytes) -> str:
    """A value as the report shows it: its text when it is UTF-8, quoted, else its bytes' repr."""
    try:
        return repr(value.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(value)


def _bytes(value: bytes | str) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _value_json(value: bytes) -> str | dict:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": value.hex()}


def _value_from_json(value: str | dict) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes.fromhex(value["hex"])
