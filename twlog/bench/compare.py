# -*- test-case-name: tests.bench.test_compare,tests.integration.test_bench_compare -*-
"""C{twlog bench compare}: the paper's section 5 tests, twlog beside RabbitMQ and ActiveMQ on loopback.

The workload is the paper's (figures 4 and 5): one producer of 200-byte messages, in batches of 1 and 50 for
twlog (fire-and-forget, as Kafka's producer) and one persistent message per request for the peers, to a broker
that flushes asynchronously; then one consumer reading them all back, with 200 KB fetches for twlog and a
prefetch of 1000 messages for the peers (about the same amount of data per request), acknowledging
automatically. Each round runs every system once, in a rotating order, so that noise on a shared machine falls
on all of them alike; the table gives each test's median over the rounds and twlog's ratio to each peer.

twlog runs as a broker process (L{BrokerProcess}) driven by its Twisted producer and L{SimpleConsumer} on this
process's reactor; the peers' blocking clients (L{twlog.bench.peers}) run on a thread while the reactor waits.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from statistics import median
from typing import Any, TextIO

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from twlog import __version__
from twlog.bench import peers
from twlog.bench.broker import BrokerProcess
from twlog.bench.common import MB, BenchProgress, BenchTable, Column, payloads, react_status
from twlog.bench.peers import PEERS, Deadline, Trace
from twlog.consumer.simple import SimpleConsumer
from twlog.producer.producer import Producer
from twlog.storage.message import encode_message_set

try:
    from matplotlib.figure import Figure
except ImportError:  # an optional extra: without it, --plot is refused
    Figure = None

#: The systems in table order, with their labels.
SYSTEMS = {"twlog": "twlog", **{name: label for name, (label, *_rest) in PEERS.items()}}
#: The twlog broker's flush settings: asynchronous, as in the paper (the log is fsynced on a thread pool).
FLUSH_ARGS = ("--flush-interval-ms", "5", "--segment-bytes", str(512 * 1024 * 1024))


class CompareError(Exception):
    """A comparison that cannot run or did not finish; one line for the user."""


@attrs.frozen
class Result:
    """One test of one system in one round."""

    round: int
    system: str
    test: str  # "produce" or "consume"
    batch: int  # messages per request (produce); per fetch or prefetch is in the run's header
    messages: int
    seconds: float
    size: int
    points: tuple[tuple[int, float], ...] = ()
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before and after

    @property
    def msg_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_s(self) -> float:
        return self.msg_s * self.size / MB

    def to_json(self) -> dict[str, Any]:
        return {"kind": "result", **attrs.asdict(self, recurse=False), "points": [list(p) for p in self.points],
                "load": list(self.load), "msg_s": round(self.msg_s, 1), "mb_s": round(self.mb_s, 3)}

    @classmethod
    def from_json(cls, line: dict[str, Any]) -> Result:
        fields = {f.name for f in attrs.fields(cls)}
        values = {k: v for k, v in line.items() if k in fields}
        values["points"] = tuple(tuple(p) for p in values.get("points", ()))
        values["load"] = tuple(values.get("load", (0.0, 0.0)))
        return cls(**values)


def rates(points: Sequence[tuple[int, float]], size: int) -> tuple[list[float], list[float]]:
    """Throughput over time, as the paper's figures 4 and 5 draw it: for each interval between two points,
    the MB moved by its end (x) and its messages per second (y)."""
    xs, ys = [], []
    for (done0, t0), (done1, t1) in zip(points, points[1:]):
        if t1 > t0 and done1 > done0:
            xs.append(done1 * size / MB)
            ys.append((done1 - done0) / (t1 - t0))
    return xs, ys


def round_order(systems: Sequence[str], round_index: int) -> list[str]:
    """The systems in round C{round_index} (from 0): rotated by one each round, so none always goes first."""
    k = round_index % len(systems)
    return [*systems[k:], *systems[:k]]


def tests_of(system: str, batches: Sequence[int]) -> list[tuple[str, int]]:
    """(test, batch) pairs a system runs in a round: twlog produces in each batch size, the peers one message
    per request (as in the paper); each then consumes."""
    sizes = batches if system == "twlog" else [1]
    return [*(("produce", b) for b in sizes), ("consume", 0)]


def _cell(table: BenchTable, values: Sequence[float], system: str) -> str:
    if not values:
        return table.missing(f"{SYSTEMS[system]} did not run this test (the peers produce one message per request "
                             "only, as in the paper)" if system != "twlog" else "no result for this test")
    middle = median(values)
    if len(values) == 1 or middle == 0:
        return f"{middle:,.0f}"
    return f"{middle:,.0f} ±{(max(values) - min(values)) / 2 / middle:.0%}"


def summary(results: Sequence[Result], systems: Sequence[str], batches: Sequence[int]) -> list[dict[str, Any]]:
    """One row per test: each system's median msg/s over the rounds, and twlog's ratio to each peer: the median
    over the rounds of twlog's msg/s over the peer's in the same round (the systems ran in turns within a
    round, so a slow spell of the machine weighs on both sides of a ratio more than on the medians). In the
    rows of twlog's larger batches the peers' figure is their one-message-per-request one, as in the paper."""
    rows = []
    for test, batch in tests_of("twlog", batches):
        row: dict[str, Any] = {"kind": "summary", "test": test, "batch": batch, "msg_s": {}, "rounds": {},
                               "ratio": {}}
        by_round: dict[str, dict[int, float]] = {}
        for system in systems:
            peer_batch = batch if system == "twlog" or test == "consume" else 1
            chosen = [r for r in results if r.system == system and r.test == test and r.batch == peer_batch]
            if chosen:
                row["msg_s"][system] = median(r.msg_s for r in chosen)
                row["rounds"][system] = [r.msg_s for r in chosen]
                by_round[system] = {r.round: r.msg_s for r in chosen}
        mine = by_round.get("twlog", {})
        for system in systems[1:]:
            ratios = [mine[n] / v for n, v in by_round.get(system, {}).items() if n in mine and v]
            if ratios:
                row["ratio"][system] = median(ratios)
        rows.append(row)
    return rows


def row_label(test: str, batch: int, fetch_bytes: int, prefetch: int, with_peers: bool = True) -> str:
    """A table row's name; with peers, what they do in that row."""
    if test == "produce":
        return f"produce, batch {batch}" + (" (peers: 1)" if batch != 1 and with_peers else "")
    return f"consume, {fetch_bytes // 1024} KB fetches" + (f" (peers: prefetch {prefetch})" if with_peers else "")


