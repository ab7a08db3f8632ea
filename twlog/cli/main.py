# -*- test-case-name: tests.cli.test_main,tests.integration.test_cli -*-
"""The C{twlog} command: one entry point, a subcommand per job, C{--help} on each.

User mistakes end in one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import import_module

from twlog import __version__
from twlog.cli.acls_parsers import add_acl_commands
from twlog.cli.benches import add_bench_commands
from twlog.cli.formats import format_option
from twlog.cli.mirror_parsers import add_consume_audit_option, add_mirror_commands, add_produce_audit_option
from twlog.cli.options import (
    DEFAULT_BROKERS,
    broker_list,
    offset_option,
    partition_count,
    partition_option,
    time_option,
    topic_name,
    zookeeper_address,
)
from twlog.cli.parsing import Parser, positive_int, positive_option, subcommand
from twlog.cli.registry_parsers import add_registry_options
from twlog.cli.sasl_parsers import add_sasl_options
from twlog.cli.tls_parsers import add_tls_options
from twlog.cli.user_parsers import add_user_commands
from twlog.cli.zk_options import read_zookeeper_credentials
from twlog.errors import TwlogError
from twlog.protocol.codec import LATEST
from twlog.storage.kernel import KERNEL
from twlog.storage.manager import MAX_PARTITIONS


def _line_count(text: str) -> int:
    """C{--skip-lines}: a whole number of lines, 0 or more (C{12,000} and C{12_000} too)."""
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = Parser(
        prog="twlog",
        description="twlog: a distributed, log-structured publish/subscribe system on Twisted.",
    )
    parser.add_argument("--version", action="version", version=f"twlog {__version__} (kernel: {KERNEL})")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error, not just its one line")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    commands.required = True

    def debug_option(command) -> None:
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="show the traceback of an error, not just its one line")

    def client_command(name: str, run: str, help_text: str, description: str, parent=commands, inherit: bool = False):
        """A subcommand, a coroutine C{run} under C{task.react}, that finds the cluster through --broker (any of its
        brokers) or --zookeeper.

        With C{inherit} (an action of such a command) an option left out keeps the command's value.
        """
        command = subcommand(parent, name, run, help_text, description, react=True)
        command.add_argument(
            "--broker", "-b", default=argparse.SUPPRESS if inherit else DEFAULT_BROKERS, type=broker_list,
            metavar="HOST:PORT[,...]", help="any broker(s) of the cluster (default: --client-config's "
            "bootstrap.servers, else localhost:9092)",
        )
        command.add_argument("--zookeeper", "-z", default=argparse.SUPPRESS if inherit else None,
                             type=zookeeper_address, metavar="HOST:PORT[/chroot]",
                             help="find the brokers and partitions in ZooKeeper instead of through --broker")
        add_tls_options(command, inherit)
        add_sasl_options(command, inherit)
        debug_option(command)
        return command

    def topic_option(command) -> None:
        command.add_argument("--topic", "-t", required=True, type=topic_name,
                             help="the topic (letters, digits, '.', '_' and '-')")

    def partition_option_of(command, what: str) -> None:
        command.add_argument("--partition", "-p", type=partition_option, default=None, metavar="B-P|INDEX",
                             help=f"{what}: BROKER-PARTITION as `twlog topics` shows it (e.g. 0-1), or an index "
                             "over the topic's partitions ordered by broker and partition")

    def allow_partial_option(command) -> None:
        command.add_argument("--allow-partial", action="store_true",
                             help="when a broker holding some of the topic's partitions is down, read the others and "
                             "say on stderr what is left out (default: fail, naming the broker and its partitions)")

    def json_option(command) -> None:
        command.add_argument("--json", action="store_true", help="print JSON (for scripts) instead of a table")

    produce = client_command(
        "produce", "twlog.cli.produce:produce",
        "send lines of stdin or files to a topic, one message per line",
        "Send each line of the input (stdin, or the files named) to TOPIC as one message, in batches of "
        "--batch-size messages per request, and return once the brokers have flushed them (visible to consumers).",
    )
    topic_option(produce)
    produce.add_argument("--key", "-k", default=None,
                         help="partitioning key: every message goes to the partition this key maps to")
    produce.add_argument("--key-separator", "-K", default=None, metavar="SEP",
                         help="each line is KEY SEP VALUE: send VALUE, partitioned by KEY (lines without SEP: --key)")
    partition_option_of(produce, "send every message to this partition")
    positive_option(produce, "--batch-size", default=200, help="messages per request")
    produce.add_argument("--skip-lines", type=_line_count, default=0, metavar="N",
                         help="skip the input's first N lines: resume where a failed run says it stopped")
    produce.add_argument("--ack", choices=["appended", "flushed", "all"], default="flushed",
                         help="what each batch waits for: flushed (visible to consumers; default), appended, or all "
                         "(a replicated partition's every in-sync replica holds it; as flushed on an unreplicated one)")
    produce.add_argument("--no-wait", action="store_true",
                         help="fire and forget: do not wait for the brokers (messages may not be visible yet)")
    produce.add_argument("--codec", choices=["none", "gzip", "snappy"], default="none",
                         help="compress each batch (default: none)")
    add_produce_audit_option(produce)
    produce.add_argument("--avro-schema", default=None, metavar="FILE",
                         help="read each line as JSON and send it in Avro with this schema (needs --registry)")
    produce.add_argument("--registry", default=None, metavar="URL",
                         help="the schema registry giving --avro-schema its id (subject <topic>-value)")
    add_registry_options(produce)
    produce.add_argument("files", nargs="*", metavar="FILE", help="files to send (default: stdin)")

    consume = client_command(
        "consume", "twlog.cli.consume:consume",
        "print a topic's messages (every partition, or one), one per line",
        "Print the messages of every partition of TOPIC in the cluster (or of --partition), interleaved, from "
        "--offset up to the end (or forever with --follow). With --group (and --zookeeper), consume as a member of "
        "a consumer group instead: partitions shared with its other members, offsets kept in ZooKeeper.",
    )
    consume.add_argument("--group", "-g", default=None, help="the consumer group to join (needs --zookeeper)")
    consume.add_argument("--streams", type=positive_int, default=1,
                         help="message streams of this member (with --group; default: 1)")
    topic_option(consume)
    partition_option_of(consume, "read only this partition")
    allow_partial_option(consume)
    consume.add_argument("--offset", "-o", default="earliest", type=offset_option,
                         help="earliest, latest, or a byte offset of --partition from a previous run (default: "
                         "earliest); with --group, where a new group starts: earliest or latest")
    consume.add_argument("--max-messages", "-n", type=positive_int, default=None, help="stop after N messages")
    consume.add_argument("--follow", "-f", action="store_true",
                         help="keep waiting for new messages (the broker wakes the consumer)")
    consume.add_argument("--max-bytes", type=positive_int, default=300 * 1024,
                         help="bytes per fetch (default: 300 KiB)")
    consume.add_argument("--skip-corrupt", action="store_true",
                         help="skip a corrupt stored message (logged with its byte range) instead of stopping at it "
                         "with an error naming its offsets (exit status 1)")
    consume.add_argument("--registry", default=None, metavar="URL",
                         help="decode Avro messages (Confluent's wire format) with this schema registry: one JSON "
                         "line each (with --json, the record is the object in \"value\")")
    add_registry_options(consume)
    shown = consume.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true",
                       help="one JSON object per message: topic, partition, offset, value (text, or base64 with "
                       '"encoding": "base64")')
    shown.add_argument("--format", "-F", type=format_option, default=None, metavar="FORMAT",
                       help=r"print each message as FORMAT: %%t topic, %%p partition, %%o offset, %%s value, "
                       r"%%S size, \n, \t (e.g. '%%p %%o %%s\n')")
    add_consume_audit_option(consume)

    offsets = client_command(
        "offsets", "twlog.cli.inspect:offsets",
        "print valid offsets of a topic's partitions (latest, earliest, or before a time)",
        "Print the offsets OFFSETS answers, newest first: the latest (flushed end), the earliest, or the first "
        "offsets of segments last modified before a time; for --partition one per line, else a table of every "
        "partition of the topic.",
    )
    topic_option(offsets)
    partition_option_of(offsets, "only this partition")
    allow_partial_option(offsets)
    offsets.add_argument("--time", default=LATEST, type=time_option,
                         help="latest, earliest, milliseconds since the epoch or an ISO date/time such as "
                         "2024-05-01T12:00 (UTC) (default: latest)")
    positive_option(offsets, "--max", default=1, help="how many offsets at most")
    json_option(offsets)

    add_group_commands(commands, debug_option, json_option, topic_option, partition_option_of)

    topics = client_command("topics", "twlog.cli.inspect:topics",
                            "list the cluster's topics, describe, create or delete one",
                            "With no action: list each topic of the cluster with its partitions and their brokers "
                            "(with --topic: describe that topic, as `twlog topics describe`). `twlog topics create "
                            "--help` creates a topic, `twlog topics delete --help` deletes one.")
    topics.add_argument("--topic", "-t", default=None, type=topic_name,
                        help="describe only this topic (as `twlog topics describe --topic`)")
    json_option(topics)
    actions = topics.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    describe = client_command(
        "describe", "twlog.cli.inspect:describe_topic",
        "one topic's partitions: leader broker and address, earliest and latest offset, size",
        "Describe TOPIC: each partition with the broker that leads it (its id and address), its earliest and "
        "latest (flushed end) offsets, and its size in bytes of log (latest - earliest: offsets are byte positions). "
        "A replicated topic: each partition's leader, leader epoch, replicas and in-sync replicas (ISR).",
        parent=actions, inherit=True,
    )
    topic_option(describe)
    describe.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                          help="print JSON (for scripts) instead of a table")
    delete = client_command(
        "delete", "twlog.cli.inspect:delete_topic",
        "delete a topic: its logs on every broker that holds it, and its registrations",
        "Delete TOPIC on every broker that holds it: each removes the topic's logs and its ZooKeeper registration. "
        "Refused while a consumer group reads it (a live member subscribed to it), unless --force. Committed "
        "offsets of the topic (/consumers/<group>/offsets/TOPIC) are deleted with it when --zookeeper is given, "
        "so a topic created again under the same name starts its groups afresh.",
        parent=actions, inherit=True,
    )
    topic_option(delete)
    delete.add_argument("--force", action="store_true",
                        help="delete even while a consumer group has live members subscribed to the topic")
    delete.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print JSON (for scripts) instead of a sentence")
    create = client_command(
        "create", "twlog.cli.inspect:create_topic",
        "create a topic: N partitions on each broker, or with --replication-factor N in all, each on R brokers",
        "Without --replication-factor: create TOPIC on every live broker of the cluster (found through --broker "
        "or --zookeeper), with N partitions on each: partitions are per broker, as in Kafka 0.7, so 2 brokers and "
        "--partitions 2 make 4 partitions in all. Each broker keeps the count across restarts and registers the "
        "topic in ZooKeeper. Asking again with the same N changes nothing; another N is refused. "
        "With --replication-factor R: a replicated topic, as in Kafka 0.8: --partitions N counts its partitions "
        "in all, named 0 to N-1, each on R of the live brokers (leaders and replicas spread evenly). It is "
        "created in ZooKeeper, so it needs --zookeeper; the controller then elects each partition's leader.",
        parent=actions, inherit=True,
    )
    topic_option(create)
    create.add_argument("--partitions", "-n", required=True, type=partition_count, metavar="N",
                        help=f"partitions on each broker (1 to {MAX_PARTITIONS}); the topic gets N x brokers in all. "
                        "With --replication-factor: partitions in all")
    create.add_argument("--replication-factor", "-r", type=positive_int, default=None, metavar="R",
                        help="make a replicated topic: each partition on R brokers (at most the live brokers; "
                        "needs --zookeeper)")
    create.add_argument("--min-insync-replicas", type=positive_int, default=None, metavar="M",
                        help="with --replication-factor: in-sync replicas an ack=all produce needs (default: the "
                        "brokers' --min-insync-replicas)")
    create.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print JSON (for scripts) instead of a sentence")

    add_broker_commands(commands, debug_option, json_option)
    add_user_commands(commands, debug_option, json_option)
    add_zookeeper_commands(commands, debug_option)
    add_acl_commands(commands, debug_option, json_option)

    # Their options are twistd's, which main() hands them before argparse sees them: these are for `twlog --help`.
    subcommand(commands, "broker", "twlog.cli.broker:main",
               "run one broker in the foreground (the options of twistd twlog)",
               "Run a broker until Ctrl-C or SIGTERM; `twlog broker --help` lists its options.", add_help=False)
    subcommand(commands, "registry", "twlog.cli.registry:main",
               "run the schema registry (Confluent's REST API for Avro) in the foreground",
               "Run the schema registry until Ctrl-C or SIGTERM; `twlog registry --help` lists its options.",
               add_help=False)
    subcommand(commands, "console", "twlog.cli.console:main",
               "run the web console (topics, messages, groups, brokers) in the foreground",
               "Run the web console until Ctrl-C or SIGTERM; `twlog console --help` lists its options.",
               add_help=False)

    local = subcommand(
        commands, "local", "twlog.cli.local:run_local", "run ZooKeeper and N brokers on this machine until Ctrl-C",
        "Start a real ZooKeeper server and --brokers brokers on 127.0.0.1, with all their data under "
        "--data, print how to produce and consume, and stop everything cleanly on Ctrl-C.", react=True,
    )
    positive_option(local, "--brokers", default=1, help="how many brokers")
    local.add_argument("--data", default="twlog-local", help="directory for all data (default: ./twlog-local)")
    positive_option(local, "--port", default=9092,
                       help="the first broker's port; broker N listens on PORT+N")
    positive_option(local, "--zookeeper-port", default=2181,
                       help="ZooKeeper's port")
    positive_option(local, "--num-partitions", default=4,
                       help="partitions of a new topic on each broker")
    positive_option(local, "--flush-interval-ms", default=200,
                       help="the longest produced messages wait to become visible")
    local.add_argument("--flush-policy", choices=["group", "timer"], default="group",
                       help="group: fsync as soon as the last fsync returns (visible in about one fsync); timer: "
                       "wait for --flush-interval-ms (default: group)")
    local.add_argument("--metrics-port", type=positive_int, default=None, metavar="PORT",
                       help="the first broker's Prometheus metrics port; broker N serves "
                       "http://127.0.0.1:PORT+N/metrics (default: --port + 100, so 9192)")
    local.add_argument("--no-metrics", action="store_true", help="serve no metrics")
    positive_option(local, "--replication-factor", default=1,
                    help="new topics are replicated on this many brokers, with --num-partitions per broker in all "
                    "(1: unreplicated 0.7 topics; at most --brokers)")
    positive_option(local, "--min-insync-replicas", default=1,
                    help="in-sync replicas an ack=all produce to a replicated topic needs")
    local.add_argument("--console", action="store_true",
                       help="serve the web console beside the cluster, at http://127.0.0.1:CONSOLE-PORT/ "
                       "(docs/console.md)")
    positive_option(local, "--console-port", default=8080, help="the console's port, with --console")
    local.add_argument("--secure", action="store_true",
                       help="a secured cluster: a CA made for it, TLS (broker N's TLS port is --port + --brokers + N), "
                       "SASL required on every port, ACLs on, ZooKeeper ACLs, and an admin super user whose settings "
                       "go to DATA/client.properties (docs/security.md)")

    add_mirror_commands(commands, debug_option)
    add_bench_commands(commands)
    return parser


def add_group_commands(commands, debug_option, json_option, topic_option, partition_option_of) -> None:
    """C{twlog groups} (describe, the default), C{twlog groups reset} and C{twlog groups delete}."""
    groups = subcommand(
        commands, "groups", "twlog.cli.groups:describe",
        "describe consumer groups (members, owners, offsets, lag), reset their offsets or delete them",
        "With no action (or `describe`): for every consumer group (or --group), its members and, per "
        "partition, the owning stream, the committed offset, the broker's latest offset and the lag. A partition "
        "whose broker is down or does not answer shows its committed offset and lag '?', with a note naming the "
        "broker; the total lag leaves it out and says so.", react=True,
    )
    actions = groups.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)

    def zookeeper_options(command, required_group: bool, brokers: bool = True, inherit: bool = True) -> None:
        command.add_argument("--zookeeper", "-z", default="localhost:2181", type=zookeeper_address,
                             metavar="HOST:PORT[/chroot]", help="ZooKeeper (default: localhost:2181)")
        command.add_argument("--group", "-g", default=None, required=required_group,
                             help="the group" if required_group else "only this group")
        if brokers:  # (the latest offsets are asked of the brokers: their TLS and SASL)
            add_tls_options(command, inherit)
            add_sasl_options(command, inherit)
        debug_option(command)

    zookeeper_options(groups, False, inherit=False)
    json_option(groups)
    describe = subcommand(actions, "describe", "twlog.cli.groups:describe",
                          "members, owners, committed offsets and lag per partition", groups.description, react=True)
    zookeeper_options(describe, False)
    json_option(describe)
    reset = subcommand(
        actions, "reset", "twlog.cli.groups:reset", "set a stopped group's committed offsets of a topic",
        "Set the committed offset of each partition of TOPIC (or --partition) for GROUP: to the earliest "
        "or latest offset, to the first offset of the segments written before a time, or to a byte offset (with "
        "--partition; the partition's broker must confirm that a message starts there, or that it is the end), or "
        "shift each committed offset by N messages (--shift). "
        "Prints the old and new offset of each partition. Refused while the group has live members (stop them "
        "first), and for a group that does not exist unless --create.", react=True,
    )
    zookeeper_options(reset, True)
    topic_option(reset)
    partition_option_of(reset, "only this partition")
    where = reset.add_mutually_exclusive_group(required=True)
    where.add_argument("--to", type=reset_target, metavar="earliest|latest|TIME|OFFSET",
                       help="earliest, latest, a time (ISO date/time such as 2024-05-01T12:00, UTC) or, with "
                       "--partition, a byte offset where a message starts (or the partition's end)")
    where.add_argument("--shift", type=int, metavar="N",
                       help="move each committed offset N messages forward (negative: back), stopping at the "
                       "log's earliest offset or end (and saying so)")
    reset.add_argument("--dry-run", action="store_true", help="print the old and new offsets; change nothing")
    reset.add_argument("--create", action="store_true",
                       help="start a new group if there is none of that name (without it, an unknown group is "
                       "refused, naming the nearest existing one)")
    reset.add_argument("--allow-partial", action="store_true",
                       help="when the group has offsets on a broker that is down, reset the other partitions and "
                       "say which were left out (without it, refused)")
    delete = subcommand(
        actions, "delete", "twlog.cli.groups:delete", "delete a stopped group: its committed offsets and owners",
        "Delete GROUP's nodes in ZooKeeper (/consumers/GROUP: committed offsets, owners, member registry). "
        "Refused while the group has live members: stop them first.", react=True,
    )
    zookeeper_options(delete, True, brokers=False)


def add_broker_commands(commands, debug_option, json_option) -> None:
    """C{twlog brokers} (list live and down brokers) and C{twlog brokers forget}."""
    brokers = subcommand(
        commands, "brokers", "twlog.cli.brokers:brokers",
        "list the brokers ZooKeeper knows, live or down, with the partitions each holds; or forget a retired one",
        "List every broker: live ones (registered) with their address, and down ones (remembered because they held "
        "partitions) whose partitions cannot be read until they come back. `twlog brokers forget --help` removes "
        "a broker retired for good.", react=True,
    )

    def zookeeper_option(command) -> None:
        command.add_argument("--zookeeper", "-z", default="localhost:2181", type=zookeeper_address,
                             metavar="HOST:PORT[/chroot]", help="ZooKeeper (default: localhost:2181)")
        debug_option(command)

    zookeeper_option(brokers)
    json_option(brokers)
    actions = brokers.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    forget = subcommand(
        actions, "forget", "twlog.cli.brokers:forget", "forget a down broker retired for good",
        "Remove what ZooKeeper remembers of a broker that is down (not registered): its partitions are then no "
        "longer part of their topics, so readers stop failing on them. Its log directory is not touched, and "
        "starting it again brings them back. A live broker is refused.", react=True,
    )
    zookeeper_option(forget)
    forget.add_argument("--broker-id", type=int, required=True, metavar="N", help="the broker to forget")


def add_zookeeper_commands(commands, debug_option) -> None:
    """C{twlog zookeeper secure}: set a secured cluster's ACLs on the znodes made before it had credentials."""
    zookeeper = subcommand(commands, "zookeeper", "twlog.cli.zookeeper:secure",
                           "secure an existing cluster's znodes with ACLs (Kafka's zookeeper-security-migration)",
                           "Actions on the cluster's ZooKeeper tree.")
    actions = zookeeper.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    actions.required = True
    secure = subcommand(
        actions, "secure", "twlog.cli.zookeeper:secure", "set the ACLs of a secured cluster on every znode",
        "Set, recursively, the ACL of every znode of the cluster (its chroot; without one, every top-level node "
        "but ZooKeeper's /zookeeper): the identity of --zookeeper-credentials-file (the brokers') may do "
        "anything, everyone may read, except credentials (/config/users, /twlog/zookeeper-digests); a consumer "
        "group keeps the members its ACL names (docs/security.md, ZooKeeper).", react=True,
    )
    secure.add_argument("--zookeeper", "-z", default="localhost:2181", type=zookeeper_address,
                        metavar="HOST:PORT[/chroot]", help="ZooKeeper (default: localhost:2181)")
    secure.add_argument("--unsecure", action="store_true",
                        help="open every znode to everyone again (as Kafka's zookeeper.acl=unsecure)")
    debug_option(secure)


