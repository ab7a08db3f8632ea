# -*- test-case-name: tests.console.test_api_cluster -*-
"""The cluster's routes of the console's API (docs/console.md, "API"): C{/api/overview}, C{/api/topics},
C{/api/topics/{topic}}, C{/api/topics/{topic}/messages} (L{twlog.console.messages}) and C{/api/brokers}.

The layout (brokers, topics, partitions, leaders, replicas and ISR) is the console's L{ClusterView}'s, kept
current by ZooKeeper's watches, so listing 1,000 topics asks nothing of anyone; sizes and rates are the
sampler's (L{twlog.console.sampler}); a topic's offsets and high watermarks are asked of its leaders, as
C{twlog topics describe} does (L{twlog.client.replica_status.ask_leaders}).
"""

from __future__ import annotations

from twlog.console import messages
from twlog.console.cluster import reader_of
from twlog.console.context import ConsoleContext
from twlog.console.http import ApiRequest, Route, not_found
from twlog.console.listing import page
from twlog.console.metrics import rate
from twlog.console.partitions import brokers_for, first_last_all
from twlog.console.sampler import sampler_of
from twlog.coord.cluster import ClusterView
from twlog.coord.layout import ClusterLayout

#: A rate older than this many sample intervals is not shown (the sampler cannot reach the brokers).
STALE_INTERVALS = 3


def topic_names(layout: ClusterLayout) -> list[str]:
    """The topics with partitions (live or not), sorted."""
    return [topic for topic in layout.topics() if layout.partitions.get(topic)]


def known_brokers(view: ClusterView) -> dict[int, tuple[str, int] | None]:
    """Every broker the cluster knows: the live ones with their address, and those down (not registered) that
    hold a 0.7 partition or a replica, with None."""
    layout = view.layout()
    known: dict[int, tuple[str, int] | None] = dict(layout.brokers)
    for topic in topic_names(layout):
        for tp in layout.partitions[topic]:
            if tp.fixed_leader is not None:
                known.setdefault(tp.fixed_leader, None)
        replicated = view.replicated(topic)
        if replicated is not None:
            for p in replicated.partitions:
                for broker_id in p.replicas:
                    known.setdefault(broker_id, None)
    return dict(sorted(known.items()))


def partition_health(view: ClusterView, topic: str) -> tuple[list[str], list[str]]:
    """C{topic}'s under-replicated (ISR smaller than the replicas) and offline (no live leader) partitions."""
    layout = view.layout()
    offline = [tp.name for tp in layout.offline_partitions(topic)]
    replicated = view.replicated(topic)
    under = [] if replicated is None else [str(p.partition) for p in replicated.partitions
                                           if p.leader >= 0 and len(p.isr) < len(p.replicas)]
    return under, offline


def _fresh_rate(context: ConsoleContext, name: str) -> float | None:
    sampler = sampler_of(context)
    latest = context.history.latest(name)
    if latest is None or sampler is None or context.now() - latest[0] > STALE_INTERVALS * sampler.interval_s:
        return None
    return latest[1]


async def overview(api: ApiRequest) -> dict:
    context = api.context
    reader = reader_of(context)
    view = reader.ready_view()
    layout = view.layout()
    controller = await reader.controller()
    under: list[dict] = []
    offline: list[dict] = []
    partitions = 0
    names = topic_names(layout)
    for topic in names:
        partitions += len(layout.partitions[topic])
        u, o = partition_health(view, topic)
        under += [{"topic": topic, "partition": p} for p in u]
        offline += [{"topic": topic, "partition": p} for p in o]
    brokers = [{"id": b, "host": a[0] if a else None, "port": a[1] if a else None, "alive": a is not None}
               for b, a in known_brokers(view).items()]
    sampler = sampler_of(context)
    return {"brokers": brokers, "controller": controller, "topics": len(names), "partitions": partitions,
            "under_replicated": under, "offline": offline,
            "rates": {name: _fresh_rate(context, f"cluster.{name}") for name in ("messages_in", "bytes_in",
                                                                                 "bytes_out")},
            "problems": list(sampler.problems) if sampler is not None else []}


