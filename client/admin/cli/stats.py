"""Statistics and running-state commands: statsAll, brokerConsumeStats, consumerStatus.

statsAll reads each master's VIEW_BROKER_STATS_DATA counters (messages put to a topic, got by a
group, over the last minute and day); brokerConsumeStats one broker's GET_BROKER_CONSUME_STATS;
consumerStatus asks each consumer client of a group for its running info
(GET_CONSUMER_RUNNING_INFO, through the broker it is connected to).
"""

from __future__ import annotations

import contextlib

import click

from tidemq.client.admin.api import AdminClient
from tidemq.client.admin.cli.base import (
    CommandError,
    Output,
    Table,
    common,
    format_time,
    main,
    parse_bool,
    run,
)
from tidemq.client.errors import BrokerResponseError, TideMQError
from tidemq.client.protocol.group_admin import BrokerStatsData, ConsumerRunningInfo
from tidemq.client.protocol.heartbeat import MessageQueue
from tidemq.client.protocol.models import MASTER_ID
from tidemq.client.remoting.codes import version_desc

RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"
TOPIC_PUT_NUMS, GROUP_GET_NUMS = "TOPIC_PUT_NUMS", "GROUP_GET_NUMS"

STATS_COLUMNS = [
    "#Topic",
    "#Consumer Group",
    "#Accumulation",
    "#InTPS",
    "#OutTPS",
    "#InMsg24Hour",
    "#OutMsg24Hour",
]


async def _stats(admin: AdminClient, address: str, name: str, key: str) -> BrokerStatsData | None:
    """A counter, or None when the broker has none by that key (nothing put or got yet)."""
    try:
        return await admin.broker_stats_data(address, name, key)
    except BrokerResponseError:
        return None


async def _topic_rows(admin: AdminClient, topic: str, active_only: bool) -> list[dict[str, object]]:
    route = await admin.topic_route(topic)
    masters = [b.broker_addrs[MASTER_ID] for b in route.broker_datas if MASTER_ID in b.broker_addrs]
    in_tps, in_24h = 0.0, 0
    groups: set[str] = set()
    for address in masters:
        data = await _stats(admin, address, TOPIC_PUT_NUMS, topic)
        if data is not None:
            in_tps += data.stats_minute.tps
            in_24h += data.sum_24h()
        with contextlib.suppress(TideMQError):
            groups.update(await admin.topic_consumed_by(address, topic))
    rows: list[dict[str, object]] = []
    for group in sorted(groups):
        out_tps, out_24h = 0.0, 0
        for address in masters:
            data = await _stats(admin, address, GROUP_GET_NUMS, f"{topic}@{group}")
            if data is not None:
                out_tps += data.stats_minute.tps
                out_24h += data.sum_24h()
        accumulation = 0
        with contextlib.suppress(TideMQError):
            accumulation = max((await admin.examine_consume_stats(group, topic)).total_diff(), 0)
        if not active_only or in_24h > 0 or out_24h > 0:
            rows.append(
                {
                    "topic": topic,
                    "consumerGroup": group,
                    "accumulation": accumulation,
                    "inTps": in_tps,
                    "outTps": out_tps,
                    "inMsg24Hour": in_24h,
                    "outMsg24Hour": out_24h,
                }
            )
    if not groups and (not active_only or in_24h > 0):
        rows.append(
            {
                "topic": topic,
                "consumerGroup": "",
                "accumulation": 0,
                "inTps": in_tps,
                "outTps": None,
                "inMsg24Hour": in_24h,
                "outMsg24Hour": "NO_CONSUMER",
            }
        )
    return rows


@main.command("statsAll")
@common
@click.option("-a", "--activeTopic", "active", is_flag=True, help="Only topics with traffic.")
@click.option("-t", "--topic", default=None, help="Only this topic.")
def stats_all(namesrv_addr: str | None, as_json: bool, active: bool, topic: str | None) -> None:
    """Print each topic's and consumer group's traffic (last minute TPS, last 24 h messages)
    and the group's accumulation."""

    async def work(admin: AdminClient) -> Output:
        if topic is not None:
            topics = [topic]
        else:
            topics = [
                t for t in await admin.topic_list() if not t.startswith((RETRY_PREFIX, DLQ_PREFIX))
            ]
        data: list[dict[str, object]] = []
        for name in topics:
            try:
                data.extend(await _topic_rows(admin, name, active))
            except TideMQError:
                if topic is not None:
                    raise
        table = Table(STATS_COLUMNS)
        for row in data:
            table.rows.append(
                [
                    row["topic"],
                    row["consumerGroup"],
                    row["accumulation"],
                    f"{row['inTps']:.2f}",
                    "" if row["outTps"] is None else f"{row['outTps']:.2f}",
                    row["inMsg24Hour"],
                    row["outMsg24Hour"],
                ]
            )
        return Output(data, tables=[table])

    run("statsAll", namesrv_addr, as_json, work)


