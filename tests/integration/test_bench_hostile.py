"""C{twlog bench hostile} end to end with tiny sizes: a real broker process, real sockets on 127.0.0.1."""

from __future__ import annotations

import re

from twisted.trial.unittest import TestCase

from tests.integration.test_cli import twlog


class HostileBenchCommandTests(TestCase):
    timeout = 120

    async def test_tiny_run(self) -> None:
        """Two clients dribbling 1 MiB frames for half a second: both phases are measured, the table
        names the bound, and the command ends with status 0 and no traceback."""
        status, out, err = await twlog("bench", "hostile", "--clients", "2", "--frame-mb", "1",
                                       "--seconds", "0.5", "--max-buffered-mb", "4")
        self.assertEqual(status, 0, err)
        text = out.decode()
        for phase in ("alone", "2 dribbling"):
            match = re.search(rf"^{phase}\s+([\d,]+)\s", text, re.MULTILINE)
            self.assertIsNotNone(match, text)
            self.assertGreater(int(match.group(1).replace(",", "")), 0)
        self.assertIn("bound (--max-buffered-request-bytes) 4.2 MB", text)
        self.assertNotIn(b"Traceback", err)

    async def test_bad_seconds(self) -> None:
        """A duration out of range is one line on stderr and exit status 2."""
        status, out, err = await twlog("bench", "hostile", "--seconds", "0")
        self.assertEqual(status, 2)
        self.assertEqual(err.decode().count("\n"), 1, err)
        self.assertIn("--seconds 0", err.decode())
