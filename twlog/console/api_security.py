# -*- test-case-name: tests.console.test_api_security -*-
"""The users' and the ACLs' routes (docs/console.md, "Security"): what C{twlog users} and C{twlog acls} do, by
the same code (L{twlog.coord.users.UserStore}, L{twlog.coord.acls.change_acls}, the checks of
L{twlog.security.credentials} and L{twlog.security.acls}).

With a login, listing needs Describe on the Cluster and a change Alter on the Cluster (Kafka's rules for
DescribeAcls, CreateAcls, DeleteAcls and the users' SCRAM credentials).
"""

from __future__ import annotations

from typing import Any

from twlog.console import auth
from twlog.console.groups import guarded, require_zookeeper
from twlog.console.http import ApiError, ApiRequest, Route, bad_parameter
from twlog.coord.acls import change_acls, read_acls, secure_group_nodes
from twlog.coord.users import UserStore
from twlog.coord.zksecure import forget_user_digest, record_user_digest
from twlog.errors import TwlogError
from twlog.security.acls import (
    ALL_HOSTS,
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclError,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    parse_operation,
    parse_principal,
)
from twlog.security.credentials import MIN_ITERATIONS, SCRAM_MECHANISMS, make_credential, validate_user_name

DEFAULT_LIMIT = 50
MAX_LIMIT = 500

_DESCRIBE = [("Describe", "Cluster", CLUSTER_NAME)]
_ALTER = [("Alter", "Cluster", CLUSTER_NAME)]


def routes(context) -> list[Route]:
    def route(method: str, pattern: str, handler) -> Route:
        return Route(method, pattern, lambda api: guarded(context, _checked(context, api, handler)))

    return [route("GET", "users", list_users), route("POST", "users", add_user),
            route("DELETE", "users/{user}", delete_user), route("GET", "acls", list_acls),
            route("POST", "acls", add_acl), route("DELETE", "acls", remove_acl)]


async def _checked(context, api: ApiRequest, handler):
    require_zookeeper(context)
    return await handler(context, api)


async def _users(context) -> dict:
    return {"users": [{"user": name, "mechanisms": list(mechanisms) if mechanisms is not None else None}
                      for name, mechanisms in await UserStore(context.zk).list()]}


async def list_users(context, api: ApiRequest) -> dict:
    await auth.authorize(api, _DESCRIBE)
    return await _users(context)


def _body(api: ApiRequest, shape: str) -> dict:
    body = api.json()
    if not isinstance(body, dict):
        raise bad_parameter("body", f"a JSON object {shape} is needed")
    return body


async def add_user(context, api: ApiRequest) -> dict:
    body = _body(api, '{"user", "password", "mechanism"}')
    user, password, mechanism = body.get("user"), body.get("password"), body.get("mechanism")
    try:
        validate_user_name(user if isinstance(user, str) else "")
    except TwlogError as e:
        raise bad_parameter("user", str(e)) from None
    if not isinstance(password, str) or not password:
        raise bad_parameter("password", "a password is needed")
    if mechanism is not None and mechanism not in SCRAM_MECHANISMS:
        raise bad_parameter("mechanism", f"{str(mechanism)[:40]!r} is not one of {', '.join(SCRAM_MECHANISMS)} "
                                         "(or null for both)")
    await auth.authorize(api, _ALTER)
    mechanisms = [mechanism] if mechanism is not None else list(SCRAM_MECHANISMS)
    try:
        credentials = {m: make_credential(m, password, MIN_ITERATIONS) for m in mechanisms}
    except TwlogError as e:  # (a password SASLprep refuses)
        raise bad_parameter("password", str(e)) from None
    existed = await UserStore(context.zk).add(user, credentials)
    if context.zk.credentials is not None:  # a secured ZooKeeper: the user's identity there too (as twlog users add)
        await record_user_digest(context.zk, user, password)
    api.changed(f"{'updated' if existed else 'added'} user {user} ({', '.join(mechanisms)})")
    return await _users(context)


async def delete_user(context, api: ApiRequest) -> dict:
    user = api.params["user"]
    await auth.authorize(api, _ALTER)
    if not await UserStore(context.zk).delete(user):
        raise ApiError(404, f"user {user!r} does not exist")
    if context.zk.credentials is not None:
        await forget_user_digest(context.zk, user)
    api.changed(f"deleted user {user}")
    return await _users(context)