@main.command("brokerConsumeStats")
@common
@click.option("-b", "--brokerAddr", "broker_addr", required=True, help="Broker address.")
@click.option("-t", "--timeoutMillis", "timeout_ms", type=int, default=50000, show_default=True)
@click.option("-l", "--level", type=int, default=0, show_default=True, help="Rows with diff >= it.")
@click.option("-o", "--order", default="false", show_default=True, help="Ordered topics only.")
def broker_consume_stats(
    namesrv_addr: str | None,
    as_json: bool,
    broker_addr: str,
    timeout_ms: int,
    level: int,
    order: str,
) -> None:
    """Print every group's progress on one broker, queue by queue, and its total lag."""
    is_order = parse_bool(order)
    if timeout_ms < 1:
        raise click.BadParameter("timeoutMillis must be at least 1")

    async def work(admin: AdminClient) -> Output:
        stats = await admin.broker_consume_stats(broker_addr, is_order, timeout_ms / 1000)
        table = Table(
            [
                "#Topic",
                "#Group",
                "#Broker Name",
                "#QID",
                "#Broker Offset",
                "#Consumer Offset",
                "#Diff",
                "#LastTime",
            ]
        )
        rows: list[dict[str, object]] = []
        for group, per_topic in stats.groups:
            for one in per_topic:
                for mq in sorted(one.offset_table):
                    o = one.offset_table[mq]
                    if o.diff < level:
                        continue
                    last = format_time(o.last_timestamp) or "N/A"
                    table.rows.append(
                        [
                            mq.topic,
                            group,
                            mq.broker_name,
                            mq.queue_id,
                            o.broker_offset,
                            o.consumer_offset,
                            o.diff,
                            last,
                        ]
                    )
                    rows.append({"group": group, **o.progress_data(mq)})
        data = {"brokerAddr": stats.broker_addr, "totalDiff": stats.total_diff, "queues": rows}
        return Output(data, tables=[table], lines_after=["", f"Diff Total: {stats.total_diff}"])

    run("brokerConsumeStats", namesrv_addr, as_json, work)


def _subscriptions(info: ConsumerRunningInfo) -> set[tuple[str, str]]:
    return {(s.topic, s.sub_string) for s in info.subscription_set}


async def _rebalance_problems(
    admin: AdminClient, infos: dict[str, ConsumerRunningInfo]
) -> list[str]:
    """Queues held by two clients at once, or by none (CLUSTERING groups)."""
    holders: dict[MessageQueue, list[str]] = {}
    for client_id, info in infos.items():
        for mq, pq in info.mq_table.items():
            if not pq.droped:
                holders.setdefault(mq, []).append(client_id)
    problems = [
        f"queue {mq.topic}/{mq.broker_name}/{mq.queue_id} held by {', '.join(sorted(ids))}"
        for mq, ids in sorted(holders.items())
        if len(ids) > 1
    ]
    first = next(iter(infos.values()))
    if first.properties.get("messageModel") != "CLUSTERING":
        return problems
    for topic in sorted({t for t, _ in _subscriptions(first)}):
        try:
            route = await admin.topic_route(topic)
        except TideMQError:
            continue
        problems.extend(
            f"queue {topic}/{q.broker_name}/{qid} held by no client"
            for q in route.queue_datas
            for qid in range(q.read_queue_nums)
            if MessageQueue(topic, q.broker_name, qid) not in holders
        )
    return problems


