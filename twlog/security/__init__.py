"""Security without I/O: principals, SASL server exchanges and the ACL decisions (issue 23).

Principals are named as Kafka names them, C{"User:<name>"}: a SASL user C{bob}
is C{User:bob}, a mutual-TLS client C{User:<the certificate's subject DN>},
and a connection that has not authenticated C{User:ANONYMOUS}.  The
ZooKeeper-backed stores of credentials and ACLs are L{twlog.coord}'s; the
protocol asks this package what a principal may do.
"""

from __future__ import annotations

__all__ = ["ANONYMOUS", "user_principal"]

#: The principal of a connection that has not authenticated (Kafka's C{User:ANONYMOUS}).
ANONYMOUS = "User:ANONYMOUS"


def user_principal(name: str) -> str:
    """C{User:<name>}: the principal of the user C{name}."""
    return f"User:{name}"