def render_table(rows: Sequence[dict[str, Any]], systems: Sequence[str], header: dict[str, Any],
                 results: Sequence[Result] = ()) -> BenchTable:
    """The table of L{summary}'s rows, with the notes under it (L{footer})."""
    table = BenchTable(f"twlog bench compare: {header['messages']:,} messages of {header['size']} bytes, "
                       f"median of {header['rounds']} round(s)",
                       [Column.label("test"), *(Column(SYSTEMS[s], "msg/s") for s in systems),
                        *(Column(f"twlog / {SYSTEMS[s]}", "x") for s in systems[1:])])
    for row in rows:
        cells = [row_label(row["test"], row["batch"], header["fetch_bytes"], header["prefetch"], len(systems) > 1)]
        cells += [_cell(table, row["rounds"].get(s, []), s) for s in systems]
        cells += [f"{row['ratio'][s]:.2f}" if s in row["ratio"] else table.missing(
            f"no round in which both twlog and {SYSTEMS[s]} ran this test") for s in systems[1:]]
        table.add_row(*cells)
    for line in footer(header, results):
        table.note(line)
    return table


def footer(header: dict[str, Any], results: Sequence[Result]) -> list[str]:
    loads = [value for r in results for value in r.load]
    lines = [
        "± is half the spread between rounds, relative to the median; a ratio (x) is the median over the rounds of "
        "twlog's msg/s over the peer's in the same round. twlog: fire-and-forget producer, broker "
        f"flushing every {FLUSH_ARGS[1]} ms on a thread pool; peers: durable queue, persistent messages, "
        "automatic acknowledgement; all on 127.0.0.1.",
        "versions: " + "; ".join(f"{k}: {v}" for k, v in header["versions"].items()),
    ]
    if loads:
        lines.append(f"load average (1 min) around the tests: {min(loads):.2f} to {max(loads):.2f} "
                     f"on {os.cpu_count()} CPUs")
    return lines


