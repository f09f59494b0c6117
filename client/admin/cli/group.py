"""Consumer and producer group commands: updateSubGroup, updateSubGroupList, deleteSubGroup,
consumerProgress, consumerConnection, producerConnection, resetOffsetByTime,
skipAccumulatedMessage, cloneGroupOffset (consumerStatus is in `stats`)."""

from __future__ import annotations

import click

from tidemq.client.admin.api import AdminClient
from tidemq.client.admin.cli.base import (
    LIST_REQUEST_SIZE,
    CommandError,
    Output,
    Table,
    common,
    format_time,
    main,
    need_one,
    parse_bool,
    parse_timestamp,
    read_config_list,
    run,
)
from tidemq.client.errors import BrokerResponseError, TideMQError
from tidemq.client.protocol.heartbeat import ConsumerConnection, ConsumeType, MessageQueue
from tidemq.client.protocol.models import SubscriptionGroupConfig
from tidemq.client.protocol.operators5 import GrpcClientInfo, PopQueueProgress
from tidemq.client.remoting.codes import version_desc

RETRY_PREFIX = "%RETRY%"
GRPC_CONSUMER_TYPES = ("PUSH_CONSUMER", "SIMPLE_CONSUMER", "PULL_CONSUMER")


def group_config_line(config: SubscriptionGroupConfig) -> str:
    fields = ", ".join(
        f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in config.to_dict().items()
    )
    return f"SubscriptionGroupConfig [{fields}]"


async def _addresses(admin: AdminClient, broker_addr: str | None, cluster: str | None) -> list[str]:
    if broker_addr is not None:
        return [broker_addr]
    return [b.address for b in await admin.masters(cluster)]


@main.command("updateSubGroup")
@common
@click.option("-g", "--groupName", "group", required=True, help="Consumer group.")
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Create on this broker.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Create on every master.")
@click.option("-s", "--consumeEnable", "consume_enable", default="true", show_default=True)
@click.option("-m", "--consumeFromMinEnable", "from_min", default="true", show_default=True)
@click.option("-d", "--consumeBroadcastEnable", "broadcast", default="true", show_default=True)
@click.option("-q", "--retryQueueNums", "retry_queues", type=int, default=1, show_default=True)
@click.option("-r", "--retryMaxTimes", "retry_max", type=int, default=16, show_default=True)
@click.option(
    "-i",
    "--brokerId",
    "broker_id",
    type=int,
    default=0,
    show_default=True,
    help="Which broker of the group consumers read from (0 = master; needs slaveReadEnable).",
)
@click.option(
    "-w",
    "--whichBrokerWhenConsumeSlowly",
    "slow_broker_id",
    type=int,
    default=1,
    show_default=True,
    help="Which broker to read from when the consumer falls far behind.",
)
@click.option("-a", "--notifyConsumerIdsChanged", "notify", default="true", show_default=True)
def update_sub_group(
    namesrv_addr: str | None,
    as_json: bool,
    group: str,
    broker_addr: str | None,
    cluster: str | None,
    consume_enable: str,
    from_min: str,
    broadcast: str,
    retry_queues: int,
    retry_max: int,
    broker_id: int,
    slow_broker_id: int,
    notify: str,
) -> None:
    """Create or update a subscription group."""
    need_one("updateSubGroup", b=broker_addr, c=cluster)
    config = SubscriptionGroupConfig(
        group_name=group,
        consume_enable=parse_bool(consume_enable),
        consume_from_min_enable=parse_bool(from_min),
        consume_broadcast_enable=parse_bool(broadcast),
        retry_queue_nums=retry_queues,
        retry_max_times=retry_max,
        broker_id=broker_id,
        which_broker_when_consume_slowly=slow_broker_id,
        notify_consumer_ids_changed_enable=parse_bool(notify),
    )

    async def work(admin: AdminClient) -> Output:
        addresses = await _addresses(admin, broker_addr, cluster)
        lines = []
        for address in addresses:
            await admin.update_subscription_group(address, config)
            lines.append(f"create subscription group to {address} success.")
        lines.append(group_config_line(config))
        return Output({"brokers": addresses, "groupConfig": config.to_dict()}, lines_before=lines)

    run("updateSubGroup", namesrv_addr, as_json, work)