def _acl_json(pattern: ResourcePattern, entry: AccessControlEntry) -> dict:
    return {"principal": entry.principal, "host": entry.host, "operation": entry.operation.value,
            "permission": entry.permission.value, "resource_type": pattern.resource_type.value,
            "resource_name": pattern.name, "pattern_type": pattern.pattern_type.value}


def _enum(enum, text: Any, parameter: str, default=None):
    if text is None and default is not None:
        return default
    for member in enum:
        if isinstance(text, str) and member.value.lower() == text.lower():
            return member
    raise bad_parameter(parameter, f"{str(text)[:40]!r} is not one of {', '.join(m.value for m in enum)}")


async def list_acls(context, api: ApiRequest) -> dict:
    principal = api.arg("principal")
    resource_type = _enum(ResourceType, api.arg("resource_type"), "resource_type") if api.has("resource_type") \
        else None
    name = api.arg("resource_name") or None
    offset = api.int_arg("offset", 0, low=0)
    limit = api.int_arg("limit", DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
    await auth.authorize(api, _DESCRIBE)
    rows = []
    for pattern, entries in sorted((await read_acls(context.zk)).items()):
        if resource_type is not None and pattern.resource_type is not resource_type:
            continue
        if name is not None and pattern.name != name and not pattern.matches(pattern.resource_type, name):
            continue
        rows += [_acl_json(pattern, e) for e in sorted(entries) if principal in (None, "", e.principal)]
    return {"total": len(rows), "offset": offset, "limit": limit, "acls": rows[offset:offset + limit]}


def _binding(api: ApiRequest) -> AclBinding:
    """The one ACL a request's body names (C{host} C{*}, C{permission} Allow and C{pattern_type} LITERAL by
    default; a Cluster's name is C{kafka-cluster}).  @raise ApiError: 400 naming what is wrong."""
    body = _body(api, '{"principal", "operation", "resource_type", "resource_name", ...}')
    try:
        principal = parse_principal(body.get("principal") if isinstance(body.get("principal"), str) else "")
    except AclError as e:
        raise bad_parameter("principal", str(e)) from None
    try:
        operation = parse_operation(str(body.get("operation")))
    except AclError as e:
        raise bad_parameter("operation", str(e)) from None
    permission = _enum(Permission, body.get("permission"), "permission", Permission.ALLOW)
    resource_type = _enum(ResourceType, body.get("resource_type"), "resource_type")
    pattern_type = _enum(PatternType, body.get("pattern_type"), "pattern_type", PatternType.LITERAL)
    name = body.get("resource_name")
    if resource_type is ResourceType.CLUSTER:
        name = name or CLUSTER_NAME
        if name != CLUSTER_NAME or pattern_type is not PatternType.LITERAL:
            raise bad_parameter("resource_name", f"the cluster's ACLs are on the literal {CLUSTER_NAME!r}")
    host = body.get("host") or ALL_HOSTS
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise bad_parameter("resource_name", "a topic or group name (or * for all, or a prefix), without '/'")
    if not isinstance(host, str):
        raise bad_parameter("host", "an address, or * for every host")
    try:
        return AclBinding(ResourcePattern(resource_type, name, pattern_type),
                          AccessControlEntry(principal, permission, operation, host))
    except AclError as e:
        raise bad_parameter("operation", str(e)) from None


async def add_acl(context, api: ApiRequest) -> dict:
    binding = _binding(api)
    await auth.authorize(api, _ALTER)
    entries = await change_acls(context.zk, binding.pattern, add=[binding.entry])
    await secure_group_nodes(context.zk, [binding.pattern])
    api.changed(f"added ACL {binding.entry} on `{binding.pattern}`")
    return {"acls": [_acl_json(binding.pattern, e) for e in sorted(entries)]}


async def remove_acl(context, api: ApiRequest) -> dict:
    binding = _binding(api)
    await auth.authorize(api, _ALTER)
    if binding.entry not in (await read_acls(context.zk)).get(binding.pattern, ()):
        raise ApiError(404, f"no ACL {binding.entry} on `{binding.pattern}`")
    entries = await change_acls(context.zk, binding.pattern, remove=[binding.entry])
    await secure_group_nodes(context.zk, [binding.pattern])
    api.changed(f"removed ACL {binding.entry} from `{binding.pattern}`")
    return {"acls": [_acl_json(binding.pattern, e) for e in sorted(entries)]}
