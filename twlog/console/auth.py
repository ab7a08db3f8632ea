# -*- test-case-name: tests.console.test_auth -*-
"""The console's login and the authorization of its changes (docs/console.md, "Login and changes")."""

from __future__ import annotations

from collections.abc import Sequence

#: Where the authorizer of changes is kept in C{context.parts} (set by L{enable_login}).
AUTHORIZER = "auth.authorizer"


async def authorize(api, checks: Sequence[tuple[str, str, str]]) -> None:
    """Refuse (403) a change unless the request's user may do each C{(operation, resource type, name)} under the
    cluster's ACLs; without a login there is nobody to authorize, and every change is allowed."""
    authorizer = api.context.parts.get(AUTHORIZER)
    if authorizer is not None:
        await authorizer(api, checks)


def routes(context) -> list:
    return []
