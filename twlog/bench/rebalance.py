# -*- test-case-name: tests.integration.test_admin -*-
"""C{twlog bench rebalance}: how long a consumer group takes to rebalance (local ZooKeeper, in-process brokers)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from statistics import median

from twisted.internet.defer import Deferred

from twlog.bench.common import react_status
from twlog.bench.group_rebalance import rebalance_benchmark
from twlog.coord.zkserver import ZooKeeperServer


def main_rebalance(args) -> int:
    """Entry point of C{twlog bench rebalance}: a local ZooKeeper, in-process brokers, N group consumers."""
    root = tempfile.mkdtemp(prefix="twlog-bench-rebalance-")
    print(f"starting ZooKeeper under {root}", file=sys.stderr)
    zookeeper = ZooKeeperServer(os.path.join(root, "zookeeper")).start()
    rows: list[tuple[str, float, int]] = []
    try:
        async def run_all(reactor) -> None:
            for scenario in args.scenario:
                for run in range(args.runs):
                    seconds, retries = await rebalance_benchmark(
                        reactor, zookeeper.connect_string, args.consumers, args.partitions, brokers=args.brokers,
                        scenario=scenario, rebalance_backoff_ms=args.backoff_ms,
                        log_dir=os.path.join(root, f"{scenario}-{run}"),
                    )
                    print(f"  {scenario} run {run + 1}: {seconds:.2f} s, {retries} retries", file=sys.stderr)
                    rows.append((scenario, seconds, retries))

        status = react_status(lambda reactor: Deferred.fromCoroutine(run_all(reactor)))
        if status:
            return status
    finally:
        zookeeper.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"twlog rebalance benchmark: {args.consumers} consumers, {args.partitions} partitions on {args.brokers} "
          f"brokers, backoff {args.backoff_ms} ms, {args.runs} runs per scenario")
    print(f"{'scenario':<28} {'median s':>9} {'min s':>7} {'max s':>7} {'retries (per run)':>20}")
    names = {"start": "all join at once", "join": "one joins a stable group"}
    for scenario in args.scenario:
        times = [s for name, s, _ in rows if name == scenario]
        retries = [r for name, _, r in rows if name == scenario]
        print(f"{names[scenario]:<28} {median(times):>9.2f} {min(times):>7.2f} {max(times):>7.2f} "
              f"{','.join(map(str, retries)):>20}")
    return 0
