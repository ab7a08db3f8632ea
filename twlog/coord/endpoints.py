# -*- test-case-name: tests.coord.test_endpoints -*-
"""Where a broker listens, by security protocol: C{/twlog/brokers/endpoints/<id>}.

Kafka 0.7's registration C{/brokers/ids/<id>} holds one address, the plaintext
port, and stays as it is so that 0.7 clients keep working.  A broker also
writes its listeners, as Kafka 0.9's registration does, in an ephemeral node
of its own beside it::

    {"version": 1, "endpoints": ["PLAINTEXT://127.0.0.1:9092", "SSL://127.0.0.1:9093"],
     "metrics_url": "http://127.0.0.1:9192/metrics"}

(C{metrics_url} only from a broker with C{--metrics-port}: where the console scrapes its metrics.)

A client that speaks TLS (L{SSL}) reads the brokers through their C{SSL}
endpoint: L{listener_values} rewrites the registrations it read, so that the
one reading of the layout (L{twlog.coord.layout.ClusterLayout.from_registrations})
locates every partition at its broker's TLS port.  A live broker without one
is not reachable over TLS: it is left out as if down (its partitions offline,
said as a problem), never silently reached in plaintext.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from twlog.coord.layout import parse_broker_address
from twlog.partition import address_text

__all__ = ["PLAINTEXT", "SSL", "endpoints_value", "listener_values", "metrics_url_of", "parse_endpoints"]

#: The security protocols of the listeners (Kafka's names): plaintext and TLS.  (SASL is asked for on
#: either, in the connection's first requests, so it does not make a listener of its own here.)
PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
_PROTOCOLS = (PLAINTEXT, SSL)


def endpoints_value(host: str, port: int | None, tls_port: int | None, metrics_url: str | None = None) -> bytes:
    """The value of C{/twlog/brokers/endpoints/<id>} for a broker at C{host} listening on C{port} (None: no
    plaintext listener) and C{tls_port} (None: no TLS listener), serving its Prometheus metrics at C{metrics_url}
    (None: it does not; Kafka's broker node has C{jmx_port} for the same reason: where tools read its metrics)."""
    endpoints = [f"{name}://{address_text(host, p)}" for name, p in ((PLAINTEXT, port), (SSL, tls_port))
                 if p is not None]
    document: dict = {"version": 1, "endpoints": endpoints}
    if metrics_url is not None:
        document["metrics_url"] = metrics_url
    return json.dumps(document, separators=(",", ":")).encode("ascii")


def metrics_url_of(value: bytes) -> str | None:
    """The C{metrics_url} of an endpoints node (L{endpoints_value}), or None: none given, or not an http(s) URL
    (a node of a twlog before it, or a broker without C{--metrics-port})."""
    try:
        document = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    url = document.get("metrics_url") if isinstance(document, dict) else None
    return url if isinstance(url, str) and url.startswith(("http://", "https://")) else None


def parse_endpoints(value: bytes) -> dict[str, tuple[str, int]]:
    """A broker's listeners from its endpoints node: security protocol -> (host, port).

    @raise ValueError: not the JSON L{endpoints_value} writes, an unknown protocol, or a bad address.
    """
    try:
        document = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"broker endpoints {value[:80]!r} are not JSON") from None
    endpoints = document.get("endpoints") if isinstance(document, dict) else None
    if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
        raise ValueError(f"broker endpoints {value[:80]!r} have no list of endpoints")
    found: dict[str, tuple[str, int]] = {}
    for endpoint in endpoints:
        protocol, sep, address = endpoint.partition("://")
        if not sep or protocol not in _PROTOCOLS:
            raise ValueError(f"broker endpoint {endpoint!r} is not {' or '.join(_PROTOCOLS)}://host:port")
        found[protocol] = parse_broker_address(address.encode("utf-8"))
    return found


def listener_values(brokers: Mapping[str, bytes | None], endpoints: Mapping[str, bytes | None], listener: str
                    ) -> tuple[dict[str, bytes | None], list[str]]:
    """The brokers' registrations (C{/brokers/ids}' children, name -> value) as a client of C{listener} must
    reach them, and the problems found.

    For L{PLAINTEXT}, C{brokers} as they are.  For L{SSL}, each live broker's value names its C{SSL} endpoint
    (C{endpoints}: C{/twlog/brokers/endpoints}' children, name -> value); a broker with none (or a bad value)
    becomes None, as a broker that is not live, and is a problem.
    """
    if listener == PLAINTEXT:
        return dict(brokers), []
    values: dict[str, bytes | None] = {}
    problems: list[str] = []
    for name, value in brokers.items():
        if value is None:
            values[name] = None
            continue
        found = endpoints.get(name)
        try:
            address = parse_endpoints(found).get(listener) if found is not None else None
        except ValueError as e:
            problems.append(f"broker {name}: {e}")
            values[name] = None
            continue
        if address is None:
            if found is not None:
                problems.append(f"broker {name} has no {listener} listener (it is started without --tls-port): "
                                "its partitions cannot be reached over TLS")
            else:
                problems.append(f"broker {name} has not registered its listeners (an older twlog?): its partitions "
                                "cannot be reached over TLS")
            values[name] = None
        else:
            values[name] = address_text(*address).encode("utf-8")
    return values, problems