def _running_info_lines(info: ConsumerRunningInfo) -> list[str]:
    lines = ["#Consumer Properties#"]
    lines += [f"{k:<40s}: {v}" for k, v in sorted(info.properties.items())]
    lines += ["", "#Consumer Subscription#"]
    for i, sub in enumerate(sorted(info.subscription_set, key=lambda s: s.topic), 1):
        lines.append(
            f"{i:03d} Topic: {sub.topic:<40s} ClassFilter: {str(sub.class_filter_mode).lower():<8s}"
            f" SubExpression: {sub.sub_string}"
        )
    offsets = Table(["#Topic", "#Broker Name", "#QID", "#Consumer Offset"])
    detail = Table(
        [
            "#Topic",
            "#Broker Name",
            "#QID",
            "#Cached Msgs",
            "#Cached Min",
            "#Cached Max",
            "#Locked",
            "#Dropped",
            "#Last Pull",
        ]
    )
    for mq in sorted(info.mq_table):
        pq = info.mq_table[mq]
        offsets.rows.append([mq.topic, mq.broker_name, mq.queue_id, pq.commit_offset])
        detail.rows.append(
            [
                mq.topic,
                mq.broker_name,
                mq.queue_id,
                pq.cached_msg_count,
                pq.cached_msg_min_offset,
                pq.cached_msg_max_offset,
                str(pq.locked).lower(),
                str(pq.droped).lower(),
                format_time(pq.last_pull_timestamp),
            ]
        )
    lines += ["", "#Consumer Offset#", *offsets.render()]
    lines += ["", "#Consumer MQ Detail#", *detail.render()]
    if info.status_table:
        rt = Table(
            ["#Topic", "#Pull RT", "#Pull TPS", "#Consume RT", "#ConsumeOK TPS", "#ConsumeFailed"]
        )
        for topic, s in sorted(info.status_table.items()):
            rt.rows.append(
                [
                    topic,
                    f"{s.pull_rt:.2f}",
                    f"{s.pull_tps:.2f}",
                    f"{s.consume_rt:.2f}",
                    f"{s.consume_ok_tps:.2f}",
                    s.consume_failed_msgs,
                ]
            )
        lines += ["", "#Consumer RT&TPS#", *rt.render()]
    return lines


def _running_info_data(info: ConsumerRunningInfo) -> dict[str, object]:
    return {
        "properties": info.properties,
        "subscriptionSet": [s.to_dict() for s in info.subscription_set],
        "mqTable": [
            {"messageQueue": mq.to_dict(), **info.mq_table[mq].to_dict()}
            for mq in sorted(info.mq_table)
        ],
        "statusTable": {t: s.to_dict() for t, s in sorted(info.status_table.items())},
    }


@main.command("consumerStatus")
@common
@click.option("-g", "--consumerGroup", "group", required=True, help="Consumer group.")
@click.option("-i", "--clientId", "client_id", default=None, help="Only this client, in full.")
@click.option("-s", "--jstack", is_flag=True, help="Accepted; Python clients send no stack.")
def consumer_status(
    namesrv_addr: str | None, as_json: bool, group: str, client_id: str | None, jstack: bool
) -> None:
    """Ask a group's consumer clients for their running state: subscriptions, queues held,
    offsets and messages waiting; checks they agree on subscriptions and share the queues."""

    async def work(admin: AdminClient) -> Output:
        if client_id is not None:
            info = await admin.examine_consumer_running_info(group, client_id, jstack)
            return Output(_running_info_data(info), lines_before=_running_info_lines(info))
        connection = await admin.examine_consumer_connection(group)
        infos: dict[str, ConsumerRunningInfo] = {}
        table = Table(["#Index", "#ClientId", "#Version", "#Queues", "#Cached Msgs"])
        clients = sorted(connection.connections, key=lambda c: c.client_id)
        failures: dict[str, str] = {}
        for c in clients:
            try:
                info = await admin.examine_consumer_running_info(group, c.client_id, jstack)
            except TideMQError as exc:
                failures[c.client_id] = str(exc)
                continue
            infos[c.client_id] = info
            cached = sum(pq.cached_msg_count for pq in info.mq_table.values())
            table.rows.append(
                [
                    f"{len(infos):03d}",
                    c.client_id,
                    version_desc(c.version),
                    len(info.mq_table),
                    cached,
                ]
            )
        if not infos:
            reason = next(iter(failures.values()), "no client answered")
            raise CommandError(f"no consumer of group {group} answered: {reason}")
        same = len({frozenset(_subscriptions(i)) for i in infos.values()}) == 1
        problems = await _rebalance_problems(admin, infos) if same else []
        after = [""]
        after += [f"{cid}: no answer ({why})" for cid, why in sorted(failures.items())]
        after.append(
            "Same subscription in the same group of consumer"
            if same
            else "WARN: Different subscription in the same group of consumer!!!"
        )
        if same:
            after.append(f"Rebalance {'OK' if not problems else 'Failed'}")
            after += [f"  {p}" for p in problems]
        data = {
            "group": group,
            "clients": {cid: _running_info_data(i) for cid, i in infos.items()},
            "noAnswer": failures,
            "sameSubscription": same,
            "rebalanceOk": same and not problems,
            "rebalanceProblems": problems,
        }
        return Output(data, tables=[table], lines_after=after)

    run("consumerStatus", namesrv_addr, as_json, work)
