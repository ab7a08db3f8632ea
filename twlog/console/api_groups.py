# -*- test-case-name: tests.console.test_api_groups -*-
"""The consumer groups' routes (docs/console.md, "Groups").

  - C{GET /api/groups}: names from ZooKeeper, filtered, sorted and paged here; each row's members, topics and lag
    as the sampler last saw them (L{twlog.console.groups.LagSampler}; a group not sampled yet: its members and
    topics read now, its lag null): no broker is asked, and ZooKeeper only about groups not sampled yet.
  - C{GET /api/groups/<group>}: what C{twlog groups --json} prints for it (the same code:
    L{twlog.consumer.admin.describe_groups}, L{twlog.consumer.group_reset.group_json}), plus C{lag_messages} per
    partition where it is counted (L{LAG_COUNT_MAX_BYTES}) and C{live}.
  - C{POST /api/groups/<group>/reset}: the plan of C{twlog groups reset} (L{twlog.consumer.group_reset}), shown
    (C{dry_run}) or applied; 409 while the group has live members.
  - C{DELETE /api/groups/<group>}: 409 while it has live members.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, DeferredList

from twlog.console import auth
from twlog.console.groups import SAMPLER, broker_connect, guarded, require_zookeeper, start_sampling
from twlog.console.http import ApiError, ApiRequest, Route, bad_parameter
from twlog.consumer.admin import (
    GroupNotFound,
    OffsetRefused,
    check_group,
    delete_group,
    describe_groups,
    registered_partitions,
)
from twlog.consumer.group_reset import (
    BadResetParameter,
    ResetRefused,
    UnknownTopic,
    apply_reset,
    group_json,
    parse_target,
    plan_reset,
)
from twlog.consumer.membership import sorted_children
from twlog.consumer.rebalance import natural_key
from twlog.consumer.walk import WalkTooFar, count_messages
from twlog.coord import paths
from twlog.errors import TwlogError
from twlog.partition import TopicPartition

__all__ = ["routes", "start_sampling"]

#: A partition's lag is counted in messages when it is at most this many bytes (else C{lag_messages} is null),
#: and one request counts at most L{LAG_COUNT_TOTAL_BYTES} over all the group's partitions.
LAG_COUNT_MAX_BYTES = 1024 * 1024
LAG_COUNT_TOTAL_BYTES = 8 * 1024 * 1024

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def routes(context) -> list[Route]:
    return [
        Route("GET", "groups", lambda api: guarded(context, list_groups(context, api))),
        Route("GET", "groups/{group}", lambda api: guarded(context, describe(context, api))),
        Route("POST", "groups/{group}/reset", lambda api: guarded(context, reset(context, api))),
        Route("DELETE", "groups/{group}", lambda api: guarded(context, delete(context, api))),
    ]


async def list_groups(context, api: ApiRequest) -> dict:
    text = (api.arg("filter") or "").lower()
    sort = api.choice("sort", ("name", "lag", "members"), "name")
    order = api.choice("order", ("asc", "desc"), "asc")
    offset = api.int_arg("offset", 0, low=0)
    limit = api.int_arg("limit", DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
    require_zookeeper(context)
    zk = context.zk
    names = [name for name in await sorted_children(zk, paths.CONSUMERS) if text in name.lower()]
    sampler = context.parts.get(SAMPLER)
    samples = sampler.latest if sampler is not None else {}
    members = {name: samples[name].members for name in names if name in samples}  # (as of the sample)
    if sort == "members":  # (the groups not sampled yet counted now)
        members.update(await _member_counts(zk, [name for name in names if name not in members]))
    if sort == "name":
        names.sort(key=natural_key, reverse=order == "desc")
    else:
        def value(name: str):
            return members[name] if sort == "members" else (samples[name].lag if name in samples else None)
        known = sorted((n for n in names if value(n) is not None), key=lambda n: (value(n), natural_key(n)),
                       reverse=order == "desc")
        names = known + sorted((n for n in names if value(n) is None), key=natural_key)  # (unknown last)
    page = names[offset:offset + limit]
    members.update(await _member_counts(zk, [name for name in page if name not in members]))
    missing = [name for name in page if name not in samples]
    topics = dict(zip(missing, await _gather([sorted_children(zk, f"{paths.group_path(n)}/offsets")
                                              for n in missing])))
    rows = []
    for name in page:
        sample = samples.get(name)
        rows.append({"group": name, "members": members[name],
                     "topics": list(sample.topics) if sample is not None else topics[name],
                     "lag_bytes": sample.lag if sample is not None else None,
                     "sampled_at": sample.t if sample is not None else None})
    return {"total": len(names), "offset": offset, "limit": limit, "groups": rows, "problems": []}


async def _member_counts(zk, names: list[str]) -> dict[str, int]:
    counts = await _gather([sorted_children(zk, paths.consumer_ids_path(name)) for name in names])
    return {name: len(ids) for name, ids in zip(names, counts)}


async def _gather(coroutines) -> list:
    results = await DeferredList([Deferred.fromCoroutine(c) for c in coroutines], fireOnOneErrback=True,
                                 consumeErrors=True)
    return [value for _, value in results]


async def _existing(context, group: str) -> None:
    require_zookeeper(context)
    try:
        await check_group(context.zk, group)
    except GroupNotFound as e:
        raise ApiError(404, str(e)) from None


async def describe(context, api: ApiRequest) -> dict:
    group = api.params["group"]
    await _existing(context, group)
    connect = broker_connect(context)
    [description] = await describe_groups(context.zk, group, reactor=context.reactor, timeout_s=context.timeout_s,
                                          options=context.options, connect=connect)
    answer = group_json(description)
    answer["live"] = bool(description.members)
    answer["problems"] = description.problems()
    counted = await _lag_messages(context, description, connect)
    for row, status in zip(answer["partitions"], description.partitions):
        row["lag_messages"] = counted.get(status.topic_partition)
    return answer


async def _lag_messages(context, description, connect) -> dict[TopicPartition, int]:
    """The lag in messages of each partition whose lag is at most L{LAG_COUNT_MAX_BYTES} (in all at most
    L{LAG_COUNT_TOTAL_BYTES}), counted on its leader; a lag of 0 is 0 messages."""
    counted: dict[TopicPartition, int] = {}
    budget = LAG_COUNT_TOTAL_BYTES
    wanted: dict[str, list] = {}
    for p in description.partitions:
        if p.lag == 0:
            counted[p.topic_partition] = 0
        elif p.lag is not None and p.lag <= min(LAG_COUNT_MAX_BYTES, budget):
            budget -= p.lag
            wanted.setdefault(p.topic, []).append(p)
    for topic, statuses in sorted(wanted.items()):
        leaders = await registered_partitions(context.zk, topic, context.options.listener)
        for p in statuses:
            address = leaders.get(p.topic_partition)
            if address is None:
                continue
            connection = connect(*address)
            try:
                counted[p.topic_partition] = await count_messages(connection.request, p.topic_partition, p.offset,
                                                                  p.latest, LAG_COUNT_MAX_BYTES)
            except TwlogError:  # (the partition changed meanwhile, its broker went: unknown)
                pass
            finally:
                await connection.close()
    return counted


def _reset_request(api: ApiRequest):
    body = api.json()
    if not isinstance(body, dict):
        raise bad_parameter("body", "a JSON object {\"topic\", \"partition\", \"to\", \"dry_run\"} is needed")
    topic = body.get("topic")
    if topic is not None and (not isinstance(topic, str) or not topic):
        raise bad_parameter("topic", "a topic name, or null for every topic the group has offsets for")
    partition = body.get("partition")
    if partition is not None and not (isinstance(partition, str) and partition) and not (
            isinstance(partition, int) and not isinstance(partition, bool)):
        raise bad_parameter("partition", "a partition name (\"0-1\", \"3\") or null for all")
    dry_run = body.get("dry_run", True)
    if not isinstance(dry_run, bool):
        raise bad_parameter("dry_run", "true (a preview) or false (apply)")
    if "to" not in body:
        raise bad_parameter("to", "say where to reset to")
    try:
        target = parse_target(body["to"])
    except BadResetParameter as e:
        raise bad_parameter(e.parameter, str(e)) from None
    return topic, None if partition is None else str(partition), target, dry_run


async def reset(context, api: ApiRequest) -> dict:
    group = api.params["group"]
    topic, partition, target, dry_run = _reset_request(api)
    await _existing(context, group)
    await auth.authorize(api, [("Read", "Group", group)]
                         + ([("Describe", "Topic", topic)] if topic is not None else []))
    try:
        plan = await plan_reset(context.zk, group, topic, partition, target, allow_partial=True,
                                where=context.zookeeper, reactor=context.reactor, timeout_s=context.timeout_s,
                                options=context.options, connect=broker_connect(context))
        if topic is None:
            await auth.authorize(api, [("Describe", "Topic", t) for t in sorted({r.tp.topic for r in plan.rows})])
        if not dry_run:
            await apply_reset(context.zk, plan)
    except UnknownTopic as e:
        raise ApiError(404, str(e)) from None
    except BadResetParameter as e:
        raise bad_parameter(e.parameter, str(e)) from None
    except (OffsetRefused, WalkTooFar) as e:
        raise bad_parameter("to", str(e)) from None
    except ResetRefused as e:
        raise ApiError(409, str(e)) from None
    except ValueError as e:  # (live members)
        raise ApiError(409, str(e)) from None
    if not dry_run:
        api.changed(f"reset group {group}'s offsets of {len(plan.rows)} partition(s) to {_target_text(target)}: "
                    + ", ".join(f"{r.tp} {r.offset}->{r.new_offset}" for r in plan.rows))
    return {"rows": [{"topic": r.tp.topic, "partition": r.tp.name, "offset": r.offset, "new_offset": r.new_offset,
                      "clamped": r.clamped} for r in plan.rows],
            "applied": not dry_run, "left_out": plan.left_out}


def _target_text(target) -> str:
    if isinstance(target, tuple):
        return f"{target[0]} {target[1]}"
    return f"offset {target}" if isinstance(target, int) else target


async def delete(context, api: ApiRequest) -> dict:
    group = api.params["group"]
    await _existing(context, group)
    await auth.authorize(api, [("Delete", "Group", group)])
    try:
        deleted = await delete_group(context.zk, group)
    except GroupNotFound as e:
        raise ApiError(404, str(e)) from None
    except ValueError as e:
        raise ApiError(409, str(e)) from None
    api.changed(f"deleted group {group} (its committed offsets of {', '.join(deleted) or 'no topic'})")
    return {"deleted": deleted}