def write_plots(results: Sequence[Result], directory: str, size: int) -> list[str]:
    """The paper's figure 4 (producer) and figure 5 (consumer) as PNGs in C{directory}: msg/s over the MB moved,
    one line per system and batch, from the round whose rate was the median."""
    if Figure is None:
        raise CompareError("--plot needs matplotlib (pip install 'twlog[compare]')")
    os.makedirs(directory, exist_ok=True)
    written = []
    for test, name, title, xlabel in (
        ("produce", "compare-produce.png", "Producer performance (paper figure 4)", "MB sent"),
        ("consume", "compare-consume.png", "Consumer performance (paper figure 5)", "MB consumed"),
    ):
        figure = Figure(figsize=(8, 5), dpi=100)
        axes = figure.add_subplot()
        keys = sorted({(r.system, r.batch) for r in results if r.test == test},
                      key=lambda k: (list(SYSTEMS).index(k[0]), k[1]))
        for system, batch in keys:
            runs = sorted((r for r in results if r.test == test and (r.system, r.batch) == (system, batch)),
                          key=lambda r: r.msg_s)
            chosen = runs[(len(runs) - 1) // 2]
            xs, ys = rates(chosen.points, size)
            label = SYSTEMS[system] + (f" (batch {batch})" if test == "produce" and system == "twlog" else "")
            axes.plot(xs, ys, label=f"{label}: {chosen.msg_s:,.0f} msg/s")
        axes.set_yscale("log")
        axes.set_xlabel(xlabel)
        axes.set_ylabel("messages per second")
        axes.set_title(title)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
        path = os.path.join(directory, name)
        figure.savefig(path, bbox_inches="tight")
        written.append(path)
    return written


@attrs.define
class Comparison:
    """One run of C{twlog bench compare}: the settings, the systems, where results go."""

    systems: list[str]
    messages: int
    size: int
    batches: list[int]
    fetch_bytes: int
    prefetch: int
    rounds: int
    time_limit_s: float
    ports: dict[str, int]
    progress: BenchProgress
    on_result: Callable[[Result], None]
    data: list[bytes] = attrs.field(factory=list)
    results: list[Result] = attrs.field(factory=list)
    #: The test under way's limit: cancelled when the reactor shuts down (Ctrl-C), so a peer's thread stops.
    deadline: Deadline | None = None

    def cancel(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()

    def count(self, batch: int) -> int:
        """Messages a test moves: the largest multiple of C{batch} up to --messages."""
        return self.messages // batch * batch

    async def run(self, reactor, broker: BrokerProcess) -> list[Result]:
        self.data = payloads(min(self.messages, 50_000) // 50 * 50 or 50, self.size)
        consumer = SimpleConsumer("127.0.0.1", broker.port, reactor=reactor, max_bytes=self.fetch_bytes,
                                  batch_max_bytes=self.fetch_bytes)  # (the paper's 200 KB, for its comparison)
        reactor.addSystemEventTrigger("before", "shutdown", self.cancel)
        try:
            for index in range(self.rounds):
                for system in round_order(self.systems, index):
                    for test, batch in tests_of(system, self.batches):
                        await self._one(reactor, broker, consumer, index + 1, system, test, batch)
        finally:
            await consumer.close()
        return self.results

    async def _one(self, reactor, broker, consumer, round_no: int, system: str, test: str, batch: int) -> None:
        label = SYSTEMS[system]
        last = self.batches[-1]
        count = self.count(batch if test == "produce" else (last if system == "twlog" else 1))
        what = (f"round {round_no}/{self.rounds}: {label} "
                + (f"produce, batch {batch}" if test == "produce" else "consume"))
        self.progress.step(what, total=count, unit="msg")
        trace = Trace(count, on_mark=self.progress.update)
        deadline = self.deadline = Deadline(self.time_limit_s, what)
        queue = f"twlog-compare-{os.getpid()}-{round_no}"
        before = os.getloadavg()[0]
        if system == "twlog":
            # This run's own topics: a --dir used again keeps those of earlier runs.
            topic = f"compare-{os.getpid()}-{round_no}-b{batch if test == 'produce' else last}"
            if test == "produce":
                seconds = await self._twlog_produce(reactor, broker.port, consumer, topic, count, batch, trace,
                                                    deadline)
            else:
                seconds = await self._twlog_consume(consumer, topic, count, trace, deadline)
        else:
            produce, consume = {"rabbitmq": (peers.rabbitmq_produce, peers.rabbitmq_consume),
                                "activemq": (peers.activemq_produce, peers.activemq_consume)}[system]
            port = self.ports[system]
            if test == "produce":
                seconds = await deferToThread(produce, port, queue, self.data, count, trace, deadline)
            else:
                seconds = await deferToThread(consume, port, queue, count, self.prefetch, trace, deadline)
        result = Result(round_no, system, test, batch if test == "produce" else 0, count, seconds, self.size,
                        tuple(trace.points), (before, os.getloadavg()[0]))
        self.results.append(result)
        self.progress.log(f"  {what}: {result.msg_s:,.0f} msg/s ({seconds:.1f} s)")
        self.on_result(result)

    async def _twlog_produce(self, reactor, port: int, consumer: SimpleConsumer, topic: str, count: int,
                             batch: int, trace: Trace, deadline: Deadline) -> float:
        sets = [self.data[i : i + batch] for i in range(0, len(self.data) - batch + 1, batch)]
        sends = count // batch
        set_bytes = [len(encode_message_set(s)) for s in sets]
        end = sum(set_bytes) * (sends // len(sets)) + sum(set_bytes[: sends % len(sets)])
        producer = Producer(f"127.0.0.1:{port}", reactor=reactor)
        trace.start()
        try:
            send = producer.send
            every = max(1, 1000 // batch)
            for i in range(sends):
                await send(topic, sets[i % len(sets)], partition_index=0)
                if i % every == every - 1:
                    trace.mark((i + 1) * batch)
                    deadline.check((i + 1) * batch, count)
            await producer.flush()
        finally:
            await producer.close()
        while (await consumer.offsets(topic, 0))[0] < end:  # the broker has flushed them all
            deadline.check(count, count)
            await deferLater(reactor, 0.002, lambda: None)
        return trace.finish(count)

    async def _twlog_consume(self, consumer: SimpleConsumer, topic: str, count: int, trace: Trace,
                             deadline: Deadline) -> float:
        offset = read = 0
        trace.start()
        while read < count:
            fetched = await consumer.fetch(topic, 0, offset)
            if not len(fetched.messages):
                raise CompareError(f"{topic} ended after {read:,} of {count:,} messages")
            read += len(fetched.messages)
            offset = fetched.next_offset
            trace.mark(read)
            deadline.check(read, count)
        return trace.finish(read)


def choose_systems(requested: Sequence[str] | None, ports: dict[str, int],
                   unavailable: Callable[[str, int], str | None] = peers.unavailable) -> tuple[list[str], list[str]]:
    """The systems to run (twlog first) and why each peer left out is; a named peer that cannot run is an error.

    @param requested: the names given to --systems, or None: twlog and every peer that can run here.
    @param unavailable: C{(peer, port)} -> why it cannot run here, or None (L{peers.unavailable}).
    """
    systems, skipped = ["twlog"], []
    for peer in PEERS:
        if requested is not None and peer not in requested:
            continue
        reason = unavailable(peer, ports[peer])
        if reason is None:
            systems.append(peer)
        elif requested is not None:
            raise CompareError(reason)
        else:
            skipped.append(reason)
    return systems, skipped


def run_header(args, systems: Sequence[str], skipped: Sequence[str]) -> dict[str, Any]:
    """The first JSON line: the settings, the machine and the versions."""
    versions = {"twlog": __version__, "python": platform.python_version()}
    for peer in systems[1:]:
        port = args.ports[peer]
        server = (peers.rabbitmq_server_version if peer == "rabbitmq" else peers.activemq_server_version)(port)
        versions[SYSTEMS[peer]] = f"{server} ({peers.client_version(peer)})"
    return {
        "kind": "run", "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "systems": list(systems),
        "skipped": list(skipped), "messages": args.messages, "size": args.size, "batches": list(args.batch),
        "fetch_bytes": args.fetch_bytes, "prefetch": args.prefetch, "rounds": args.rounds,
        "cpus": os.cpu_count(), "machine": platform.platform(), "versions": versions,
        "twlog_broker_args": list(FLUSH_ARGS),
    }


def report(header: dict[str, Any], results: Sequence[Result], plot: str | None, json_out: TextIO | None = None) -> None:
    """Print the table and its notes, write the summary rows to C{json_out} and the figures to C{plot}."""
    rows = summary(results, header["systems"], header["batches"])
    if json_out is not None:
        for row in rows:
            json_out.write(json.dumps(row) + "\n")
    render_table(rows, header["systems"], header, results).print()
    if plot:
        for path in write_plots(results, plot, header["size"]):
            print(f"wrote {path}", file=sys.stderr)


def replay(path: str, plot: str | None) -> int:
    """C{--from-json FILE}: the table and figures of a run saved with C{--json-out}, without running it again."""
    try:
        with open(path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        headers = [line for line in lines if line.get("kind") == "run"]
        if not headers:
            raise ValueError('no line of "kind": "run"')
        header = headers[0]
        results = [Result.from_json(line) for line in lines if line.get("kind") == "result"]
    except OSError as e:
        print(f"twlog: cannot read --from-json {path}: {e.strerror}", file=sys.stderr)
        return 1
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        print(f"twlog: --from-json {path} is not the JSON lines of twlog bench compare --json-out ({e})",
              file=sys.stderr)
        return 1
    report(header, results, plot)
    return 0


def main_compare(args) -> int:
    """Entry point of C{twlog bench compare}."""
    if args.plot and Figure is None:
        print("twlog: --plot needs matplotlib (pip install 'twlog[compare]')", file=sys.stderr)
        return 2
    if args.from_json:
        return replay(args.from_json, args.plot)
    args.ports = {"rabbitmq": args.rabbitmq_port, "activemq": args.activemq_port}
    if max(args.batch) > args.messages:
        print(f"twlog: --batch {max(args.batch)} is larger than --messages {args.messages}; give batches of at most "
              "--messages", file=sys.stderr)
        return 2
    try:
        systems, skipped = choose_systems(args.systems, args.ports)
        header = run_header(args, systems, skipped)
    except (CompareError, OSError) as e:
        print(f"twlog: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a peer's client failing on its first connection
        print(f"twlog: cannot reach a peer: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    for reason in skipped:
        print(f"leaving out {reason}", file=sys.stderr)
    json_out: TextIO | None = open(args.json_out, "w") if args.json_out else None
    root = args.dir or tempfile.mkdtemp(prefix="twlog-bench-compare-")
    status = 1
    try:
        if json_out is not None:
            json_out.write(json.dumps(header) + "\n")
            json_out.flush()

        def record(result: Result) -> None:
            if json_out is not None:
                json_out.write(json.dumps(result.to_json()) + "\n")
                json_out.flush()

        print(f"starting a twlog broker with its data under {root}; systems: {', '.join(systems)}", file=sys.stderr)
        broker = BrokerProcess(root, *FLUSH_ARGS)
        failure: list[str] = []
        finished: list[bool] = []
        with BenchProgress() as progress:
            comparison = Comparison(systems, args.messages, args.size, list(args.batch), args.fetch_bytes,
                                    args.prefetch, args.rounds, args.time_limit, args.ports, progress, record)

            async def run(reactor) -> None:
                try:
                    await comparison.run(reactor, broker)
                    finished.append(True)
                except (CompareError, OSError) as e:
                    failure.append(str(e))
                except Exception as e:  # a peer's client: its own exception types, one line for the user
                    failure.append(f"{type(e).__name__}: {e}")

            try:
                status = react_status(lambda reactor: Deferred.fromCoroutine(run(reactor)))
            finally:
                broker.stop()
        if failure:
            print(f"twlog: {failure[0]}", file=sys.stderr)
            status = 1
        if status:
            return status
        if not finished:  # the reactor stopped first: SIGINT or SIGTERM
            kept = f"; the results so far are in {args.json_out}" if args.json_out else ""
            print(f"twlog: interrupted{kept}", file=sys.stderr)
            return 130
        report(header, comparison.results, args.plot, json_out)
        return 0
    finally:
        if json_out is not None:
            json_out.close()
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
