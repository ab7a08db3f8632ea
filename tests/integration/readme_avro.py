"""README.md's "Avro and the schema registry" blocks, run by tests/integration/test_readme.py against its cluster.

The registry's documented port (8081) becomes a free port; the CLI block runs line by line in a
temporary directory (it writes user.avsc there); the registry, which runs until Ctrl-C, gets SIGINT
at the end and must stop with status 0.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

from tests.integration.readme_mirroring import default_sigint
from twlog.coord.zkserver import free_port

REGISTRY = "twlog registry --zookeeper localhost:2181 --port 8081"
CLI = """echo '{"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}' > user.avsc"""
PYTHON = "from twlog import BlockingConsumer, BlockingProducer"


def avro_registry(test, cluster, env: dict) -> None:
    """Run the three blocks: C{test} is the README's DocsTestCase, C{cluster} its cluster."""
    port = str(free_port())
    [line] = test.block("README.md", REGISTRY).commands()
    line = test.command(cluster, line.replace("8081", port))
    output = test.tmp / "registry.out"
    with open(output, "wb") as out:
        registry = subprocess.Popen(["bash", "-c", "exec " + line], stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=env, preexec_fn=default_sigint)

    def kill() -> None:
        if registry.poll() is None:
            registry.send_signal(signal.SIGKILL)
            registry.wait(10)

    test.addCleanup(kill)
    deadline = time.monotonic() + 60
    while b"schema registry on http://" not in output.read_bytes():
        test.assertIsNone(registry.poll(), output.read_bytes().decode(errors="replace"))
        test.assertLess(time.monotonic(), deadline, "twlog registry did not start")
        time.sleep(0.1)

    for line in test.block("README.md", CLI).commands():
        line = test.command(cluster, line.replace("8081", port))
        done = subprocess.run(["bash", "-c", line], capture_output=True, timeout=60, cwd=test.tmp, env=env)
        out, err = done.stdout.decode(), done.stderr.decode()
        test.assertEqual(done.returncode, 0, f"{line}\n{out}\n{err}")
        if " produce " in line:
            test.assertIn("sent 1 message to users", err)
        elif line.startswith("twlog consume"):
            test.assertEqual([json.loads(x) for x in out.splitlines()], [{"name": "ann"}, {"name": "bob", "age": 42}])
        elif line.startswith("curl"):
            test.assertEqual(json.loads(out), [1, 2])

    snippet = test.block("README.md", PYTHON).text
    out = test.python("avro", cluster.rewrite(snippet.replace("8081", port)), 60)
    test.assertEqual(out, "0 {'page': '/home', 'ms': 12}\n21 {'page': '/jobs', 'ms': 30}\n")

    registry.send_signal(signal.SIGINT)
    test.assertEqual(registry.wait(30), 0, output.read_bytes().decode(errors="replace"))
    test.assertTrue(re.search(rb"replayed twlog-schemas", output.read_bytes()))
