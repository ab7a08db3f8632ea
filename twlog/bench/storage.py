# -*- test-case-name: tests.bench.test_storage -*-
"""C{twlog bench storage}: the storage engine alone, in process, with no network.

It appends N messages through a real L{LogManager} (CRC validation included,
fsyncs on the reactor's thread pool as in the broker), then reads them back
through C{Log.read} regions and decodes every message as a consumer does.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from twlog.bench.common import MB, BenchProgress, BenchTable, Column, payloads, react_status
from twlog.config import LogConfig
from twlog.storage.manager import LogManager, thread_pool_runner
from twlog.storage.message import CODEC_NAMES, OVERHEAD, encode_message_set, iter_messages


@attrs.frozen
class StorageRow:
    """One line of the storage benchmark's table."""

    batch: int
    messages: int
    encode_msg_s: float
    append_msg_s: float
    append_mb_s: float
    read_msg_s: float
    read_mb_s: float
    disk_bytes_per_msg: float
    overhead_bytes: float


async def _run_storage_case(
    reactor, directory: str, messages: int, size: int, batch: int, fetch_bytes: int, progress: BenchProgress | None,
    codec: str = "none",
) -> StorageRow:
    config = LogConfig(directory, segment_bytes=256 * 1024 * 1024)
    manager = LogManager(config, reactor, thread_pool_runner(reactor))
    manager.start()
    try:
        log = manager.get_or_create_log("bench", 0)
        batches = messages // batch
        distinct = min(batches, 1000)  # pre-built sets, reused round-robin
        data = payloads(distinct * batch, size)
        started = time.perf_counter()
        number = CODEC_NAMES[codec]
        sets = [encode_message_set(data[i * batch : (i + 1) * batch], number) for i in range(distinct)]
        encode_s = time.perf_counter() - started
        if progress is not None:
            progress.step(f"batch {batch}: appending", total=batches * batch, unit="msg")
        append = log.append
        written = 0
        started = time.perf_counter()
        for i in range(batches):
            message_set = sets[i % distinct]
            append(message_set)
            written += len(message_set)
            if i % 2000 == 1999:  # let fsync completions and timers run, as a broker's reactor would
                await deferLater(reactor, 0, lambda: None)
                if progress is not None:
                    progress.update((i + 1) * batch)
        append_s = time.perf_counter() - started
        await log.flush()
        disk = log.size_bytes()
        count = batches * batch
        if progress is not None:
            progress.step(f"batch {batch}: reading back", total=count, unit="msg")
        read = 0
        read_bytes = 0
        offset = 0
        started = time.perf_counter()
        while True:
            region = log.read(offset, fetch_bytes)
            data = region.read()
            last = None
            for last in iter_messages(data, offset):
                read += 1
            if progress is not None:
                progress.update(read)
            if last is None:
                break
            read_bytes += last.next_offset - offset
            offset = last.next_offset
        read_s = time.perf_counter() - started
        if read != count:
            raise RuntimeError(f"read back {read} messages, expected {count}")
        return StorageRow(
            batch=batch,
            messages=count,
            encode_msg_s=distinct * batch / encode_s,
            append_msg_s=count / append_s,
            append_mb_s=written / append_s / MB,
            read_msg_s=read / read_s,
            read_mb_s=read_bytes / read_s / MB,
            disk_bytes_per_msg=disk / count,
            overhead_bytes=disk / count - size,
        )
    finally:
        await manager.stop()


def run_storage_benchmark(
    reactor,
    messages: int,
    size: int,
    batches: Sequence[int],
    directory: str | None,
    fetch_bytes: int = 1024 * 1024,
    progress: BenchProgress | None = None,
    codec: str = "none",
):
    """Run the storage benchmark for each batch size; a Deferred firing with the rows."""

    async def run() -> list[StorageRow]:
        rows = []
        for batch in batches:
            root = directory or tempfile.mkdtemp(prefix="twlog-bench-")
            case_dir = os.path.join(root, f"batch-{batch}")
            if os.path.exists(case_dir):
                shutil.rmtree(case_dir)
            try:
                rows.append(await _run_storage_case(reactor, case_dir, messages, size, batch, fetch_bytes, progress,
                                                    codec))
            finally:
                shutil.rmtree(case_dir if directory else root, ignore_errors=True)
        return rows

    return Deferred.fromCoroutine(run())


def format_storage_table(rows: Sequence[StorageRow], size: int, codec: str = "none") -> BenchTable:
    """The storage benchmark's table, one line per batch size."""
    compressed = "" if codec == "none" else f", {codec} sets (one wrapper per batch)"
    table = BenchTable(
        f"twlog storage benchmark: {size}-byte messages{compressed}, validated on append and on read",
        [Column("batch", "msg/set"), Column("messages", "msg"), Column("encode", "msg/s"), Column("append", "msg/s"),
         Column("append", "MB/s"), Column("read", "msg/s"), Column("read", "MB/s"), Column("on disk", "B/msg"),
         Column("overhead", "B/msg")])
    for r in rows:
        table.add_row(f"{r.batch}", f"{r.messages:,}", f"{r.encode_msg_s:,.0f}", f"{r.append_msg_s:,.0f}",
                      f"{r.append_mb_s:,.1f}", f"{r.read_msg_s:,.0f}", f"{r.read_mb_s:,.1f}",
                      f"{r.disk_bytes_per_msg:,.2f}", f"{r.overhead_bytes:,.2f}")
    table.note("(MB = 10^6 bytes of log written or read; overhead = bytes on disk per message minus the payload")
    if codec == "none":
        table.note(f" expected overhead for uncompressed messages: {OVERHEAD} bytes)")
    else:
        table.note(" encode msg/s includes compressing; append msg/s includes the validation that decompresses)")
    return table


def main_storage(args) -> int:
    """Entry point of C{twlog bench storage}."""
    out = sys.stdout
    if args.dir:
        os.makedirs(args.dir, exist_ok=True)
    where = args.dir or tempfile.gettempdir()
    print(f"appending {args.messages:,} messages of {args.size} bytes per batch size; data under {where}",
          file=sys.stderr)
    result: list[StorageRow] = []

    def run(reactor):
        d = run_storage_benchmark(
            reactor, args.messages, args.size, args.batch, args.dir,
            fetch_bytes=args.fetch_bytes, progress=progress if progress.live else None,
            codec=getattr(args, "codec", "none"),
        )
        return d.addCallback(result.extend)

    with BenchProgress() as progress:
        status = react_status(run)
    if status:
        return status
    format_storage_table(result, args.size, getattr(args, "codec", "none")).print(out)
    return 0
