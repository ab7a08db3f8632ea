# -*- test-case-name: tests.cli.test_main -*-
"""The parsers of C{twlog bench BENCHMARK}: one function adds them all to the C{twlog} command.

Each benchmark's module is imported only when it runs (the C{run} default names it), so C{--help} stays fast.
"""

from __future__ import annotations

import argparse

from twlog.cli.parsing import (
    Parser,
    flush_policies,
    int_list,
    name_list,
    peer_systems,
    positive_int,
    positive_option,
    scenarios,
    subcommand,
)

#: The benchmarks that measure throughput, with the options they share (L{_throughput_options}):
#: name, help, description, default --fetch-bytes, its help, what --dir holds.
_THROUGHPUT_BENCHMARKS = [
    (
        "storage",
        "append and read back N messages through the storage engine (no network)",
        "Append N messages through a partition log in batches of each size given (CRC validation "
        "included, fsync on a thread pool as in the broker), read them back with 1 MB reads and "
        "decode every message; print msg/s, MB/s and bytes on disk per message.",
        1024 * 1024, "bytes per read when reading back (default: 1 MiB)", "where to write the logs",
    ),
    (
        "broker",
        "a broker process and one client over loopback: producer and consumer throughput",
        "Start a broker (twistd twlog) in its own process, produce N messages with one fire-and-forget "
        "Twisted producer for each batch size, then consume the last topic with fetches of --fetch-bytes; "
        "print msg/s, MB/s and the broker's CPU time (per GB fetched, showing sendfile at work).",
        200 * 1024, "comma-separated bytes per consumer fetch, e.g. 65536,262144,1048576,4194304; each is read "
        "through sendfile and through copying, side by side (default: 200 KiB, as in the paper)",
        "where the broker keeps its data",
    ),
]


#: The measurements of C{twlog bench replication}, in the order they run.
REPLICATION_PARTS = ["throughput", "failover", "catch-up"]
#: The fault cases of C{twlog bench faults} (L{twlog.bench.fault_loop.CASES}; listed here so C{--help} stays fast).
FAULT_CASES = ["kill-leader", "restart-follower", "slow-follower", "zombie-leader", "kip101-restart-then-leader-dies",
               "kip101-two-down-reverse-order", "controller-dies-in-election", "all-down", "sigterm-leader",
               "leader-cut-from-followers", "leader-answers-held", "follower-requests-dropped"]


def _benchmark(benches, name: str, help_text: str, description: str) -> argparse.ArgumentParser:
    """C{twlog bench NAME}, which runs C{main_NAME(args)} of L{twlog.bench}C{.NAME}."""
    # (twlog bench broker runs twlog.bench.broker_tls:main, which runs the plain benchmark without --tls)
    target = "twlog.bench.broker_tls:main" if name == "broker" else f"twlog.bench.{name}:main_{name}"
    return subcommand(benches, name, target, help_text, description)


def _messages_option(command: argparse.ArgumentParser, per: str) -> None:
    command.add_argument("--messages", "-n", type=positive_int, default=1_000_000,
                         help=f"messages{per} (default: 1,000,000)")


def _dir_option(command: argparse.ArgumentParser, holder: str) -> None:
    command.add_argument("--dir", default=None,
                         help=f"{holder} (default: a temporary directory, deleted afterwards)")


def _size_option(command: argparse.ArgumentParser) -> None:
    positive_option(command, "--size", default=200, help="payload bytes")


def _throughput_options(command: argparse.ArgumentParser, fetch_bytes: int, fetch_help: str, dir_help: str) -> None:
    """The options the storage and broker benchmarks share: how much, in which batches, read how, where."""
    _messages_option(command, " per batch size")
    _size_option(command)
    command.add_argument("--batch", type=int_list, default=[1, 50],
                         help="comma-separated batch sizes (default: 1,50)")
    command.add_argument("--fetch-bytes", type=int_list if "comma-separated" in fetch_help else positive_int,
                         default=[fetch_bytes] if "comma-separated" in fetch_help else fetch_bytes, help=fetch_help)
    _dir_option(command, dir_help)