def _retention_hours(config: dict) -> float | None:
    for key, scale in (("retention.ms", 3_600_000), ("retention.hours", 1)):
        if key in config:
            try:
                return float(config[key]) / scale
            except ValueError:
                return None
    return None


def topic_row(view: ClusterView, topic: str, sampler) -> dict:
    layout = view.layout()
    states = view.replica_states(topic)
    under, _ = partition_health(view, topic)
    config = dict(states[0].config) if states is not None else {}
    return {"name": topic, "partitions": len(layout.partitions[topic]), "replicated": states is not None,
            "replication_factor": states[0].replication_factor if states is not None else 1,
            "size_bytes": sampler.topic_sizes.get(topic) if sampler is not None else None,
            "messages_in_per_s": None,
            "bytes_in_per_s": sampler.topic_rates.get(topic) if sampler is not None else None,
            "retention_hours": _retention_hours(config), "under_replicated": len(under)}


async def topics(api: ApiRequest) -> dict:
    view = reader_of(api.context).ready_view()
    sampler = sampler_of(api.context)
    rows = [topic_row(view, topic, sampler) for topic in topic_names(view.layout())]
    answer = page(api, rows, "topics", "name", {
        "name": lambda row: row["name"], "partitions": lambda row: row["partitions"],
        "size": lambda row: row["size_bytes"], "rate": lambda row: row["bytes_in_per_s"]})
    answer["problems"] = list(sampler.problems) if sampler is not None else []
    return answer


def check_topic(view: ClusterView, topic: str) -> None:
    """@raise ApiError: 404 when C{topic} has no partitions in the cluster."""
    if not view.layout().partitions.get(topic):
        raise not_found(f"topic {topic!r}")


def _lag_by_group(context: ConsoleContext, topic: str) -> list[dict]:
    """The groups whose lag on C{topic} the console sampled (C{group.<g>.<topic>:<p>.lag}), summed per group."""
    lags: dict[str, float] = {}
    marker = f".{topic}:"
    for name in context.history.names("group."):
        if not name.endswith(".lag") or marker not in name:
            continue
        group = name[len("group."):name.rindex(marker)]
        latest = context.history.latest(name)
        if latest is not None:
            lags[group] = lags.get(group, 0.0) + latest[1]
    return [{"group": group, "lag_bytes": lag} for group, lag in sorted(lags.items())]


async def topic(api: ApiRequest) -> dict:
    context = api.context
    view = reader_of(context).ready_view()
    name = api.params["topic"]
    check_topic(view, name)
    layout = view.layout()
    sampler = sampler_of(context)
    owners_sizes = sampler.topic_partition_sizes(name) if sampler is not None else {}
    brokers = brokers_for(context, layout)
    problems: list[str] = []
    unreachable: list[str] = []
    try:
        partitions = sorted(layout.partitions[name])
        live = [tp for tp in partitions if layout.leader(tp) is not None]
        ends, lines, unreachable = await first_last_all(brokers, live)
        problems += lines
        replicated = view.replicated(name)
        progress = {}
        if replicated is not None:
            progress, lines = await brokers.progress(replicated)
            problems += [f"{line}: its high watermark is unknown" for line in lines]
    finally:
        await brokers.close()
    by_number = {p.partition: p for p in replicated.partitions} if replicated is not None else {}
    rows = []
    for tp in partitions:
        first, last = ends.get(tp, (None, None))
        state = by_number.get(tp.number) if tp.fixed_leader is None else None
        leader = layout.leader(tp)
        size = owners_sizes.get(tp.name)
        rows.append({"partition": tp.name, "leader": leader,
                     "replicas": list(state.replicas) if state is not None else [tp.fixed_leader],
                     "isr": list(state.isr) if state is not None else ([leader] if leader is not None else []),
                     "first_offset": first, "last_offset": last,
                     "size_bytes": size if size is not None else (last - first if first is not None else None),
                     "high_watermark": progress[tp.number].high_watermark if tp.number in progress
                     and tp.fixed_leader is None else (last if tp.fixed_leader is not None else None)})
    offline = [tp.name for tp in layout.offline_partitions(name)]
    if offline:
        problems.append(f"{name}: partition{'s' if len(offline) != 1 else ''} {', '.join(offline)} "
                        f"{'have' if len(offline) != 1 else 'has'} no live leader")
    states = view.replica_states(name)
    answer = {"name": name, "replicated": replicated is not None, "partitions": rows,
              "groups": _lag_by_group(context, name),
              "config": dict(states[0].config) if states is not None else {}, "problems": problems}
    if unreachable:
        answer["unreachable"] = unreachable
    return answer


