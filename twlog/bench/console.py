# -*- test-case-name: tests.bench.test_console -*-
"""C{twlog bench console}: how fast the web console answers on a cluster of many topics and groups.

A local ZooKeeper (a temporary directory) and one broker in this process (its metrics served), C{--topics} topics
on it (one partition each, a few messages in the first), C{--groups} groups with a committed offset each in
ZooKeeper, then C{twlog console} in this process; each page and API route is asked C{--requests} times over HTTP
from a thread (urllib, so the console's reactor serves as it would a browser) and the table gives each one's
median and longest time and its status.  Every wait is bounded (L{STEP_TIMEOUT_S}).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from statistics import median

from twisted.internet.defer import DeferredList
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread

from twlog.bench.common import BenchProgress, BenchTable, Column, react_with_progress
from twlog.broker.service import BrokerService
from twlog.config import BrokerConfig, LogConfig
from twlog.console.service import ConsoleService
from twlog.coord import paths
from twlog.coord.zk import NoNodeError, ZooKeeper
from twlog.coord.zkserver import ZooKeeperServer
from twlog.producer import Producer

#: The longest any step (topics registered, the console reading them, one request) may take.
STEP_TIMEOUT_S = 180.0
#: ZooKeeper writes in flight at once while making the groups.
WRITES_AT_ONCE = 200

#: What is asked, as (what the table calls it, path); {topic} and {group} name the first topic and group.
TARGETS = (
    ("page /", "/"), ("page /topics", "/topics"), ("page /topics/{topic}", "/topics/{topic}"),
    ("page /groups", "/groups"), ("page /brokers", "/brokers"),
    ("GET /api/overview", "/api/overview"), ("GET /api/topics", "/api/topics"),
    ("GET /api/topics sorted by size", "/api/topics?sort=size&order=desc&limit=50"),
    ("GET /api/topics filtered", "/api/topics?filter=topic-00099"),
    ("GET /api/topics/{topic}", "/api/topics/{topic}"),
    ("GET /api/topics/{topic}/messages", "/api/topics/{topic}/messages?limit=50"),
    ("GET /api/brokers", "/api/brokers"),
    ("GET /api/groups", "/api/groups"), ("GET /api/groups/{group}", "/api/groups/{group}"),
    ("GET /api/history", "/api/history?series=cluster.bytes_in,cluster.bytes_out,topic.{topic}.size"),
)


def timed_get(url: str) -> tuple[float, int]:
    """(seconds, HTTP status) of one GET, its body read whole."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=STEP_TIMEOUT_S) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as e:
        e.read()
        status = e.code
    return time.perf_counter() - started, status


async def _until(reactor, predicate, what: str) -> None:
    deadline = reactor.seconds() + STEP_TIMEOUT_S
    while not await predicate():
        if reactor.seconds() > deadline:
            raise RuntimeError(f"{what} did not happen within {STEP_TIMEOUT_S:g} s")
        await deferLater(reactor, 0.1, lambda: None)


async def build_cluster(reactor, root: str, zookeeper: str, topics: int, groups: int,
                        progress: BenchProgress) -> BrokerService:
    """One broker with C{topics} topics, and C{groups} groups' committed offsets, in ZooKeeper at C{zookeeper}."""
    config = BrokerConfig(log=LogConfig(os.path.join(root, "broker")), port=0, interface="127.0.0.1",
                          broker_id=0, zookeeper=zookeeper, metrics_port=0)
    broker = BrokerService(config, reactor)
    broker.startService()
    await broker.listening
    names = [f"topic-{i:05d}" for i in range(topics)]
    progress.step(f"creating {topics} topics", total=topics, unit="topics")
    for i, name in enumerate(names):
        broker.logs.get_or_create_log(name, 0)  # (created and registered, as on a first produce)
        if i % 100 == 99:
            progress.update(i + 1)
            await deferLater(reactor, 0, lambda: None)
    producer = Producer(f"127.0.0.1:{broker.broker.port}", ack="flushed", reactor=reactor)
    try:
        await producer.send(names[0], [b'{"n": %d}' % i for i in range(100)], partition_index=0)
    finally:
        await producer.close()
    zk = ZooKeeper(zookeeper, reactor=reactor)
    await zk.start()
    try:
        async def registered() -> bool:
            try:
                return len(await zk.children(paths.BROKER_TOPICS)) >= topics
            except NoNodeError:
                return False

        await _until(reactor, registered, f"the broker registering {topics} topics")
        progress.step(f"committing offsets for {groups} groups", total=groups, unit="groups")
        for start in range(0, groups, WRITES_AT_ONCE):
            batch = range(start, min(groups, start + WRITES_AT_ONCE))
            await DeferredList([zk.create(paths.offset_path(f"group-{i:05d}", names[i % topics], "0-0"), b"0",
                                          makepath=True) for i in batch], fireOnOneErrback=True, consumeErrors=True)
            progress.update(batch[-1] + 1)
    finally:
        await zk.stop()
    return broker


async def measure(reactor, base: str, requests: int, progress: BenchProgress) -> list[tuple[str, list[float], int]]:
    """Each target asked C{requests} times: (name, seconds of each, last status)."""
    rows = []
    progress.step("asking the console", total=len(TARGETS) * requests, unit="requests")
    for n, (name, path) in enumerate(TARGETS):
        url = base.rstrip("/") + path.format(topic="topic-00000", group="group-00000")
        times, status = [], 0
        for _ in range(requests):
            seconds, status = await deferToThread(timed_get, url)
            times.append(seconds)
        rows.append((name, times, status))
        progress.update((n + 1) * requests)
    return rows


def console_table(rows: Sequence[tuple[str, list[float], int]], topics: int, groups: int,
                  requests: int) -> BenchTable:
    table = BenchTable(f"twlog console benchmark: {topics} topics, {groups} groups, one broker; {requests} requests "
                       "each", [Column.label("page or route"), Column("median", "ms"), Column("max", "ms"),
                                Column("status", "HTTP")])
    for name, times, status in rows:
        table.add_row(name, f"{median(times) * 1000:.1f}", f"{max(times) * 1000:.1f}", str(status))
    table.note("(one client at a time, over loopback, console and broker in one process; a route another part "
               "of the console serves answers 404 until that part is there)")
    return table


def main_console(args) -> int:
    """Entry point of C{twlog bench console}."""
    root = tempfile.mkdtemp(prefix="twlog-bench-console-")
    print(f"starting ZooKeeper under {root}", file=sys.stderr)
    zookeeper = ZooKeeperServer(os.path.join(root, "zookeeper")).start()
    rows: list[tuple[str, list[float], int]] = []
    try:
        async def run(reactor, progress: BenchProgress) -> None:
            broker = await build_cluster(reactor, root, zookeeper.connect_string, args.topics, args.groups,
                                         progress)
            console = ConsoleService(zookeeper=zookeeper.connect_string, port=0, reactor=reactor)
            console.startService()
            try:
                await console.listening
                started = reactor.seconds()

                async def read() -> bool:
                    view = console.reader.view
                    return view is not None and view.ready and len(view.layout().partitions) >= args.topics

                await _until(reactor, read, f"the console reading {args.topics} topics")
                progress.log(f"the console read the cluster in {reactor.seconds() - started:.1f} s")
                rows.extend(await measure(reactor, console.url, args.requests, progress))
            finally:
                await console.stopService()
                await broker.stopService()

        status = react_with_progress(run)
        if status:
            return status
    finally:
        zookeeper.stop()
        shutil.rmtree(root, ignore_errors=True)
    console_table(rows, args.topics, args.groups, args.requests).print()
    return 0
