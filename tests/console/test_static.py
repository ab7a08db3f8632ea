"""The console's static files: the shell's references, the script's routes against the site's PAGES, the page
modules, and the bundled chart library against console-assets/'s lock file."""

from __future__ import annotations

import json
import re
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from twlog.console.app import PAGES, STATIC_DIR

REPO = Path(__file__).resolve().parents[2]


def _routes() -> dict[str, str]:
    """app.js's ROUTES: pattern -> page module."""
    text = (STATIC_DIR / "app.js").read_text()
    block = text[text.index("const ROUTES = ["):text.index("];", text.index("const ROUTES = ["))]
    return dict(re.findall(r'\["(/[^"]*)", "([a-z]+)"\]', block))


class StaticTests(SynchronousTestCase):
    def test_every_page_has_a_route_and_module(self) -> None:
        """Each address of PAGES is routed by app.js (":name" for "{name}") to a module in static/pages/."""
        routes = _routes()
        expected = {"/" + re.sub(r"\{(\w+)\}", r":\1", page) for page in PAGES}
        self.assertEqual(set(routes), expected)
        for module in routes.values():
            self.assertTrue((STATIC_DIR / "pages" / f"{module}.js").is_file(), module)

    def test_the_shell_references_files_that_exist(self) -> None:
        """Every /static/ file index.html loads is there, and nothing is loaded from another site."""
        shell = (STATIC_DIR / "index.html").read_text()
        references = re.findall(r'(?:src|href)="([^"]+)"', shell)
        statics = [r for r in references if r.startswith("/static/")]
        self.assertGreaterEqual(len(statics), 4)
        for reference in statics:
            self.assertTrue((STATIC_DIR / reference.removeprefix("/static/")).is_file(), reference)
        self.assertEqual([r for r in references if "//" in r], [])

    def test_modules_import_only_files_that_exist(self) -> None:
        """Every relative import of a script names a file of static/."""
        for script in [*STATIC_DIR.glob("*.js"), *STATIC_DIR.glob("pages/*.js")]:
            for target in re.findall(r'from "(\.[^"]+)"', script.read_text()):
                self.assertTrue((script.parent / target).resolve().is_file(), f"{script.name} imports {target}")

    def test_the_bundled_library_is_the_locked_version(self) -> None:
        """static/vendor/VERSIONS names the uPlot version console-assets/package-lock.json locks."""
        lock = json.loads((REPO / "console-assets" / "package-lock.json").read_text())
        version = lock["packages"]["node_modules/uplot"]["version"]
        self.assertIn(f"uPlot {version} ", (STATIC_DIR / "vendor" / "VERSIONS").read_text())
        self.assertGreater((STATIC_DIR / "vendor" / "uPlot.iife.min.js").stat().st_size, 10_000)