async def brokers_route(api: ApiRequest) -> dict:
    context = api.context
    reader = reader_of(context)
    view = reader.ready_view()
    controller = await reader.controller()
    endpoints = await reader.endpoints()
    sampler = sampler_of(context)
    problems = list(sampler.problems) if sampler is not None else []
    if sampler is not None and (sampler.sampled_at is None
                                or context.now() - sampler.sampled_at > STALE_INTERVALS * sampler.interval_s):
        await sampler.sample_now()  # (no recent sample: take one now, each scrape bounded by the timeout)
        problems = list(sampler.problems)
    led, followed = _replica_counts(view)
    rows = []
    for broker_id, address in known_brokers(view).items():
        found = endpoints.get(broker_id, {})
        tls = found.get("listeners", {}).get("SSL")
        store = sampler.store if sampler is not None else None
        now, before = (store.latest(broker_id), store.previous(broker_id)) if store is not None else (None, None)
        if address is None:
            now = before = None
        rows.append({
            "id": broker_id, "host": address[0] if address else None, "port": address[1] if address else None,
            "tls_port": tls[1] if tls else None, "alive": address is not None, "controller": broker_id == controller,
            "metrics_url": found.get("metrics_url"),
            "bytes_in_per_s": rate(now, before, "bytes_in"), "bytes_out_per_s": rate(now, before, "bytes_out"),
            "messages_in_per_s": rate(now, before, "messages_in"),
            "connections": now.connections if now is not None else None,
            "request_latency_ms": {key: now.percentile_ms(q, before) if now is not None else None
                                   for key, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999))},
            "leader_partitions": led.get(broker_id, 0), "follower_partitions": followed.get(broker_id, 0)})
    down = [f"broker {r['id']} is down (not registered; it holds partitions)" for r in rows if not r["alive"]]
    return {"brokers": rows, "problems": problems + down}


def _replica_counts(view: ClusterView) -> tuple[dict[int, int], dict[int, int]]:
    """Partitions each broker leads (a 0.7 partition's broker leads it) and follows (a replica, not the leader)."""
    layout = view.layout()
    led: dict[int, int] = {}
    followed: dict[int, int] = {}
    for topic in topic_names(layout):
        replicated = view.replicated(topic)
        if replicated is None:
            for tp in layout.partitions[topic]:
                if tp.fixed_leader is not None:
                    led[tp.fixed_leader] = led.get(tp.fixed_leader, 0) + 1
            continue
        for p in replicated.partitions:
            if p.leader >= 0:
                led[p.leader] = led.get(p.leader, 0) + 1
            for replica in p.replicas:
                if replica != p.leader:
                    followed[replica] = followed.get(replica, 0) + 1
    return led, followed


def routes(context: ConsoleContext) -> list[Route]:
    return [Route("GET", "overview", overview), Route("GET", "topics", topics), Route("GET", "topics/{topic}", topic),
            Route("GET", "topics/{topic}/messages", messages.browse), Route("GET", "brokers", brokers_route)]