@main.command("updateSubGroupList")
@common
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Create on this broker.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Create on every master.")
@click.option(
    "-f",
    "--filename",
    "filename",
    required=True,
    help="A JSON file: a list of SubscriptionGroupConfig objects (groupName, ...).",
)
def update_sub_group_list(
    namesrv_addr: str | None,
    as_json: bool,
    broker_addr: str | None,
    cluster: str | None,
    filename: str,
) -> None:
    """Create or update subscription groups in batch (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST)."""
    need_one("updateSubGroupList", b=broker_addr, c=cluster)

    async def work(admin: AdminClient) -> Output:
        configs = read_config_list(filename, SubscriptionGroupConfig.from_dict, "groupName")
        addresses = await _addresses(admin, broker_addr, cluster)
        lines = []
        for address in addresses:
            for start in range(0, len(configs), LIST_REQUEST_SIZE):
                batch = configs[start : start + LIST_REQUEST_SIZE]
                await admin.update_subscription_group_list(address, batch)
            lines.append(
                f"submit batch of subscription group config to {address} success, "
                "please check the result later."
            )
        return Output({"brokers": addresses, "groups": len(configs)}, lines_before=lines)

    run("updateSubGroupList", namesrv_addr, as_json, work)


@main.command("deleteSubGroup")
@common
@click.option("-g", "--groupName", "group", required=True, help="Consumer group.")
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Delete on this broker.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Delete on every master.")
@click.option("-r", "--removeOffset", "remove_offset", is_flag=True, help="Drop its offsets too.")
def delete_sub_group(
    namesrv_addr: str | None,
    as_json: bool,
    group: str,
    broker_addr: str | None,
    cluster: str | None,
    remove_offset: bool,
) -> None:
    """Delete a subscription group."""
    need_one("deleteSubGroup", b=broker_addr, c=cluster)

    async def work(admin: AdminClient) -> Output:
        addresses = await _addresses(admin, broker_addr, cluster)
        for address in addresses:
            await admin.delete_subscription_group(address, group, remove_offset)
        lines = [
            f"delete subscription group [{group}] from broker [{a}] in cluster [{cluster or ''}]"
            " success."
            for a in addresses
        ]
        return Output({"group": group, "brokers": addresses}, lines_before=lines)

    run("deleteSubGroup", namesrv_addr, as_json, work)


PROGRESS_COLUMNS = ["#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset"]


async def _queue_holders(admin: AdminClient, group: str) -> dict[MessageQueue, str]:
    """Which client IP holds each queue of `group` (RocketMQ's getMessageQueueAllocationResult:
    each connected client's running info, its clientId up to the "@"); {} when none is online."""
    try:
        connection = await admin.examine_consumer_connection(group)
    except TideMQError:
        return {}
    holders: dict[MessageQueue, str] = {}
    for client in connection.connections:
        try:
            info = await admin.examine_consumer_running_info(group, client.client_id)
        except TideMQError:
            continue  # gone meanwhile: its queues show N/A
        holders.update(dict.fromkeys(info.mq_table, client.client_id.split("@")[0]))
    return holders


@main.command("consumerProgress")
@common
@click.option("-g", "--groupName", "group", default=None, help="Consumer group (else: all).")
@click.option("-t", "--topicName", "topic", default="", help="Only this topic.")
@click.option(
    "-s",
    "--showClientIP",
    "show_ip",
    is_flag=False,
    flag_value="true",
    default="false",
    show_default=True,
    help="true: a #Client IP column, the IP of the client consuming each queue.",
)
def consumer_progress(
    namesrv_addr: str | None, as_json: bool, group: str | None, topic: str, show_ip: str
) -> None:
    """Print a group's progress per queue and its lag (#Diff), or every group's total.

    As RocketMQ's: a group no broker holds offsets of (unknown, or it never consumed) is an
    error (exit 1); `-s true` asks each connected client which queues it holds."""
    with_ip = parse_bool(show_ip)

    async def work(admin: AdminClient) -> Output:
        if group is None:
            return await _all_groups(admin)
        stats = await admin.examine_consume_stats(group, topic)
        if not stats.offset_table:
            where = f" of topic {topic}" if topic else ""
            raise CommandError(
                f"consumer group {group} has no consume offsets{where} on any broker "
                "(no such group, or it never consumed)"
            )
        holders = await _queue_holders(admin, group) if with_ip else {}
        pop = await _pop_queues(admin, group, topic)
        pop_columns = ["#Inflight", "#Invisible", "#Acked"] if pop else []
        columns = [
            *PROGRESS_COLUMNS,
            *(["#Client IP"] if with_ip else []),
            "#Diff",
            *pop_columns,
            "#LastTime",
        ]
        table = Table(columns)
        data = []
        for mq in sorted(stats.offset_table):
            o = stats.offset_table[mq]
            ip = [holders.get(mq, "N/A")] if with_ip else []
            last = format_time(o.last_timestamp) or "N/A"
            row = [mq.topic, mq.broker_name, mq.queue_id, o.broker_offset, o.consumer_offset]
            popped = pop.get((mq.broker_name, mq.topic, mq.queue_id))
            flying = [popped.in_flight, popped.invisible, popped.acked] if popped else [0, 0, 0]
            table.rows.append([*row, *ip, o.diff, *(flying if pop else []), last])
            queue = o.progress_data(mq)
            if with_ip:
                queue["clientIp"] = holders.get(mq)
            if pop:
                queue.update(zip(("inflight", "invisible", "acked"), flying, strict=True))
            data.append(queue)
        total = stats.total_diff()
        after = ["", f"Consume TPS: {stats.consume_tps:.2f}", f"Diff Total: {total}"]
        return Output(
            {"queues": data, "consumeTps": stats.consume_tps, "diffTotal": total},
            tables=[table],
            lines_after=after,
        )

    run("consumerProgress", namesrv_addr, as_json, work)