def add_bench_commands(commands) -> None:
    """C{twlog bench} and its benchmarks, as subcommands of C{commands}."""
    bench = commands.add_parser("bench", help="run a benchmark and print a table",
                                description="Benchmarks that print tables.")
    benches = bench.add_subparsers(dest="bench", metavar="BENCHMARK", parser_class=Parser)
    benches.required = True

    for name, help_text, description, fetch_bytes, fetch_help, dir_help in _THROUGHPUT_BENCHMARKS:
        command = _benchmark(benches, name, help_text, description)
        _throughput_options(command, fetch_bytes, fetch_help, dir_help)
        command.add_argument("--codec", choices=["none", "gzip", "snappy"], default="none",
                             help="compress each batch into one wrapper, which the log validates on append "
                             "by decompressing it (default: none)")
        if name == "broker":
            command.add_argument("--rounds", type=positive_int, default=1,
                                 help="measure each consumption this many times, in turns; the table shows "
                                 "medians (default: 1)")
            command.add_argument("--tls", action="store_true",
                                 help="one broker with a plaintext and a TLS port (a CA made for the run): produce "
                                 "and consume (batch API, one fetch at a time and pipelined, each --fetch-bytes, "
                                 "--rounds turns) over both, one table with the TLS / plaintext ratio")
            command.add_argument("--produce-only", action="store_true",
                                 help="measure producing only (no consume rows, no restart without sendfile)")
            command.add_argument("--broker-source", metavar="DIR", default=None,
                                 help="run the broker from the twlog source tree DIR (put first on its "
                                 "PYTHONPATH), e.g. a 'git worktree' of an older commit, to compare versions")
            command.add_argument("--flush-policy", type=flush_policies, default=None, metavar="P[,P...]",
                                 help="produce only, against a broker per flush policy (group, timer; the broker's "
                                 "default flush settings), in this order: group,timer,group,timer interleaves them")

    rebalance = _benchmark(
        benches, "rebalance",
        "how long a consumer group takes to rebalance (local ZooKeeper, in-process brokers)",
        "Start a local ZooKeeper and in-process brokers, then time the paper's rebalance for "
        "--consumers group consumers over --partitions partitions: all joining at once, and one joining a "
        "stable group; print the times and the retries needed.",
    )
    positive_option(rebalance, "--consumers", default=10, help="group members")
    positive_option(rebalance, "--partitions", default=40, help="partitions in all")
    positive_option(rebalance, "--brokers", default=4, help="brokers")
    positive_option(rebalance, "--runs", default=3, help="runs per scenario")
    rebalance.add_argument("--backoff-ms", type=positive_int, default=500,
                           help="rebalance back-off after a conflict (default: 500, the consumers' default)")
    rebalance.add_argument("--scenario", type=scenarios, default=["start", "join"],
                           help="comma-separated: start (all join at once), join (default: start,join)")

    console = _benchmark(
        benches, "console",
        "how fast the web console answers with many topics and groups (local ZooKeeper, in-process broker)",
        "Start a local ZooKeeper and a broker in this process with --topics topics and --groups groups (committed "
        "offsets in ZooKeeper), then twlog console; ask each page and API route --requests times over HTTP and "
        "print each one's median and longest time.",
    )
    positive_option(console, "--topics", default=1000, help="topics (one partition each)")
    positive_option(console, "--groups", default=1000, help="groups (one committed offset each)")
    positive_option(console, "--requests", default=5, help="requests per page or route")

    faults = subcommand(
        benches, "faults", "twlog.bench.fault_loop:main_faults",
        "kill, pause and cut off replicated brokers under ack=all load, then check the history (lost writes...)",
        "Start a local ZooKeeper and 3 broker processes, a topic of 2 partitions with replication factor 3 and "
        "min.insync.replicas 2, and one ack=all producer per partition; run --cycles fault cycles (each a case "
        "of --cases against partition 0's leader, then heal and wait for full ISRs); then read every partition "
        "to its end and every replica's log, and check the history as Jepsen's Kafka checker does. Exit 1 on "
        "any anomaly (the history is kept).",
    )
    positive_option(faults, "--cycles", default=len(FAULT_CASES), help="fault cycles, the cases taken in turn")
    faults.add_argument("--cases", type=name_list("cases", FAULT_CASES), default=list(FAULT_CASES),
                        help=f"comma-separated, taken in turn (default: {','.join(FAULT_CASES)})")
    faults.add_argument("--seed", type=int, default=0, help="picks which follower a case hits (default: 0)")
    faults.add_argument("--session-timeout-s", type=float, default=4.0,
                        help="the brokers' ZooKeeper session timeout (default: 4)")
    _dir_option(faults, "where the cluster's data and the history go (kept when an anomaly is found)")

    outage = subcommand(
        benches, "zk-outage", "twlog.bench.zk_outage:main_zk_outage",
        "messages a consumer group delivers twice when ZooKeeper is stopped for a while (local ZooKeeper)",
        "Start a local ZooKeeper, an in-process broker and two group members reading a topic that a producer "
        "writes at a steady rate; stop ZooKeeper for each outage length in turn and start it again; print the "
        "messages produced, delivered, delivered twice and never delivered.",
    )
    outage.add_argument("--outages", type=int_list, default=[20, 60],
                        help="comma-separated outage lengths in seconds, one run each (default: 20,60)")
    positive_option(outage, "--rate", default=1000, help="messages produced a second")
    outage.add_argument("--session-timeout-s", type=float, default=6.0,
                        help="the members' and the broker's ZooKeeper session timeout (default: 6, the members' "
                        "default)")
    outage.add_argument("--before-s", type=float, default=8.0,
                        help="seconds of traffic before ZooKeeper stops (default: 8)")
    outage.add_argument("--after-s", type=float, default=8.0,
                        help="seconds of traffic after it is back, before the producer stops (default: 8)")

    spark = _benchmark(
        benches, "spark", "Spark batch reads of a topic (count and Parquet) beside Spark's JSON-lines reader",
        "Write N messages to a broker process and as JSON lines, then time a local[2] Spark session "
        "reading each into count() and into Parquet, and a one-partition topic with and without minPartitions, "
        "in interleaved rounds; print rows/s and rows per CPU-second.",
    )
    _messages_option(spark, "")
    _size_option(spark)
    spark.add_argument("--fetch-size", type=positive_int, default=8 * 1024 * 1024,
                       help="bytes per fetch of the data source (default: 8 MiB, the source's default)")
    positive_option(spark, "--rounds", default=3, help="rounds of interleaved reads")
    positive_option(spark, "--min-partitions", default=8,
                       help="minPartitions of the one-partition topic's split read")

    frames = _benchmark(
        benches, "frames", "broker CPU per MB of one large request frame (1, 10 and 100 MB)",
        "Send one acknowledged produce frame of each size to a broker process over loopback TCP; "
        "print the broker's CPU time for each and per MB (flat when framing is linear).",
    )
    frames.add_argument("--sizes", type=int_list, default=[1, 10, 100],
                        help="comma-separated frame sizes in MB (default: 1,10,100)")
    positive_option(frames, "--total-mb", default=200,
                        help="MB sent at each size, in as many frames as that takes")
    frames.add_argument("--dir", help="directory for the broker's data (default: a temporary one, removed after)")

    _add_hostile(benches)

    _add_latency(benches)
    _add_local(benches)
    _add_replication(benches)

    crc = _benchmark(benches, "crc", "compare zlib's and crcmod's CRC-32 on message payloads",
                     "Nanoseconds per message of zlib.crc32 and crcmod's crc-32.")
    _size_option(crc)
    crc.add_argument("--count", type=positive_int, default=10_000, help="payloads per round (default: 10,000)")


