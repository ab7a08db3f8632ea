"""Argument types and the parser class every C{twlog} subcommand shares."""

from __future__ import annotations

import argparse


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
