# -*- test-case-name: tests.cli.test_output -*-
"""How commands print for people and scripts: tables through rich, JSON documents."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    print(json.dumps(value, ensure_ascii=False))


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None,
                right: Iterable[str] = ()) -> None:
    """A table on stdout (plain text when stdout is not a terminal: no colours, no wrapping)."""
    aligned = set(right)
    table = Table(title=title, title_justify="left", box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, justify="right" if column in aligned else "left", no_wrap=True)
    for row in rows:
        table.add_row(*("-" if cell is None else f"{cell:,}" if isinstance(cell, int) else str(cell) for cell in row))
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 250, highlight=False)
    console.print(table)
