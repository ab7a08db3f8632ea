"""The documents cite only files that exist in this repository, and their code blocks run or say they do not.

README.md and docs/*.md name files in backquotes (`twlog/storage/log.py`, or
just `log.py` inside a paragraph about one package); each such name must be
the path, or the tail of the path, of a file in the repository, so a reader
who opens it finds it.  A backquoted directory or extensionless path under one
of the repository's top-level entries (`twlog/cli/`, `.ci/run`) must exist too,
and so must a path a code block runs (`examples/etl_parquet.py`).  A file that
moves or is deleted fails this test until the documents follow.

Every ```sh and ```python block is either run by tests/integration/test_readme.py
(listed in its C{RUNS}) or preceded by C{<!-- illustrative: why -->}, for commands
that need root or a real machine set-up, long runs, or a terminal (tests/docblocks.py
parses them); a new block fails here until someone runs or marks it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from tests.docblocks import ROOT, Block, blocks, checked_blocks
from tests.integration.test_readme import RUNS

#: A backquoted file name: path segments ending in one of the extensions the repository holds.
CITED = re.compile(r"`((?:[A-Za-z0-9_.-]+/)*[A-Za-z0-9_-]+\.(?:py|md|cfg|toml|txt))`")


#: A backquoted path with no extension the pattern above knows: a directory (`twlog/cli/`) or `.ci/run`.
CITED_PATH = re.compile(r"`(?:\./)?((?:\.?[A-Za-z0-9_-]+/)+(?:[A-Za-z0-9_-]+)?)`")
#: A repository path a code block names: `examples/etl_parquet.py`, `.venv/bin/python` is not one.
RUN_PATH = re.compile(r"(?<![\w./$])((?:[A-Za-z0-9_-]+/)+[A-Za-z0-9_-]+\.(?:py|md|cfg|toml|txt))\b")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def unaccounted(found: list[Block], runs) -> list[str]:
    """The blocks neither marked illustrative nor listed in C{runs}, as C{document:line first-line}."""
    return [f"{b.document}:{b.line} {b.key[1]!r}" for b in found if b.illustrative is None and b.key not in runs]


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

    def test_cited_paths_exist(self) -> None:
        """Backquoted directories and extensionless paths under a top-level entry of the repository exist."""
        files = repository_files()
        top = {name.split("/")[0] for name in files}
        problems = []
        for document in documents():
            for number, line in enumerate(document.read_text().splitlines(), 1):
                for cited in CITED_PATH.findall(line):
                    path = cited.rstrip("/")
                    if path.split("/")[0] in top and not any(f == path or f.startswith(path + "/") for f in files):
                        problems.append(f"{document.relative_to(ROOT)}:{number} cites {cited}, not in the repository")
        self.assertEqual(problems, [], "\n".join(problems))

    def test_code_blocks_name_existing_files(self) -> None:
        """A file a shell block runs (`python examples/etl_parquet.py`) is in the repository."""
        files = repository_files()
        problems = [f"{b.document}:{b.line} runs {cited}, not in the repository"
                    for b in checked_blocks() if b.language == "sh"
                    for cited in RUN_PATH.findall(b.text) if cited.split("/")[0] in {f.split("/")[0] for f in files}
                    and missing(cited, files)]
        self.assertEqual(problems, [], "\n".join(problems))

    def test_checker_finds_a_missing_file(self) -> None:
        files = ["twlog/storage/log.py", "README.md"]
        self.assertFalse(missing("log.py", files))
        self.assertFalse(missing("storage/log.py", files))
        self.assertTrue(missing("twlog/tap.py", files))
        self.assertTrue(missing("og.py", files))
        self.assertEqual(CITED.findall("see `twlog/tap.py` and `x` and `shared/DESIGN.md`"),
                         ["twlog/tap.py", "shared/DESIGN.md"])


class CodeBlockTests(SynchronousTestCase):
    def test_every_block_runs_or_is_marked(self) -> None:
        """Every sh and python block is run by tests/integration/test_readme.py or marked illustrative."""
        problems = unaccounted(checked_blocks(), RUNS)
        self.assertEqual(problems, [], "neither run (tests/integration/test_readme.py RUNS) nor marked "
                         "<!-- illustrative: why -->:\n" + "\n".join(problems))

    def test_runs_names_existing_blocks(self) -> None:
        """Every block RUNS lists is still in its document, unmarked (else the runner runs a stale list)."""
        found = {b.key: b for b in checked_blocks()}
        self.assertEqual([key for key in RUNS if key not in found or found[key].illustrative is not None], [])

    def test_marked_blocks_say_why(self) -> None:
        """An illustrative marker gives its reason after a colon."""
        self.assertEqual([f"{b.document}:{b.line}" for b in checked_blocks() if b.illustrative == ""], [])

    def test_parser(self) -> None:
        """Blocks are found with their language, first line and marker; an unmarked, unlisted one is reported."""
        path = Path(self.mktemp())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# t\n\n<!-- illustrative: needs root -->\n```sh\nsudo x   # why\n```\n\n"
                        "```sh\ntwlog topics -b h:1   # list\nmore\n```\n\n```\noutput\n```\n")
        found = blocks(path, "d.md")
        self.assertEqual([(b.line, b.language, b.key[1], b.illustrative) for b in found],
                         [(4, "sh", "sudo x", "needs root"), (8, "sh", "twlog topics -b h:1", None),
                          (13, "", "output", None)])
        self.assertEqual(found[1].commands(), ["twlog topics -b h:1", "more"])
        sh = [b for b in found if b.language == "sh"]
        self.assertEqual(unaccounted(sh, {}), ["d.md:8 'twlog topics -b h:1'"])
        self.assertEqual(unaccounted(sh, {("d.md", "twlog topics -b h:1"): "run"}), [])
