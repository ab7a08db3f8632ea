# -*- test-case-name: tests.console.test_api_cluster -*-
"""A list answered a page at a time, filtered and sorted on the server (docs/console.md: C{filter=}, C{sort=},
C{order=asc|desc}, C{offset=}, C{limit=} (default 50, at most 500); the answer has C{total}, C{offset},
C{limit})."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from twlog.console.http import ApiRequest

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def page(api: ApiRequest, items: Sequence[dict], key: str, name: str,
         sorts: Mapping[str, Callable[[dict], Any]]) -> dict:
    """C{items} filtered by C{filter=} (a case-insensitive substring of C{item[name]}), sorted by C{sort=} (one
    of C{sorts}; the first by default; None values last whatever the order), paged: C{{"total", "offset",
    "limit", key: [...]}}.

    @raise ApiError: 400 naming a bad parameter.
    """
    text = (api.arg("filter") or "").lower()
    sort = api.choice("sort", sorts, next(iter(sorts)))
    order = api.choice("order", ("asc", "desc"), "asc")
    offset = api.int_arg("offset", 0, low=0)
    limit = api.int_arg("limit", DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
    chosen = [item for item in items if text in str(item[name]).lower()] if text else list(items)
    by = sorts[sort]
    known = [item for item in chosen if by(item) is not None]
    unknown = [item for item in chosen if by(item) is None]
    known.sort(key=lambda item: (by(item), str(item[name])), reverse=order == "desc")
    unknown.sort(key=lambda item: str(item[name]))
    ordered = known + unknown
    return {"total": len(ordered), "offset": offset, "limit": limit, key: ordered[offset:offset + limit]}
