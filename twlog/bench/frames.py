# -*- test-case-name: tests.bench.test_frames -*-
"""C{twlog bench frames}: what one large request frame costs a broker, per megabyte.

A broker process (L{BrokerProcess}) is sent one acknowledged produce of 1, 10
and 100 MB (by default) over loopback TCP, from a plain blocking socket; the
table shows the broker's CPU time for each and its CPU per MB.  Framing in
linear time keeps the last figure flat: the 100 MB frame within 2x of the
1 MB one (Twisted's C{Int32StringReceiver} cost 0.04 s/MB at 10 MB and
0.4 s/MB at 98 MB).
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import sys
import tempfile
from collections.abc import Sequence

import attrs

from twlog.bench.broker import BrokerProcess, _cpu_seconds
from twlog.bench.common import MB, BenchProgress, BenchTable, Column, read_exactly
from twlog.protocol import codec
from twlog.protocol.codec import ACK_APPENDED, AckProduceRequest, ProduceRequest
from twlog.storage.message import encode_message_set

#: Frame sizes sent by default, in MB.
DEFAULT_SIZES_MB = (1, 10, 100)
#: Payload bytes per message in the frame (under the broker's 1 MB message limit).
MESSAGE_BYTES = 100_000


@attrs.frozen
class FrameRow:
    """One line of the table: a frame's size and what it cost the broker."""

    frame_bytes: int
    #: Mean CPU per frame (schedstat).
    broker_cpu_s: float
    #: User and system CPU per MB over the whole row (clock ticks, so over many MB).
    user_ms_per_mb: float = 0.0
    system_ms_per_mb: float = 0.0

    @property
    def cpu_s_per_mb(self) -> float:
        return self.broker_cpu_s / (self.frame_bytes / MB)


def produce_frame(size: int, topic: str = "frames") -> bytes:
    """An ACK_PRODUCE request of about C{size} bytes, size prefix included."""
    payload = os.urandom(MESSAGE_BYTES)
    messages = encode_message_set([payload] * max(1, size // (MESSAGE_BYTES + 9)))
    body = codec.encode_request(AckProduceRequest(ACK_APPENDED, 60_000, (ProduceRequest(topic, 0, messages),)))
    return struct.pack(">i", len(body)) + body


def send_one(port: int, frame: bytes, timeout_s: float = 600.0) -> int:
    """Send C{frame} to the broker on C{port} and wait for its answer; the produce's error code."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(frame)
        (size,) = struct.unpack(">i", read_exactly(sock, 4))
        (result,) = codec.decode_ack_produce_response(read_exactly(sock, size)).results
        return result.error


def user_system_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU time of a process so far (Linux /proc/<pid>/stat, in clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    """CPU time a process has used: nanoseconds from /proc/<pid>/schedstat where there is one (the
    clock ticks of /proc/<pid>/stat are too coarse for a 1 MB frame)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return _cpu_seconds(pid)


def measure(broker: BrokerProcess, sizes_mb: Sequence[int], total_mb: int = 200, progress=None) -> list[FrameRow]:
    """The broker CPU a frame of each size costs: each size sends about C{total_mb} MB in all (at least
    one frame), so every row writes as much to the log and only the frame size differs; each frame is
    built before the clock starts.  The sizes take turns, in as many rounds as the largest size has
    frames: the kernel's state (dirty pages, the page cache, the segment's length) grows as the log
    does, and a size measured last would pay for what all the others wrote."""
    frames = {size_mb: produce_frame(size_mb * MB) for size_mb in sizes_mb}
    runs = {size_mb: max(1, round(total_mb / size_mb)) for size_mb in sizes_mb}
    rounds = min(runs.values())
    cost = dict.fromkeys(sizes_mb, 0.0)
    user = dict.fromkeys(sizes_mb, 0.0)
    system = dict.fromkeys(sizes_mb, 0.0)
    if progress is not None:
        sending = ", ".join(f"{runs[s]} frame(s) of {len(frames[s]) / MB:,.1f} MB" for s in sizes_mb)
        progress.log(f"  sending {sending}, in {rounds} round(s)")
        progress.step("sending frames", total=sum(runs.values()), unit="frames")
    sent = 0
    for turn in range(rounds):
        for size_mb in sizes_mb:
            share = runs[size_mb] // rounds + (turn < runs[size_mb] % rounds)
            user_before, system_before = user_system_seconds(broker.pid)
            for _ in range(share):
                if progress is not None:
                    progress.update(sent, f"round {turn + 1}/{rounds}: a {size_mb} MB frame")
                sent += 1
                before = cpu_seconds(broker.pid)
                error = send_one(broker.port, frames[size_mb])
                cost[size_mb] += cpu_seconds(broker.pid) - before
                if error:
                    raise RuntimeError(f"the broker refused the {size_mb} MB frame with error {error}")
                if progress is not None:
                    progress.update(sent)
            user_after, system_after = user_system_seconds(broker.pid)
            user[size_mb] += user_after - user_before
            system[size_mb] += system_after - system_before
    rows = []
    for size_mb in sizes_mb:
        sent_mb = runs[size_mb] * len(frames[size_mb]) / MB
        rows.append(FrameRow(len(frames[size_mb]), cost[size_mb] / runs[size_mb], user[size_mb] * 1000 / sent_mb,
                             system[size_mb] * 1000 / sent_mb))
    return rows


def format_frames_table(rows: Sequence[FrameRow], pid: int, total_mb: int = 200) -> BenchTable:
    table = BenchTable(
        f"twlog frames benchmark: acknowledged produce frames (about {total_mb} MB of each size, the sizes taking "
        f"turns; CPU per frame is the mean), broker process {pid}, loopback TCP",
        [Column("frame", "MB"), Column("broker CPU per frame", "s"), Column("broker CPU", "ms/MB"),
         Column("CPU per MB vs the first size", "x"), Column("user CPU", "ms/MB"), Column("system CPU", "ms/MB")])
    first = rows[0].cpu_s_per_mb if rows else 0.0
    for r in rows:
        ratio = f"{r.cpu_s_per_mb / first:.2f}" if first else table.missing(
            "the first size used no measurable CPU, so there is nothing to compare with")
        table.add_row(f"{r.frame_bytes / MB:,.1f}", f"{r.broker_cpu_s:.3f}", f"{r.cpu_s_per_mb * 1000:.2f}", ratio,
                      f"{r.user_ms_per_mb:.2f}", f"{r.system_ms_per_mb:.2f}")
    table.note("(MB = 10^6 bytes; CPU counts framing, decoding, validating and appending each frame; user time is the "
               "Python work, system time the kernel's: socket reads, page faults of fresh buffers, page-cache writes)")
    return table


def main_frames(args) -> int:
    """Entry point of C{twlog bench frames}."""
    root = args.dir or tempfile.mkdtemp(prefix="twlog-bench-frames-")
    largest = max(args.sizes) * MB + 1024 * 1024
    segment_bytes = max(largest, 1024**3)
    print(f"starting a broker with its data under {root}", file=sys.stderr)
    broker = BrokerProcess(root, "--max-request-bytes", str(largest), "--max-buffered-request-bytes",
                           str(max(largest, 256 * 1024 * 1024)), "--segment-bytes", str(segment_bytes))
    try:
        with BenchProgress() as progress:
            rows = measure(broker, args.sizes, args.total_mb, progress)
    finally:
        broker.stop()
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    format_frames_table(rows, broker.pid, args.total_mb).print()
    return 0
