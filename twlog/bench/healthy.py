# -*- test-case-name: tests.bench.test_hostile,tests.integration.test_bench_hostile -*-
"""The healthy client of C{twlog bench hostile}, and the blocking wire helpers its attacks share.

The healthy client (L{healthy_main}, run by L{HealthyClient} as a child process so that the attacking
threads of the benchmark's process never hold it up) fetches 64 KiB from offset 0 in a loop until told to
stop, and reports the time of every fetch.  Everything here talks to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from twlog.bench.common import read_exactly
from twlog.bench.verdicts import HealthyFetches
from twlog.protocol import codec
from twlog.protocol.codec import ACK_FLUSHED, AckProduceRequest, FetchRequest, ProduceRequest
from twlog.storage.message import encode_message_set

HOST = "127.0.0.1"
#: The healthy client's topic (partition 0), filled by L{prepare_topic}.
TOPIC = "healthy"
FRAME_SIZE = struct.Struct(">i")


def framed(request: codec.Request) -> bytes:
    """A request as sent: its size, then its body."""
    body = codec.encode_request(request)
    return FRAME_SIZE.pack(len(body)) + body


def connect(port: int, timeout_s: float = 5.0) -> socket.socket:
    sock = socket.create_connection((HOST, port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def call(sock: socket.socket, request: bytes, who: str = "the broker") -> bytes:
    """Send one framed request, return the answer's body (blocking)."""
    sock.sendall(request)
    (size,) = FRAME_SIZE.unpack(read_exactly(sock, 4, who))
    return read_exactly(sock, size, who)


def prepare_topic(port: int, fetch_bytes: int) -> None:
    """Fill the healthy client's partition with more than C{fetch_bytes} of 200-byte messages, fsynced
    (C{ACK_FLUSHED}), so that each of its fetches carries a full C{fetch_bytes}."""
    count = fetch_bytes // 209 + 50
    produce = framed(AckProduceRequest(ACK_FLUSHED, 30_000, (
        ProduceRequest(TOPIC, 0, encode_message_set([b"%0200d" % i for i in range(count)])),)))
    with connect(port, 30) as sock:
        (result,) = codec.decode_ack_produce_response(call(sock, produce)).results
    if result.error:
        raise RuntimeError(f"the broker refused the healthy client's first produce with error {result.error}")



def healthy_main(argv: Sequence[str] | None = None) -> None:
    """The healthy client's process: C{PORT FETCH_BYTES MAX_SECONDS}.  Prints C{ready} once its first fetch
    is answered, then fetches until its standard input closes (or MAX_SECONDS pass) and prints one JSON
    object: every fetch's time in seconds, and the failures."""
    port, fetch_bytes, max_seconds = (argv or sys.argv[1:])[:3]
    fetch = framed(FetchRequest(TOPIC, 0, 0, int(fetch_bytes)))
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), stop.set()), daemon=True).start()
    clock = time.perf_counter
    deadline = clock() + float(max_seconds)
    fetch_s: list[float] = []
    errors, first_error = 0, None
    sock = connect(int(port), 30)
    call(sock, fetch, "the broker (to the healthy client)")
    print("ready", flush=True)
    while not stop.is_set() and clock() < deadline:
        started = clock()
        try:
            if sock is None:
                sock = connect(int(port), 5)
            sock.settimeout(max(1.0, deadline - started))
            answer = codec.decode_fetch_response(call(sock, fetch, "the broker (to the healthy client)"))
            if answer.error:
                raise RuntimeError(f"the broker answered the healthy client's fetch with error {answer.error}")
            fetch_s.append(clock() - started)
        except (OSError, RuntimeError) as e:
            errors += 1
            first_error = first_error or f"{type(e).__name__}: {e}"
            if sock is not None:
                sock.close()
                sock = None
            stop.wait(0.05)  # then reconnect
    print(json.dumps({"fetch_s": fetch_s, "errors": errors, "first_error": first_error}), flush=True)


class HealthyClient:
    """The healthy client's process (L{healthy_main}), from its first answered fetch until L{stop}."""

    def __init__(self, port: int, fetch_bytes: int, max_seconds: float) -> None:
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])]))
        self._max_seconds = max_seconds
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from twlog.bench.healthy import healthy_main; healthy_main()", str(port),
             str(fetch_bytes), str(max_seconds)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        line = self.process.stdout.readline()  # bounded: the child's connect and first call time out
        if line.strip() != b"ready":
            self._fail()

    def _fail(self) -> None:
        self.process.kill()
        _, err = self.process.communicate()
        lines = err.decode(errors="replace").strip().splitlines() or ["(nothing on its stderr)"]
        raise RuntimeError(f"the healthy client failed: {lines[-1]}")

    def stop(self) -> HealthyFetches:
        """Stop it; its fetch times and failures."""
        try:
            out, _ = self.process.communicate(b"", timeout=self._max_seconds + 30)
        except subprocess.TimeoutExpired:
            self._fail()
        if self.process.returncode != 0:
            self._fail()
        result = json.loads(out)
        return HealthyFetches(tuple(result["fetch_s"]), result["errors"], result["first_error"])
