# -*- test-case-name: tests.test_docs -*-
"""The fenced code blocks of README.md and docs/*.md, and the convention they follow.

Every ```sh and ```python block is either run by tests/integration/test_readme.py
(it is then listed in that module's C{RUNS}) or preceded, on the line before its
fence, by an HTML comment that starts with C{<!-- illustrative}: a command that
needs root or a real machine set-up, runs for a long time (the whole suite), or
needs a terminal; the comment says why after a colon.  tests/test_docs.py checks
that every block is one or the other.  Pure: no network, no processes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import twlog

ROOT = Path(twlog.__file__).resolve().parent.parent
#: The languages whose blocks must run or be marked.
CHECKED = ("sh", "python")
MARKER = re.compile(r"^<!--\s*illustrative\b(?::\s*(?P<why>.*?))?\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    document: str  #: relative to the repository: "README.md", "docs/operations.md"
    line: int  #: line number of the opening fence
    language: str
    text: str
    #: The reason given by an C{<!-- illustrative: ... -->} marker ("" without one), or None if unmarked.
    illustrative: str | None

    @property
    def key(self) -> tuple[str, str]:
        """How C{RUNS} names the block: its document and its first line, without a trailing comment."""
        return self.document, first_line(self.text)

    def commands(self) -> list[str]:
        """The block's non-blank lines, each without its trailing C{# comment}."""
        return [strip_comment(line) for line in self.text.splitlines() if line.strip()]


def first_line(text: str) -> str:
    return strip_comment(next((line for line in text.splitlines() if line.strip()), ""))


def strip_comment(line: str) -> str:
    """C{line} without a shell/Python trailing comment (a C{#} after two spaces), right-stripped."""
    return re.split(r"\s{2,}#", line, maxsplit=1)[0].rstrip()


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path, name: str | None = None) -> list[Block]:
    """The fenced blocks of one Markdown document, every language; C{name} defaults to its path in the repository."""
    found = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if fence is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        before = lines[i - 1].strip() if i > 0 else ""
        marker = MARKER.match(before)
        text = "\n".join(lines[i + 1:end]) + "\n"
        found.append(Block(name or str(path.relative_to(ROOT)), i + 1, fence.group(1), text,
                           None if marker is None else (marker.group("why") or "")))
        i = end + 1
    return found


def checked_blocks() -> list[Block]:
    """Every sh and python block of the documents."""
    return [block for path in documents() for block in blocks(path) if block.language in CHECKED]


def find(document: str, first: str) -> Block:
    """The block of C{document} whose first line is C{first}; LookupError if none (the document changed)."""
    for block in blocks(ROOT / document):
        if block.key == (document, first):
            return block
    raise LookupError(f"{document} has no code block starting with {first!r} any more: update RUNS")
