# -*- test-case-name: tests.bench.test_crc -*-
"""C{twlog bench crc}: nanoseconds per message of ISA-L's, zlib's and crcmod's CRC-32."""

from __future__ import annotations

import time
from collections.abc import Sequence

from twlog.bench.common import BenchProgress, payloads
from twlog.storage.crc import crc32, crcmod_crc32, crcmod_uses_extension, zlib_crc32


def run_crc_benchmark(size: int = 200, count: int = 10_000, rounds: int = 20) -> list[tuple[str, float]]:
    """Nanoseconds per message of each CRC-32 implementation over C{count} payloads of C{size} bytes."""
    data = payloads(count, size)
    results = []
    for name, function in (("isal_zlib.crc32 (hot path)", crc32), ("zlib.crc32", zlib_crc32),
                           ("crcmod crc-32 (C extension)", crcmod_crc32)):
        best = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            for payload in data:
                function(payload)
            best = min(best, time.perf_counter() - started)
        results.append((name, best / count * 1e9))
    return results


def format_crc_table(results: Sequence[tuple[str, float]], size: int) -> str:
    """The CRC benchmark's table."""
    fastest = min(ns for _, ns in results)
    lines = [
        f"CRC-32 of {size}-byte payloads (crcmod C extension in use: {crcmod_uses_extension()})",
        f"{'implementation':<30} {'ns/msg':>8} {'msg/s':>12} {'relative':>8}",
    ]
    for name, ns in results:
        lines.append(f"{name:<30} {ns:>8.0f} {1e9 / ns:>12,.0f} {ns / fastest:>7.2f}x")
    return "\n".join(lines)


def main_crc(args) -> int:
    """Entry point of C{twlog bench crc}."""
    with BenchProgress() as progress:
        progress.step(f"timing CRC-32 of {args.count:,} payloads of {args.size} bytes")
        rows = run_crc_benchmark(args.size, args.count)
    print(format_crc_table(rows, args.size))
    return 0
