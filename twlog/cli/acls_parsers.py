"""The parsers of C{twlog acls add|remove|list}, in the vocabulary of Kafka's C{kafka-acls} (L{twlog.cli.acls})."""

from __future__ import annotations

from twlog.cli.options import zookeeper_address
from twlog.cli.parsing import Parser, subcommand
from twlog.security.acls import Operation

OPERATIONS = ", ".join(o.value for o in Operation)


def add_acl_commands(commands, debug_option, json_option) -> None:
    """C{twlog acls add}, C{twlog acls remove} and C{twlog acls list}."""
    acls = subcommand(
        commands, "acls", "twlog.cli.acls:list_acls",
        "add, remove or list the ACLs (who may do what on topics, groups and the cluster), as kafka-acls",
        "Manage the ACLs in ZooKeeper that brokers started with --acls enforce (docs/security.md, "
        "\"Authorization\"): `twlog acls add --allow-principal User:bob --operation Write --topic clicks`. "
        "With no action: list them all.", react=True)
    _common(acls, debug_option)
    json_option(acls)
    actions = acls.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    add = subcommand(actions, "add", "twlog.cli.acls:add", "add ACLs",
                     "Allow (--allow-principal) or deny (--deny-principal) each principal each --operation on each "
                     "resource, from each host. A Deny wins over any Allow; a principal no ACL allows is refused.",
                     react=True)
    remove = subcommand(actions, "remove", "twlog.cli.acls:remove", "remove ACLs",
                        "Remove the ACLs the same options would add; with no principal, every ACL of the resources. "
                        "Asks first unless --force.", react=True)
    for command in (add, remove):
        _common(command, debug_option)
        _resources(command, required=True)
        command.add_argument("--resource-pattern-type", type=str.lower, choices=("literal", "prefixed"),
                             default="literal", help="literal: the resource named (--topic '*': every topic); "
                             "prefixed: every resource whose name starts with it (default: literal)")
        command.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                             help="allow this principal (User:bob; User:* for everyone); repeatable")
        command.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL",
                             help="deny this principal; repeatable")
        command.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                             help="the address the allowed principals connect from (default: *, any); repeatable")
        command.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                             help="the address the denied principals connect from (default: *, any); repeatable")
        command.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                             help=f"one of {OPERATIONS} (default: All); repeatable")
    remove.add_argument("--force", action="store_true", help="remove without asking")
    listing = subcommand(actions, "list", "twlog.cli.acls:list_acls", "list ACLs",
                         "List the ACLs of the resources named (all without one), with --resource-pattern-type "
                         "literal (the default with a resource), prefixed, any (every pattern of that name) or match "
                         "(every pattern that covers the resource, as the brokers decide).", react=True)
    _common(listing, debug_option)
    json_option(listing)
    _resources(listing, required=False)
    listing.add_argument("--resource-pattern-type", type=str.lower, choices=("literal", "prefixed", "any", "match"),
                         default=None, help="which patterns to list (default: literal with a resource, else all)")
    listing.add_argument("--principal", action="append", default=[], metavar="PRINCIPAL",
                         help="only this principal's ACLs; repeatable")


def _common(command, debug_option) -> None:
    command.add_argument("--zookeeper", "-z", default="localhost:2181", type=zookeeper_address,
                         metavar="HOST:PORT[/chroot]",
                         help="ZooKeeper, where the ACLs are kept (default: localhost:2181)")
    debug_option(command)


def _resources(command, *, required: bool) -> None:
    what = "required: one at least" if required else "default: all"
    command.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                         help=f"a topic ('*': every topic); repeatable ({what} of --topic, --group, --cluster)")
    command.add_argument("--group", action="append", default=[], metavar="GROUP",
                         help="a consumer group ('*': every group); repeatable")
    command.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
