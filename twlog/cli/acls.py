# -*- test-case-name: tests.cli.test_acls,tests.integration.test_acls -*-
"""C{twlog acls add|remove|list}: the ACLs in ZooKeeper, as Kafka's C{kafka-acls} manages them.

C{add} allows (C{--allow-principal}) or denies (C{--deny-principal}) each principal each C{--operation} (All
by default) on each resource (C{--topic}, C{--group}, C{--cluster}), from each host (C{--allow-host},
C{--deny-host}; C{*} by default); C{remove} takes out what the same options would add, or, with no principal,
every ACL of the resources, after asking (C{--force}: without); C{list} prints them.  Each change is a
compare-and-set on the pattern's node (L{twlog.coord.acls.change_acls}): concurrent changes lose nothing.  With
the cluster's C{--zookeeper-credentials-file}, a change of a group's ACLs also sets its znodes' ACL
(L{secure_groups}).
"""

from __future__ import annotations

import sys

from twlog.cli.common import UsageError
from twlog.cli.output import print_json
from twlog.cli.zk_session import zookeeper_session
from twlog.coord.acls import change_acls, read_acls, secure_group_nodes
from twlog.coord.zk import IZooKeeper
from twlog.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
    parse_principal,
)
from twlog.security.acls import parse_operation as parse_acl_operation


def parse_operation(text: str) -> Operation:
    """An operation by Kafka's name, in any case, with or without C{_} (C{Write}, C{cluster_action})."""
    return parse_acl_operation(text, "--operation")


def patterns(args, pattern_type: PatternType) -> list[ResourcePattern]:
    """The resource patterns C{--topic}, C{--group} and C{--cluster} name."""
    found = [ResourcePattern(ResourceType.TOPIC, name, pattern_type) for name in args.topic]
    found += [ResourcePattern(ResourceType.GROUP, name, pattern_type) for name in args.group]
    if args.cluster:
        found.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    return found


def entries(args) -> set[AccessControlEntry]:
    """The entries C{--allow-principal}, C{--deny-principal}, their hosts and C{--operation} make."""
    for hosts, principals, kind in ((args.allow_host, args.allow_principal, "allow"),
                                    (args.deny_host, args.deny_principal, "deny")):
        if hosts and not principals:
            raise UsageError(f"--{kind}-host needs --{kind}-principal")
    operations = [parse_operation(text) for text in args.operation] or [Operation.ALL]
    return {AccessControlEntry(parse_principal(principal), permission, operation, host)
            for principals, hosts, permission in ((args.allow_principal, args.allow_host, Permission.ALLOW),
                                                  (args.deny_principal, args.deny_host, Permission.DENY))
            for principal in principals for host in hosts or ["*"] for operation in operations}


def _bindings(args) -> tuple[list[ResourcePattern], set[AccessControlEntry]]:
    found = patterns(args, PatternType(args.resource_pattern_type.upper()))
    if not found:
        raise UsageError(f"twlog acls {args.action} needs a resource: --topic, --group or --cluster")
    made = entries(args)
    for pattern in found:
        for entry in made:
            AclBinding(pattern, entry)  # (an operation the resource type does not take is refused)
    return found, made


def _print_acls(title: str, pattern: ResourcePattern, acls) -> None:
    print(f"{title} `{pattern}`:")
    for entry in sorted(acls):
        print(f"\t{entry}")


async def add(reactor, args) -> None:
    """Add the ACLs the options make to each resource; print each resource's ACLs after."""
    found, made = _bindings(args)
    if not made:
        raise UsageError("twlog acls add needs --allow-principal or --deny-principal")
    zk = await zookeeper_session(reactor, args)
    try:
        for pattern in found:
            _print_acls("Adding ACLs for resource", pattern, made)
            _print_acls("Current ACLs for resource", pattern, await change_acls(zk, pattern, add=made))
        await secure_groups(zk, found)
    finally:
        await zk.stop()


def confirm(question: str, stdin=None) -> bool:
    """Ask C{question} on the terminal, as kafka-acls does; refused in one line when stdin is not a terminal."""
    stdin = stdin if stdin is not None else sys.stdin
    if not stdin.isatty():
        raise UsageError("twlog acls remove asks before removing, and stdin is not a terminal: add --force")
    print(f"{question} (y/n)", end=" ", flush=True)
    return stdin.readline().strip().lower() in ("y", "yes")


async def remove(reactor, args) -> None:
    """Remove the ACLs the options make (every ACL of the resources, with no principal), after asking."""
    found, made = _bindings(args)
    if not args.force:
        listed = ", ".join(f"`{p}`" for p in found)
        what = "all ACLs" if not made else "ACLs:\n" + "\n".join(f"\t{e}" for e in sorted(made)) + "\n"
        if not confirm(f"Are you sure you want to remove {what} from resource {listed}?"):
            print("nothing removed")
            return
    zk = await zookeeper_session(reactor, args)
    try:
        for pattern in found:
            if made:
                left = await change_acls(zk, pattern, remove=made)
            else:
                left = await change_acls(zk, pattern, remove=(await read_acls(zk)).get(pattern, ()))
            _print_acls("Current ACLs for resource", pattern, left)
        await secure_groups(zk, found)
    finally:
        await zk.stop()


async def secure_groups(zk: IZooKeeper, changed: list[ResourcePattern]) -> None:
    """In a secured ZooKeeper (the command has the cluster's credentials): give the nodes of each group whose
    Group ACLs changed the ZooKeeper ACL their Read ACLs make (L{secure_group_nodes}), saying so."""
    for group, principals, count in await secure_group_nodes(zk, changed):
        print(f"ZooKeeper ACL of group {group}'s nodes ({count}): writable by the cluster"
              + (f" and {', '.join(principals)}" if principals else " alone"))


def _selected(pattern: ResourcePattern, wanted: list[ResourcePattern], how: str | None) -> bool:
    if not wanted:
        return how in (None, "any", "match") or pattern.pattern_type.value == how.upper()
    for resource in wanted:
        if how == "match":
            if pattern.matches(resource.resource_type, resource.name):
                return True
        elif (pattern.resource_type, pattern.name) == (resource.resource_type, resource.name) and (
                how == "any" or pattern.pattern_type.value == (how or "literal").upper()):
            return True
    return False


async def list_acls(reactor, args) -> None:
    """Print the ACLs of the resources named (all without one), a table or C{--json}."""
    topics, groups, cluster = getattr(args, "topic", []), getattr(args, "group", []), getattr(args, "cluster", False)
    how = getattr(args, "resource_pattern_type", None)
    wanted = [ResourcePattern(ResourceType.TOPIC, name) for name in topics]
    wanted += [ResourcePattern(ResourceType.GROUP, name) for name in groups]
    wanted += [ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME)] if cluster else []
    principals = set(map(parse_principal, getattr(args, "principal", [])))
    zk = await zookeeper_session(reactor, args)
    try:
        stored = await read_acls(zk)
    finally:
        await zk.stop()
    shown = {}
    for pattern, acls in sorted(stored.items()):
        kept = {e for e in acls if not principals or e.principal in principals}
        if kept and _selected(pattern, wanted, how):
            shown[pattern] = kept
    if args.json:
        print_json([{"resourceType": p.resource_type.value, "name": p.name, "patternType": p.pattern_type.value,
                     "acls": [e.to_json() for e in sorted(acls)]} for p, acls in shown.items()])
        return
    if not shown:
        print("(no ACLs)")
    for pattern, acls in shown.items():
        _print_acls("Current ACLs for resource", pattern, acls)
        print()
