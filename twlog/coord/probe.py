# -*- test-case-name: tests.coord.test_probe -*-
"""What answered at a ZooKeeper address that gave no session: nothing, a twlog broker, or something else.

A broker's port given as ZooKeeper's (C{--zookeeper localhost:9092}) makes kazoo
say only "Connection time-out": the broker reads ZooKeeper's connect request as
a malformed frame and closes the connection.  L{describe_answer} asks each
server of the connect string once, blocking and briefly: a TCP connect, then a
twlog METADATA request (type 7), whose answer names a broker.
"""

from __future__ import annotations

import socket
import struct

from twlog.errors import TwlogError
from twlog.protocol.codec import MetadataRequest, decode_metadata_response, encode_request

#: How long each server may take to accept and to answer.
PROBE_TIMEOUT_S = 1.0


def _server(text: str) -> tuple[str, int] | None:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "localhost", int(port)


def _answer(host: str, port: int, timeout_s: float) -> str:
    """What answered at C{host:port}, as the end of a sentence, or C{""} when it looks like nothing odd."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except ConnectionRefusedError:
        return f"nothing listens on {host}:{port}: the connection is refused"
    except OSError:
        return ""  # unreachable or slow: the time-out says it
    with sock:
        request = encode_request(MetadataRequest(()))
        try:
            sock.sendall(struct.pack(">i", len(request)) + request)
            data = b""
            while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            data = b""
        try:
            answer = decode_metadata_response(data[4:]) if len(data) >= 6 else None
        except (TwlogError, struct.error, ValueError):
            answer = None
    if answer is not None and not answer.error:
        return (f"{host}:{port} answered, but as twlog broker {answer.broker_id}, not as ZooKeeper "
                "(ZooKeeper's port is usually 2181)")
    return f"{host}:{port} accepts connections, but does not answer as ZooKeeper"


def describe_answer(hosts: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """What answered at the servers of C{hosts} (C{host:port[,...][/chroot]}) instead of ZooKeeper, in one
    clause (C{"localhost:9092 answered, but as twlog broker 0, not as ZooKeeper ..."}), or C{""}."""
    servers = hosts.partition("/")[0].split(",")
    found = []
    for server in servers:
        address = _server(server)
        if address is not None:
            answer = _answer(*address, timeout_s)
            if answer:
                found.append(answer)
    return "; ".join(found)
