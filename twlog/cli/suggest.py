# -*- test-case-name: tests.cli.test_suggest,tests.integration.test_cli_findings -*-
"""Did you mean: the topic a mistyped name was probably meant to be (L{difflib}), for the CLI's one-line errors."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from twlog.client.async_discovery import all_partitions_async
from twlog.client.options import ClientOptions
from twlog.errors import TwlogError


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """C{"; did you mean 'clicks'?"} (or two or three names) when C{known} has names close to C{name}, else C{""}."""
    close = difflib.get_close_matches(name, sorted(set(known) - {name}), n=3, cutoff=0.6)
    close.sort(key=lambda c: (-difflib.SequenceMatcher(None, name, c).ratio(), c))  # equally close: by name
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


async def suggest_topic(name: str, source: dict, options: ClientOptions, reactor=None) -> str:
    """L{did_you_mean} over the cluster's topics (asked of C{source}: C{brokers=} or C{zookeeper=}); C{""} when the
    cluster cannot be listed (the caller's error says enough without it)."""
    try:
        locations = await all_partitions_async(reactor=reactor, options=options, **source)
    except (TwlogError, ValueError):
        return ""
    return did_you_mean(name, {location.topic for location in locations})