def reset_target(text: str) -> str | int | tuple[str, int]:
    """C{--to}: C{earliest}, C{latest}, C{("time", ms)} for an ISO date/time, or a byte offset."""
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return int(text)
    try:
        return ("time", time_option(text))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"--to {text!r} is not earliest, latest, an ISO date/time (2024-05-01T12:00) or a byte offset"
        ) from None


def command_list(parser: argparse.ArgumentParser) -> str:
    """What a bare C{twlog} prints: the usage line, then each command with its one line of help."""
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    width = max(map(len, helps))
    lines = [f"usage: {parser.prog} COMMAND [options]   ({parser.prog} COMMAND --help lists a command's options)",
             "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in helps.items()]
    return "\n".join(lines)


#: Runs a client command's coroutine under C{task.react} (L{twlog.cli.common.run}).
RUNNER = "twlog.cli.common:run"


def _load(target: str):
    """The function a C{"module:function"} string names, its module imported only now (C{--help} stays fast)."""
    module_name, _, function_name = target.partition(":")
    return getattr(import_module(module_name), function_name)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the C{twlog} command; return its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["broker"]:  # its options are twistd twlog's (twisted.python.usage), parsed by it
        return _load("twlog.cli.broker:main")(argv[1:])
    if argv[:1] == ["registry"]:  # the same for twistd twlog-registry's options
        return _load("twlog.cli.registry:main")(argv[1:])
    if argv[:1] == ["console"]:  # and twistd twlog-console's
        return _load("twlog.cli.console:main")(argv[1:])
    parser = build_parser()
    if not argv:  # as git does: what there is to run, then a usage error's exit status
        print(command_list(parser), file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        read_zookeeper_credentials(args)
        if getattr(args, "client_config", None) and getattr(args, "broker", None) is DEFAULT_BROKERS:
            _load("twlog.cli.tls_options:apply_bootstrap_servers")(args)
    except TwlogError as e:
        print(f"twlog: {e}", file=sys.stderr)
        return 1
    function = _load(args.run)
    if getattr(args, "react", False):
        return _load(RUNNER)(function, args)
    try:
        return function(args)
    except (TwlogError, OSError) as e:
        print(f"twlog: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("twlog: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
