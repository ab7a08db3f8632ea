# -*- test-case-name: tests.test_usage_values -*-
"""Parsers of option values for the twistd plugins' C{usage.Options} (the broker, the registry, the console).

Each parser is made for one option, so that a bad value is one line naming it: C{--port must be a whole
number, not 'http'}, C{--request-timeout-s must be a number of seconds above 0, not '0'}.  Whole numbers may
be written with underscores (C{1_048_576}).
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.python import usage

__all__ = ["seconds", "whole_number"]


def whole_number(name: str, low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """A parser of C{--name}: a whole number, at least C{low} and at most C{high} when given."""

    def parse(text: str) -> int:
        try:
            value = int(str(text).replace("_", ""))
        except ValueError:
            raise usage.UsageError(f"--{name} must be a whole number, not {text!r}") from None
        if low is not None and high is not None:
            if not low <= value <= high:
                raise usage.UsageError(f"--{name} must be from {low} to {high}, not {value}")
        elif low is not None and value < low:
            raise usage.UsageError(f"--{name} must be at least {low}")
        elif high is not None and value > high:
            raise usage.UsageError(f"--{name} must be at most {high}")
        return value

    return parse


def seconds(name: str, *, low: float = 0.0, above: bool = False, most: float = float("inf")) -> Callable[[str], float]:
    """A parser of C{--name}: a finite number of seconds, at least C{low} (above it with C{above}), at most C{most}."""
    if most != float("inf"):
        allowed = f"from {'above ' if above else ''}{low:g} to {most:g}"
    else:
        allowed = f"above {low:g}" if above else f"{low:g} or more"

    def parse(text: str) -> float:
        try:
            value = float(str(text).replace("_", ""))
        except ValueError:
            value = float("nan")
        least_ok = value > low if above else value >= low
        if not least_ok or not value <= most or value == float("inf"):
            raise usage.UsageError(f"--{name} must be a number of seconds {allowed}, not {text!r}")
        return value

    return parse
