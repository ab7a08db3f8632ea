"""The shape of the code base that docs/architecture.md promises, checked on every run of the suite.

- Every import points down the layer stack and no package imports itself in a
  cycle: import-linter's contracts in setup.cfg (C{lint-imports}).
- Imports sit at module top, where a reader sees them, except for the optional
  heavy dependencies (pyspark, pyarrow) and Twisted's global reactor, which a
  public constructor imports only when it was given C{reactor=None}.
- No module of twlog/ is over 500 lines and no class over 300.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

import twlog

ROOT = Path(twlog.__file__).resolve().parent.parent
PACKAGE = ROOT / "twlog"

#: Modules that may be imported inside a function: optional and heavy, or the reactor chosen late.
LAZY_ALLOWED = ("pyspark", "pyarrow", "twisted.internet.reactor")
MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 300


def sources() -> list[Path]:
    """Every Python module of the twlog package."""
    return sorted(PACKAGE.rglob("*.py"))


def local_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of each import statement inside a function body of C{tree}."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import):
                found.extend((inner.lineno, alias.name) for alias in inner.names)
            elif isinstance(inner, ast.ImportFrom):
                base = "." * inner.level + (inner.module or "")
                found.extend((inner.lineno, f"{base}.{alias.name}") for alias in inner.names)
    return sorted(set(found))


def allowed(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in LAZY_ALLOWED)


class LayerTests(SynchronousTestCase):
    def test_import_contracts(self) -> None:
        """lint-imports keeps every contract of setup.cfg: layers, no cycles, kazoo only in coord.zk."""
        lint = Path(sys.executable).with_name("lint-imports")
        result = subprocess.run(
            [str(lint), "--config", str(ROOT / "setup.cfg"), "--no-cache", "--no-logo"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.assertEqual(result.returncode, 0, result.stdout[-4000:] + result.stderr[-2000:])

    def test_imports_at_module_top(self) -> None:
        offenders = []
        for path in sources():
            tree = ast.parse(path.read_text(), str(path))
            for line, module in local_imports(tree):
                if not allowed(module):
                    offenders.append(f"{path.relative_to(ROOT)}:{line} imports {module} inside a function")
        self.assertEqual(offenders, [], "\n".join(offenders))

    def test_module_and_class_sizes(self) -> None:
        offenders = []
        for path in sources():
            text = path.read_text()
            lines = text.count("\n")
            if lines > MAX_MODULE_LINES:
                offenders.append(f"{path.relative_to(ROOT)}: {lines} lines (limit {MAX_MODULE_LINES})")
            for node in ast.walk(ast.parse(text, str(path))):
                if isinstance(node, ast.ClassDef):
                    size = node.end_lineno - node.lineno + 1
                    if size > MAX_CLASS_LINES:
                        offenders.append(
                            f"{path.relative_to(ROOT)}:{node.lineno} class {node.name}: {size} lines "
                            f"(limit {MAX_CLASS_LINES})"
                        )
        self.assertEqual(offenders, [], "\n".join(offenders))


class CheckerTests(SynchronousTestCase):
    """The checks above find what they look for (so a passing run means something)."""

    def test_local_import_found(self) -> None:
        tree = ast.parse("import os\ndef f():\n    import json\n    from twisted.internet import reactor\n")
        self.assertEqual(local_imports(tree), [(3, "json"), (4, "twisted.internet.reactor")])
        self.assertFalse(allowed("json"))
        self.assertTrue(allowed("twisted.internet.reactor"))
        self.assertTrue(allowed("pyspark.sql.datasource"))
        self.assertFalse(allowed("pysparkle"))
