"""README.md's "Mirroring and auditing" block, run by tests/integration/test_readme.py against its cluster.

The block's first cluster is the README's (its documented ports rewritten by the
caller's C{command}); the second cluster's documented ports (2182, 9300) and data
directory become free ports and a temporary directory here.  The two commands
that run until Ctrl-C are started as processes and get SIGINT at the end (both
must stop cleanly); the audit is repeated until the mirror has copied every
message (bounded), then must exit 0 with every window complete.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

from twlog.coord.zkserver import free_port, free_ports

FIRST = "twlog local --data twlog-analysis --port 9300 --zookeeper-port 2182 --no-metrics"


def default_sigint() -> None:
    """In the child, before exec: SIGINT's default action (a test run started in a non-interactive shell's background
    job inherits SIGINT ignored, and these processes are stopped with SIGINT, as with Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(test, line: str, output: str, env: dict) -> subprocess.Popen:
    with open(output, "wb") as out:
        process = subprocess.Popen(["bash", "-c", "exec " + line], stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT, env=env, preexec_fn=default_sigint)

    def stop() -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(10)

    test.addCleanup(stop)
    return process


def _wait_for(path: str, pattern: str, timeout_s: float, process: subprocess.Popen) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        with open(path, "rb") as f:
            text = f.read().decode(errors="replace")
        if re.search(pattern, text):
            return text
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{pattern!r} not printed (exit {process.poll()}):\n{text[-3000:]}")
        time.sleep(0.2)


def _interrupt(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGINT)
    return process.wait(30)


def mirroring(test, cluster, env: dict) -> None:
    """Run the block: C{test} is the README's DocsTestCase (block, command, sh, tmp), C{cluster} its cluster."""
    block = test.block("README.md", FIRST)
    ports = {"2182": str(free_port()), "9300": str(free_ports(1))}
    started = []
    for line in block.commands():
        line = re.sub(r"\b(2182|9300)\b", lambda m: ports[m.group(1)], line)
        line = test.command(cluster, line.replace("--data twlog-analysis", f"--data {test.tmp / 'analysis'}"))
        if line.startswith("twlog local"):
            output = str(test.tmp / "analysis.out")
            process = _start(test, line, output, env)
            _wait_for(output, "Ctrl-C stops everything", 60, process)
            started.append(process)
        elif line.startswith("twlog mirror"):
            output = str(test.tmp / "mirror.out")
            process = _start(test, line, output, env)
            _wait_for(output, "copying topic pageviews", 60, process)
            started.insert(0, process)
        elif line.startswith("twlog audit"):
            deadline = time.monotonic() + 60
            while True:
                done = subprocess.run(["bash", "-c", line + " --json"], capture_output=True, timeout=60, env=env)
                windows = [json.loads(w) for w in done.stdout.splitlines() if w.strip()]
                # a window is pending until it ends (--audit-window-s 5): a user runs the audit again
                if (done.returncode == 0 and sum(w["received"] for w in windows) == 500
                        and {w["status"] for w in windows} == {"complete"}):
                    break
                test.assertLess(time.monotonic(), deadline, done.stderr.decode(errors="replace"))
                time.sleep(0.5)
            test.assertEqual({w["status"] for w in windows}, {"complete"})
            out, _ = test.sh(line)  # the table the README shows
            test.assertIn("complete", out)
        elif line.startswith("twlog consume"):
            deadline = time.monotonic() + 60
            while True:  # the mirror may not have copied the first messages yet
                done = subprocess.run(["bash", "-c", line], capture_output=True, timeout=60, env=env)
                if done.returncode == 0 and len(done.stdout.split()) == 3:
                    break
                test.assertLess(time.monotonic(), deadline, done.stderr.decode(errors="replace"))
                time.sleep(0.5)
            test.assertTrue(all(1 <= int(v) <= 500 for v in done.stdout.split()), done.stdout)
        else:
            _, err = test.sh(line)
            test.assertIn("sent 500 messages to pageviews", err)
    for process in started:  # the mirror first, then the analysis cluster
        test.assertEqual(_interrupt(process), 0)


__all__ = ["FIRST", "mirroring"]
