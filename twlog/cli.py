# -*- test-case-name: tests.test_cli -*-
"""The C{twlog} command: one entry point, a subcommand per job, C{--help} on each.

User mistakes end in one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from twlog import __version__
from twlog.errors import TwlogError


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def _int_list(text: str) -> list[int]:
    return [_positive_int(part) for part in text.split(",") if part]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, then exit 2, as argparse does
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(
        prog="twlog",
        description="twlog: a distributed, log-structured publish/subscribe system on Twisted.",
    )
    parser.add_argument("--version", action="version", version=f"twlog {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    bench = commands.add_parser("bench", help="run a benchmark and print a table",
                                description="Benchmarks that print tables.")
    benches = bench.add_subparsers(dest="bench", metavar="BENCHMARK", parser_class=_Parser)
    benches.required = True

    storage = benches.add_parser(
        "storage",
        help="append and read back N messages through the storage engine (no network)",
        description=(
            "Append N messages through a partition log in batches of each size given (CRC validation "
            "included, fsync on a thread pool as in the broker), read them back with 1 MB reads and "
            "decode every message; print msg/s, MB/s and bytes on disk per message."
        ),
    )
    storage.add_argument("--messages", "-n", type=_positive_int, default=1_000_000,
                         help="messages per batch size (default: 1,000,000)")
    storage.add_argument("--size", type=_positive_int, default=200, help="payload bytes (default: 200)")
    storage.add_argument("--batch", type=_int_list, default=[1, 50],
                         help="comma-separated batch sizes (default: 1,50)")
    storage.add_argument("--fetch-bytes", type=_positive_int, default=1024 * 1024,
                         help="bytes per read when reading back (default: 1 MiB)")
    storage.add_argument("--dir", default=None,
                         help="where to write the logs (default: a temporary directory, deleted afterwards)")
    storage.set_defaults(run="twlog.bench:main_storage")

    crc = benches.add_parser("crc", help="compare zlib's and crcmod's CRC-32 on message payloads",
                             description="Nanoseconds per message of zlib.crc32 and crcmod's crc-32.")
    crc.add_argument("--size", type=_positive_int, default=200, help="payload bytes (default: 200)")
    crc.add_argument("--count", type=_positive_int, default=10_000, help="payloads per round (default: 10,000)")
    crc.set_defaults(run="twlog.bench:main_crc")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the C{twlog} command; return its exit status."""
    args = build_parser().parse_args(argv)
    module_name, _, function_name = args.run.partition(":")
    from importlib import import_module

    function = getattr(import_module(module_name), function_name)
    try:
        return function(args)
    except (TwlogError, OSError) as e:
        print(f"twlog: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("twlog: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
