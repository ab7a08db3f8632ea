# -*- test-case-name: tests.bench.test_crc -*-
"""C{twlog bench crc}: nanoseconds per message of ISA-L's, zlib's and crcmod's CRC-32."""

from __future__ import annotations

import time
from collections.abc import Sequence

from twlog.bench.common import BenchProgress, BenchTable, Column, payloads
from twlog.storage.crc import crc32, crcmod_crc32, crcmod_uses_extension, zlib_crc32

IMPLEMENTATIONS = (("isal_zlib.crc32 (hot path)", crc32), ("zlib.crc32", zlib_crc32),
                   ("crcmod crc-32 (C extension)", crcmod_crc32))


def run_crc_benchmark(size: int = 200, count: int = 10_000, rounds: int = 20,
                      progress: BenchProgress | None = None) -> list[tuple[str, float]]:
    """Nanoseconds per message of each CRC-32 implementation over C{count} payloads of C{size} bytes."""
    data = payloads(count, size)
    results = []
    if progress is not None:
        progress.step(f"timing CRC-32 of {count:,} payloads of {size} bytes", total=len(IMPLEMENTATIONS) * rounds,
                      unit="rounds")
    for name, function in IMPLEMENTATIONS:
        best = float("inf")
        for round_no in range(rounds):
            if progress is not None:
                progress.update(len(results) * rounds + round_no,
                                f"CRC-32 of {count:,} payloads of {size} bytes: {name}, round {round_no + 1}/{rounds}")
            started = time.perf_counter()
            for payload in data:
                function(payload)
            best = min(best, time.perf_counter() - started)
        results.append((name, best / count * 1e9))
    return results


def format_crc_table(results: Sequence[tuple[str, float]], size: int) -> BenchTable:
    """The CRC benchmark's table."""
    fastest = min(ns for _, ns in results)
    table = BenchTable(f"CRC-32 of {size}-byte payloads (crcmod C extension in use: {crcmod_uses_extension()})",
                       [Column.label("implementation"), Column("time", "ns/msg"), Column("throughput", "msg/s"),
                        Column("time relative to the fastest", "x")])
    for name, ns in results:
        table.add_row(name, f"{ns:.0f}", f"{1e9 / ns:,.0f}", f"{ns / fastest:.2f}")
    table.note("(the best of the rounds for each implementation)")
    return table


def main_crc(args) -> int:
    """Entry point of C{twlog bench crc}."""
    with BenchProgress() as progress:
        rows = run_crc_benchmark(args.size, args.count, progress=progress)
    format_crc_table(rows, args.size).print()
    return 0