async def _pop_queues(
    admin: AdminClient, group: str, topic: str
) -> dict[tuple[str, str, int], PopQueueProgress]:
    """The group's POP state per (broker, topic, queue): RocketMQ 5 shows messages in flight
    beside the offsets; {} for a group that does not pop, or brokers without the call."""
    try:
        rows = await admin.examine_pop_progress(group, topic)
    except TideMQError:
        return {}
    return {(r.broker_name, r.topic, r.queue_id): r for r in rows}


async def _all_groups(admin: AdminClient) -> Output:
    table = Table(["#Group", "#Count", "#Version", "#Type", "#Model", "#TPS", "#Diff Total"])
    data = []
    for name in await admin.topic_list():
        if not name.startswith(RETRY_PREFIX):
            continue
        group = name[len(RETRY_PREFIX) :]
        stats = await admin.examine_consume_stats(group)
        count, version, kind, model = 0, "OFFLINE", "", ""
        try:
            cc = await admin.examine_consumer_connection(group)
        except TideMQError:
            pass
        else:
            count = len(cc.connections)
            version = version_desc(min((c.version for c in cc.connections), default=0))
            kind = "PULL" if cc.consume_type is ConsumeType.CONSUME_ACTIVELY else "PUSH"
            model = cc.message_model.value
        total = stats.total_diff()
        table.rows.append([group, count, version, kind, model, int(stats.consume_tps), total])
        data.append(
            {"group": group, "count": count, "consumeTps": stats.consume_tps, "diffTotal": total}
        )
    return Output(data, tables=[table])


async def _grpc_consumers(admin: AdminClient, group: str) -> list[GrpcClientInfo]:
    """The group's 5.x consumers on the masters' gRPC ports (RocketMQ 5 lists them with the
    4.x connections); none from brokers that do not know the call."""
    try:
        found = await admin.examine_grpc_clients()
    except TideMQError:
        return []
    return [c for c in found if c.group == group and c.client_type in GRPC_CONSUMER_TYPES]


@main.command("consumerConnection")
@common
@click.option("-g", "--consumerGroup", "group", required=True, help="Consumer group.")
def consumer_connection(namesrv_addr: str | None, as_json: bool, group: str) -> None:
    """List a consumer group's connections and subscriptions (5.x clients over gRPC too: their
    language and version as their settings name them, type POP)."""

    async def work(admin: AdminClient) -> Output:
        try:
            cc: ConsumerConnection | None = await admin.examine_consumer_connection(group)
        except BrokerResponseError:
            cc = None
        grpc = await _grpc_consumers(admin, group)
        if cc is None and not grpc:
            await admin.examine_consumer_connection(group)  # its refusal, as RocketMQ's
        table = Table(["#", "#ClientId", "#ClientAddr", "#Language", "#Version"])
        rows = (
            []
            if cc is None
            else [
                [c.client_id, c.client_addr, c.language, version_desc(c.version)]
                for c in sorted(cc.connections, key=lambda c: c.client_id)
            ]
        )
        rows += [[c.client_id, c.client_addr, c.language, c.version] for c in grpc]
        table.rows = [[f"{i:03d}", *row] for i, row in enumerate(rows, 1)]
        data = cc.to_dict() if cc is not None else {}
        if grpc:
            data["grpcClients"] = [{**c.to_dict(), "brokerName": c.broker_name} for c in grpc]
        out = Output(data, tables=[table], lines_after=[""])
        if cc is not None:
            subs = Table(["#", "#Topic", "#SubExpression"])
            for i, (topic, sub) in enumerate(sorted(cc.subscriptions.items()), 1):
                subs.rows.append([f"{i:03d}", topic, sub.sub_string])
            out.lines_after += ["Below is subscription:", *subs.render()]
            out.lines_after += [
                "",
                f"ConsumeType: {cc.consume_type.value}",
                f"MessageModel: {cc.message_model.value}",
                f"ConsumeFromWhere: {cc.consume_from_where.value}",
            ]
        else:  # 5.x clients alone: what their settings subscribe to
            topics = sorted({t for c in grpc for t in c.topics})
            out.lines_after += [f"5.x (gRPC) consumers, POP; topics: {', '.join(topics) or '-'}"]
        return out

    run("consumerConnection", namesrv_addr, as_json, work)


