"""The documents cite only files that exist in this repository.

README.md and docs/*.md name files in backquotes (`twlog/storage/log.py`, or
just `log.py` inside a paragraph about one package); each such name must be
the path, or the tail of the path, of a file in the repository, so a reader
who opens it finds it.  A file that moves or is deleted fails this test until
the documents follow.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

import twlog

ROOT = Path(twlog.__file__).resolve().parent.parent
#: A backquoted file name: path segments ending in one of the extensions the repository holds.
CITED = re.compile(r"`((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_-]+\.(?:py|md|cfg|toml|txt))`")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def repository_files() -> list[str]:
    """Every file of the checkout: tracked ones, and new ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()
    return [name for name in listed if (ROOT / name).exists()]


def missing(cited: str, files: list[str]) -> bool:
    return not any(name == cited or name.endswith("/" + cited) for name in files)


class CitationTests(SynchronousTestCase):
    def test_cited_files_exist(self) -> None:
        files = repository_files()
        problems = []
        for document in documents():
            for number, line in enumerate(document.read_text().splitlines(), 1):
                for cited in CITED.findall(line):
                    if missing(cited, files):
                        problems.append(f"{document.relative_to(ROOT)}:{number} cites {cited}, not in the repository")
        self.assertEqual(problems, [], "\n".join(problems))

    def test_checker_finds_a_missing_file(self) -> None:
        files = ["twlog/storage/log.py", "README.md"]
        self.assertFalse(missing("log.py", files))
        self.assertFalse(missing("storage/log.py", files))
        self.assertTrue(missing("twlog/tap.py", files))
        self.assertTrue(missing("og.py", files))
        self.assertEqual(CITED.findall("see `twlog/tap.py` and `x` and `shared/DESIGN.md`"),
                         ["twlog/tap.py", "shared/DESIGN.md"])