def _add_latency(benches) -> None:
    """C{twlog bench latency} (issue 15): produce-to-consume latency at fixed offered rates, per flush policy."""
    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not 0 < value <= 3600:
            raise argparse.ArgumentTypeError(f"--seconds {text} must be above 0 and at most 3600")
        return value

    latency = _benchmark(
        benches, "latency", "produce-to-consume latency (p50/p99/p99.9/max) at fixed offered rates, per flush policy",
        "Start a broker process per flush policy; for each offered rate, a producer process sends "
        "time-stamped messages on a fixed schedule for --seconds while a consumer reads them with waiting fetches "
        "(WAIT_FETCH); print the latency from each message's scheduled send to its hand-off to the consumer, the "
        "broker's fsyncs per second and fsync times, and a direct fsync probe of the disk.",
    )
    latency.add_argument("--rates", type=int_list, default=[1_000, 20_000, 200_000],
                         help="comma-separated offered rates in msg/s (default: 1000,20000,200000)")
    latency.add_argument("--seconds", type=seconds, default=10.0, help="how long each rate runs (default: 10)")
    latency.add_argument("--flush-policy", type=flush_policies, default=["group", "timer"],
                         help="comma-separated broker flush policies, each run at every rate (default: group,timer)")
    latency.add_argument("--flush-interval-ms", type=positive_int, default=None,
                         help="the brokers' --flush-interval-ms (default: the broker's, 1000)")
    latency.add_argument("--flush-messages", type=positive_int, default=None,
                         help="the brokers' --flush-messages (default: the broker's, 10000)")
    latency.add_argument("--flush-min-gap-ms", type=float, default=None, metavar="MS",
                         help="the brokers' --flush-min-gap-ms (default: the broker's, 2)")
    _size_option(latency)
    latency.add_argument("--fsync-probes", type=int, default=200,
                         help="fsyncs of 20 KB writes timed on the data directory's disk first (0: none; default: 200)")
    _dir_option(latency, "where the brokers keep their data")

    compare = _benchmark(
        benches, "compare", "the paper's section 5 producer and consumer tests: twlog beside RabbitMQ and ActiveMQ",
        "Run the paper's figure 4 and 5 tests (one producer of --size-byte messages in batches of "
        "--batch, one consumer with --fetch-bytes fetches; the peers send one persistent message per request to a "
        "durable queue and prefetch --prefetch messages) against a twlog broker process and each peer that "
        "listens on 127.0.0.1 (start them with scripts/peers/rabbitmq.sh and activemq.sh), interleaved round "
        "by round; print each test's median msg/s and twlog's ratio to each peer.",
    )
    _messages_option(compare, " per test")
    _size_option(compare)
    compare.add_argument("--batch", type=int_list, default=[1, 50],
                         help="comma-separated batch sizes of twlog's producer (default: 1,50)")
    compare.add_argument("--fetch-bytes", type=positive_int, default=200 * 1024,
                         help="bytes per twlog consumer fetch (default: 200 KiB, as in the paper)")
    compare.add_argument("--prefetch", type=positive_int, default=1000,
                         help="messages the peers' consumers prefetch (default: 1000, as in the paper)")
    positive_option(compare, "--rounds", default=3, help="rounds of every test")
    compare.add_argument("--systems", type=peer_systems, default=None,
                         help="comma-separated among twlog, rabbitmq, activemq; twlog always runs (default: twlog "
                         "and each peer whose client is installed and that listens on 127.0.0.1)")
    positive_option(compare, "--rabbitmq-port", default=5672,
                         help="RabbitMQ's AMQP port on 127.0.0.1")
    positive_option(compare, "--activemq-port", default=61613,
                         help="ActiveMQ's STOMP port on 127.0.0.1")
    positive_option(compare, "--time-limit", default=900,
                         help="seconds each test may take before the run stops")
    compare.add_argument("--json-out", metavar="FILE", default=None,
                         help="write the settings, every result (with its throughput over time) and the summary "
                         "as JSON lines to FILE")
    compare.add_argument("--plot", metavar="DIR", default=None,
                         help="draw the paper's figures 4 and 5 (msg/s over MB moved) as PNGs in DIR (matplotlib)")
    _dir_option(compare, "where the twlog broker keeps its data")
    compare.add_argument("--from-json", metavar="FILE", default=None,
                         help="run nothing: print the table (and with --plot, draw the figures) of a run saved "
                         "with --json-out")