@main.command("producerConnection")
@common
@click.option("-g", "--producerGroup", "group", required=True, help="Producer group.")
@click.option("-t", "--topic", required=True, help="A topic it sends to.")
def producer_connection(namesrv_addr: str | None, as_json: bool, group: str, topic: str) -> None:
    """List a producer group's connections."""

    async def work(admin: AdminClient) -> Output:
        pc = await admin.examine_producer_connection(group, topic)
        table = Table(["#", "#ClientId", "#ClientAddr", "#Language", "#Version"])
        for i, c in enumerate(sorted(pc.connections, key=lambda c: c.client_id), 1):
            table.rows.append(
                [f"{i:04d}", c.client_id, c.client_addr, c.language, version_desc(c.version)]
            )
        return Output(pc.to_dict(), tables=[table])

    run("producerConnection", namesrv_addr, as_json, work)


@main.command("resetOffsetByTime")
@common
@click.option("-g", "--group", required=True, help="Consumer group.")
@click.option("-t", "--topic", required=True, help="Topic.")
@click.option(
    "-s",
    "--timestamp",
    "timestamp_text",
    required=True,
    help="now, milliseconds, or yyyy-MM-dd#HH:mm:ss:SSS.",
)
@click.option("-f", "--force", default="true", show_default=True, help="Also move forwards.")
def reset_offset_by_time(
    namesrv_addr: str | None,
    as_json: bool,
    group: str,
    topic: str,
    timestamp_text: str,
    force: str,
) -> None:
    """Move a group's offsets to a point in time, online consumers included."""
    timestamp = parse_timestamp(timestamp_text)
    forced = parse_bool(force)

    async def work(admin: AdminClient) -> Output:
        table_ = await admin.reset_offset_by_time(group, topic, timestamp, forced)
        head = [
            f"rollback consumer offset by specified group[{group}], topic[{topic}], "
            f"force[{str(forced).lower()}], timestamp(string)[{timestamp_text}], "
            f"timestamp(long)[{timestamp}]"
        ]
        table = Table(["#brokerName", "#queueId", "#offset"])
        data = []
        for mq in sorted(table_):
            table.rows.append([mq.broker_name, mq.queue_id, table_[mq]])
            data.append(
                {"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": table_[mq]}
            )
        return Output(data, lines_before=head, tables=[table])

    run("resetOffsetByTime", namesrv_addr, as_json, work)


@main.command("skipAccumulatedMessage")
@common
@click.option("-g", "--group", required=True, help="Consumer group.")
@click.option("-t", "--topic", required=True, help="Topic.")
@click.option("-c", "--cluster", default=None, help="Accepted (the topic's route decides).")
def skip_accumulated_message(
    namesrv_addr: str | None, as_json: bool, group: str, topic: str, cluster: str | None
) -> None:
    """Move a group's offsets to the end of every queue of a topic: its backlog is skipped."""
    del cluster

    async def work(admin: AdminClient) -> Output:
        offsets = await admin.reset_offset_by_time(group, topic, -1, True)
        table = Table(["#brokerName", "#queueId", "#offset"])
        data = []
        for mq in sorted(offsets):
            table.rows.append([mq.broker_name, mq.queue_id, offsets[mq]])
            data.append(
                {"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": offsets[mq]}
            )
        return Output(data, tables=[table])

    run("skipAccumulatedMessage", namesrv_addr, as_json, work)


@main.command("cloneGroupOffset")
@common
@click.option("-s", "--srcGroup", "src_group", required=True, help="Group to copy from.")
@click.option("-d", "--destGroup", "dest_group", required=True, help="Group to copy to.")
@click.option("-t", "--topic", required=True, help="Topic.")
@click.option(
    "-o",
    "--offline",
    default="false",
    show_default=True,
    help="true: copy even if the source's online consumers do not subscribe to the topic.",
)
def clone_group_offset(
    namesrv_addr: str | None,
    as_json: bool,
    src_group: str,
    dest_group: str,
    topic: str,
    offline: str,
) -> None:
    """Give a group the offsets another group has on a topic (on every master serving it)."""
    is_offline = parse_bool(offline)

    async def work(admin: AdminClient) -> Output:
        brokers = await admin.clone_group_offset_everywhere(
            src_group, dest_group, topic, is_offline
        )
        line = (
            f"clone group offset success. srcGroup[{src_group}], destGroup=[{dest_group}], "
            f"topic[{topic}]"
        )
        data = {"srcGroup": src_group, "destGroup": dest_group, "topic": topic, "brokers": brokers}
        return Output(data, lines_before=[line])

    run("cloneGroupOffset", namesrv_addr, as_json, work)
