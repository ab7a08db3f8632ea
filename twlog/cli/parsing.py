"""Argument types and the parser class every C{twlog} subcommand shares."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from twisted.python import usage

T = TypeVar("T")


def type_checked(parse: Callable[[str], T], text: str, *errors: type[Exception]) -> T:
    """C{parse(text)} for an argparse C{type=} function: the C{errors} it raises (by default ValueError) become an
    C{ArgumentTypeError} with their text, which argparse prints as one line before it exits 2."""
    caught = errors or (ValueError,)
    try:
        return parse(text)
    except caught as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def int_list(text: str) -> list[int]:
    return [positive_int(part) for part in text.split(",") if part]


def scenarios(text: str) -> list[str]:
    names = [part for part in text.split(",") if part]
    unknown = [name for name in names if name not in ("start", "join")]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"scenarios are start and join, not {text!r}")
    return names


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, then exit 2, as argparse does
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_usage(options: usage.Options, command: str, argv: Sequence[str]) -> usage.Options | int:
    """C{options} parsed from C{argv} (a C{twistd} plugin's options run as C{twlog COMMAND}), or the exit
    status when there is nothing to run: 0 after C{--help}, 2 after one line naming a bad option."""
    try:
        options.parseOptions(list(argv))
    except usage.UsageError as e:
        print(f"twlog {command}: error: {e} (twlog {command} --help lists the options)", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0)
    return options