def _add_local(benches) -> None:
    """C{twlog bench local} (issue 15): produce throughput against twlog local --brokers 1 and 2."""
    local = _benchmark(
        benches, "local", "aggregate produce throughput of producer processes against twlog local --brokers N",
        "For each --brokers count, start twlog local (ZooKeeper and a broker process each), have "
        "--producers producer processes send --messages batch-50 fire-and-forget messages each (producer k to broker "
        "k mod N), and time until every broker has flushed them all; print msg/s and the brokers' CPU.",
    )
    local.add_argument("--brokers", type=int_list, default=[1, 2],
                       help="comma-separated cluster sizes, run in this order (default: 1,2)")
    positive_option(local, "--producers", default=2, help="producer processes")
    _messages_option(local, " per producer")
    positive_option(local, "--batch", default=50, help="messages per set")
    _size_option(local)
    positive_option(local, "--runs", default=1,
                       help="repeat the sizes this many times, alternating them")
    local.add_argument("--local-source", metavar="DIR", default=None,
                       help="also run twlog local from the twlog source tree DIR (e.g. a 'git worktree' of an older "
                       "commit), alternating with this one, to compare versions")
    _dir_option(local, "where the clusters keep their data")


def _add_replication(benches) -> None:
    """C{twlog bench replication} (issue 22): replication's cost in throughput, failover times, catch-up speed."""
    replication = _benchmark(
        benches, "replication", "produce throughput by replication factor and ack, failover after kill -9 and "
        "SIGTERM of a leader, and a follower's catch-up speed, against broker processes",
        "Start a local ZooKeeper and --brokers twlog broker processes (each with --zookeeper-session-timeout-s), "
        "then, --rounds times each: produce --messages with the real Producer in batches of --batch to a fresh "
        "topic of replication factor 1, 2 and 3, with ack appended and all (medians, and ratios to replication "
        "factor 1 with ack=appended: issue 22's target is 40% for factor 3 with ack=all); send kill -9, then "
        "SIGTERM, to the leader of a replication-factor-3 partition under ack=all load and time the first "
        "acknowledgement by the new leader (targets: the session timeout + 2 s; 1 s and no producer error); stop a "
        "follower, produce --catch-up-mb MB, start it again and time its catch-up. Print three tables.",
    )
    positive_option(replication, "--brokers", default=3, help="broker processes (at least 3)")
    replication.add_argument("--messages", "-n", type=positive_int, default=100_000,
                             help="messages per throughput run (default: 100,000)")
    positive_option(replication, "--batch", default=50, help="messages per produce request")
    _size_option(replication)
    positive_option(replication, "--partitions", default=1, help="partitions of each throughput topic")
    replication.add_argument("--waiting", type=positive_int, default=None,
                             help="batches sent and not yet acknowledged per partition, at most (the application's "
                                  "window; while a replicated partition's request is out, the batches waiting go "
                                  "together in its next request) (default: 10,000 / --batch, the messages the async "
                                  "Producer's queue holds by default, max_queued_messages)")
    replication.add_argument("--parts", type=name_list("parts", REPLICATION_PARTS), default=list(REPLICATION_PARTS),
                             help="which measurements to run, comma-separated (default: all of "
                                  f"{','.join(REPLICATION_PARTS)})")
    positive_option(replication, "--rounds", default=3, help="rounds of every measurement; the tables give medians")
    replication.add_argument("--catch-up-mb", type=_positive_float, default=50.0,
                             help="MB produced while the follower is stopped (default: 50)")
    replication.add_argument("--session-timeout-s", type=_positive_float, default=6.0,
                             help="the brokers' --zookeeper-session-timeout-s (default: 6, the brokers' default)")
    _dir_option(replication, "where ZooKeeper and the brokers keep their data and logs")


def _positive_float(text: str) -> float:
    try:
        value = float(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return value


#: The attacks of C{twlog bench hostile}, in the order they run by default.
HOSTILE_ATTACKS = ["idle", "half-sent", "pipelined", "big-frames", "burst"]


def _add_hostile(benches) -> None:
    """C{twlog bench hostile} (issue 21): a healthy client's fetch latency beside five attacks."""
    hostile = _benchmark(
        benches, "hostile", "a healthy client's fetch p50/p99 beside five attacks (idle flood, half-sent frames, "
        "pipelined flood, big frames, connection burst), each attack's own figure against its target",
        "For each attack, start a broker process, a healthy client (a process of its own fetching 64 KiB in a "
        "loop) and the attack; print a table of the healthy client's fetch p50 and p99 beside each attack, the "
        "broker's peak RSS, the attack's own figure (newcomers served, when a legitimate produce is answered, "
        "OFFSETS answered, frames answered, connect times), its target and pass or FAIL. Every attack is bounded "
        "in count and time and talks only to 127.0.0.1. Broker options an older broker lacks are left out and "
        "named in a footnote.",
    )
    hostile.add_argument("--attacks", type=name_list("attacks", HOSTILE_ATTACKS), default=list(HOSTILE_ATTACKS),
                         help=f"comma-separated, run in this order (default: {','.join(HOSTILE_ATTACKS)})")
    hostile.add_argument("--seconds", type=float, default=20.0,
                         help="the longest the pipelined flood and the big frames last (default: 20)")
    positive_option(hostile, "--fetch-bytes", default=64 * 1024, help="bytes of each healthy fetch")
    positive_option(hostile, "--answer-timeout-s", default=5,
                    help="how long a newcomer, a burst's connection or the legitimate produce (once the stalled "
                    "senders are closed) may wait for its answer, in seconds")
    group = hostile.add_argument_group("idle flood")
    positive_option(group, "--idle-connections", default=700,
                    help="connections that send nothing; the broker's --max-connections is set to them plus one "
                    "(the healthy client), so they fill it")
    positive_option(group, "--newcomers", default=20, help="new clients after the idle ones")
    group.add_argument("--idle-s", type=_positive_float, default=2.0,
                       help="how long the idle connections sit before the newcomers come; a broker that replaces "
                       "only connections idle for --reap-idle-s gets half of it (default: 2)")
    group = hostile.add_argument_group("half-sent frames")
    positive_option(group, "--stalled-clients", default=2, help="connections sending most of a frame, then nothing")
    group.add_argument("--stalled-mb", type=_positive_float, default=95.0,
                       help="MiB of each stalled frame; all but its last 64 KiB is sent (default: 95)")
    group.add_argument("--produce-mb", type=_positive_float, default=69.0,
                       help="MiB of the legitimate produce sent once they stall; it must not fit the budget they "
                       "leave (default: 69, with 2 x 95 of the broker's default 256)")
    group.add_argument("--max-buffered-mb", type=_positive_float, default=None,
                       help="the broker's --max-buffered-request-bytes in MiB (default: the broker's)")
    group.add_argument("--request-timeout-s", type=_positive_float, default=5.0,
                       help="the broker's --request-timeout-s, if it has it; the target is an answer within it "
                       "plus 1 s (default: 5)")
    group = hostile.add_argument_group("pipelined flood")
    positive_option(group, "--flooders", default=20, help="connections pipelining OFFSETS requests")
    positive_option(group, "--pipeline", default=100_000, help="OFFSETS requests each flooder pipelines")
    group.add_argument("--max-inflight", type=positive_int, default=None,
                       help="the broker's --max-inflight-per-connection, if it has it (default: the broker's)")
    group = hostile.add_argument_group("big frames")
    positive_option(group, "--big-clients", default=2, help="connections sending big frames")
    group.add_argument("--big-frame-mb", type=_positive_float, default=50.0,
                       help="MB (10^6 bytes) of each big frame, an acknowledged produce (default: 50)")
    positive_option(group, "--big-frames", default=4, help="big frames each of those connections sends")
    group = hostile.add_argument_group("connection burst")
    positive_option(group, "--burst", default=1000, help="connections started at once")
    group.add_argument("--listen-backlog", type=positive_int, default=None,
                       help="the broker's --listen-backlog, if it has it (default: the broker's)")
    hostile.add_argument("--broker-source", metavar="DIR", default=None,
                         help="run the brokers from the twlog source tree DIR (put first on their PYTHONPATH), e.g. "
                         "a 'git worktree' of an older commit, for a before/after comparison")
    hostile.add_argument("--dir", help="directory for the brokers' data (default: a temporary one, removed after)")
