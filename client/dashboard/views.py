"""What each dashboard page shows, gathered with the admin API as JSON-ready dicts.

Every function takes an `AdminClient` and returns plain dicts and lists (camelCase keys, as
RocketMQ Dashboard's JSON): the web layer (server.py) only serialises them. Failures are the
admin API's `client.errors` exceptions; a broker that does not answer a per-broker question
is shown with what is known and an `error` line, not dropped.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from tidemq.client.admin.api import AdminClient, BrokerAddress
from tidemq.client.errors import (
    BrokerResponseError,
    ClientError,
    TideMQError,
    TopicNotExistError,
)
from tidemq.client.inflate import ReadableBody, readable_body
from tidemq.client.message import Message
from tidemq.client.protocol.heartbeat import ConsumeType
from tidemq.client.protocol.models import MASTER_ID, TopicConfig, perm_to_string
from tidemq.store.record import StoredMessage

RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
# The topics and groups brokers make for themselves (broker/managers): shown, but labelled
# "system" and left out of the charts.
SYSTEM_TOPICS: Final = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "BenchmarkTest",
    }
)
SYSTEM_GROUPS: Final = frozenset(
    {
        "TOOLS_CONSUMER",
        "FILTERSRV_CONSUMER",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PULL",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
    }
)
REPLY_SUFFIX: Final = "_REPLY_TOPIC"
BODY_PREVIEW: Final = 2048
PAGE_SIZE_MAX: Final = 200


def topic_kind(topic: str, cluster_or_broker_names: frozenset[str] = frozenset()) -> str:
    if topic.startswith(RETRY_PREFIX):
        return "retry"
    if topic.startswith(DLQ_PREFIX):
        return "dlq"
    if topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_") or topic in cluster_or_broker_names:
        return "system"
    if topic.endswith(REPLY_SUFFIX) and topic[: -len(REPLY_SUFFIX)] in cluster_or_broker_names:
        return "system"  # the request-reply topic each cluster gets
    return "normal"


def group_is_system(group: str) -> bool:
    return group in SYSTEM_GROUPS or group.startswith("CID_RMQ_SYS_")


def _number(text: str | None) -> float:
    """The first figure of a runtime-info value ("12.50 3.00 0.10" -> 12.5)."""
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


# --- cluster --------------------------------------------------------------------------------


async def _runtime(admin: AdminClient, address: str) -> dict[str, str] | str:
    try:
        return await admin.runtime_info(address)
    except (TideMQError, OSError, TimeoutError) as exc:
        return str(exc) or type(exc).__name__


async def cluster_view(admin: AdminClient) -> dict[str, Any]:
    """Every broker with its role, version, TPS, disk use, health (a stalled dispatch, a refused
    disk, ...) and (slaves) HA lag in bytes; every master's HA connections."""
    brokers = await admin.brokers()
    infos = await asyncio.gather(*(_runtime(admin, b.address) for b in brokers))
    by_address = dict(zip((b.address for b in brokers), infos, strict=True))
    master_of = {b.broker_name: b.address for b in brokers if b.broker_id == MASTER_ID}
    rows = []
    for broker, info in zip(brokers, infos, strict=True):
        rows.append(
            _broker_row(broker, info, by_address.get(master_of.get(broker.broker_name, "")))
        )
    ha: list[dict[str, Any]] = []
    for broker in brokers:
        if broker.broker_id != MASTER_ID or isinstance(by_address[broker.address], str):
            continue
        try:
            status = await admin.ha_status(broker.address)
        except (TideMQError, OSError, TimeoutError):
            continue
        ha.extend(
            {
                "brokerName": broker.broker_name,
                "master": broker.address,
                "slaveAddr": c.addr,
                # The slave as a broker (its address and id) when it said which one it is.
                "slave": (
                    f"{broker.broker_name}/{c.slave_broker_id} {c.slave_broker_addr}"
                    if c.slave_broker_addr
                    else c.addr
                ),
                "ackOffset": c.slave_ack_offset,
                "diff": c.diff,
                "inSync": c.in_sync,
                "transferKBps": round(c.transferred_byte_in_second / 1024, 2),
            }
            for c in status.ha_connection_info
        )
    return {"brokers": rows, "haConnections": ha}


def _broker_row(
    broker: BrokerAddress, info: dict[str, str] | str, master_info: dict[str, str] | str | None
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "cluster": broker.cluster,
        "brokerName": broker.broker_name,
        "brokerId": broker.broker_id,
        "address": broker.address,
    }
    if isinstance(info, str):
        return {**row, "error": info}
    ha_lag: int | None = None
    if broker.broker_id != MASTER_ID and isinstance(master_info, dict):
        ha_lag = max(
            int(master_info.get("commitLogMaxOffset", 0)) - int(info.get("commitLogMaxOffset", 0)),
            0,
        )
    return {
        **row,
        "role": info.get("brokerRole", ""),
        "version": info.get("brokerVersionDesc", ""),
        "tidemqVersion": info.get("tidemqVersion", ""),
        "inTps": _number(info.get("putTps")),
        "outTps": _number(info.get("getTransferedTps")),
        "putTotal": int(info.get("msgPutTotalTodayNow", 0) or 0),
        "getTotal": int(info.get("msgGetTotalTodayNow", 0) or 0),
        "diskRatio": _number(info.get("commitLogDiskRatio")),
        "diskCapacity": info.get("commitLogDirCapacity", ""),
        "commitLogMaxOffset": int(info.get("commitLogMaxOffset", 0) or 0),
        "haLagBytes": ha_lag,
        "runtime": info.get("runtime", ""),
        # Issue 30 item 3: "serving", or "failing: <reasons>" (the broker's GET /health), and
        # what it serves without (quarantined queues, undeliverable delayed messages); empty
        # from a broker that does not report them.
        "health": info.get("brokerHealth", ""),
        "healthNotes": info.get("brokerHealthNotes", ""),
        "dispatchBehindBytes": int(info.get("dispatchBehindBytes", 0) or 0),
        # Timer messages waiting in the broker's time wheel (RocketMQ's timerCongestNum).
        "timersPending": int(info.get("timerCongestNum", 0) or 0),
    }


# --- topics ---------------------------------------------------------------------------------


async def topics_view(admin: AdminClient) -> dict[str, Any]:
    topics = await admin.topic_list()
    info = await admin.cluster_info()
    names = frozenset(info.cluster_addr_table) | frozenset(info.broker_addr_table)
    return {
        "topics": [{"topic": t, "kind": topic_kind(t, names)} for t in topics],
        "clusters": sorted(info.cluster_addr_table),
    }


async def topic_view(admin: AdminClient, topic: str) -> dict[str, Any]:
    """A topic's route, its queues' min and max offsets and the groups consuming it."""
    route = await admin.topic_route(topic)
    stats = await admin.examine_topic_stats(topic)
    queues: list[dict[str, Any]] = [
        {
            "brokerName": mq.broker_name,
            "queueId": mq.queue_id,
            "minOffset": o.min_offset,
            "maxOffset": o.max_offset,
            "lastUpdateTimestamp": o.last_update_timestamp,
        }
        for mq, o in sorted(stats.offset_table.items())
    ]
    groups: set[str] = set()
    for _, address in await admin.route_masters(topic):
        try:
            groups.update(await admin.topic_consumed_by(address, topic))
        except TideMQError:
            continue
    return {
        "topic": topic,
        "route": {
            "brokers": [
                {
                    "cluster": b.cluster,
                    "brokerName": b.broker_name,
                    "addresses": {str(i): a for i, a in sorted(b.broker_addrs.items())},
                }
                for b in sorted(route.broker_datas, key=lambda b: b.broker_name)
            ],
            "queues": [
                {
                    "brokerName": q.broker_name,
                    "readQueueNums": q.read_queue_nums,
                    "writeQueueNums": q.write_queue_nums,
                    "perm": perm_to_string(q.perm),
                }
                for q in sorted(route.queue_datas, key=lambda q: q.broker_name)
            ],
        },
        "queues": queues,
        "messages": sum(q["maxOffset"] - q["minOffset"] for q in queues),
        "groups": sorted(groups),
    }


async def save_topic(
    admin: AdminClient, config: TopicConfig, cluster: str | None
) -> dict[str, Any]:
    """Create or update the topic on every master (of `cluster`)."""
    masters = await admin.masters(cluster or None)
    if not masters:
        raise ClientError("no master broker to create the topic on")
    for broker in masters:
        await admin.create_topic(broker.address, config)
    return {"topic": config.topic_name, "brokers": [b.address for b in masters]}


async def delete_topic(admin: AdminClient, topic: str) -> dict[str, Any]:
    """Delete the topic from every master serving it, then from the name servers."""
    masters = await admin.route_masters(topic)
    for _, address in masters:
        await admin.delete_topic_in_broker(address, topic)
    await admin.delete_topic_in_namesrv(topic)
    return {"topic": topic, "brokers": [a for _, a in masters]}


async def send_test_message(
    admin: AdminClient, topic: str, body: str, tags: str, keys: str
) -> dict[str, Any]:
    msg = Message(topic, body.encode(), tags=tags or None, keys=keys or None)
    broker_name, queue_id, result = await admin.send_message(msg)
    return {
        "status": result.status.value,
        "offsetMsgId": result.msg_id,
        "brokerName": broker_name,
        "queueId": queue_id,
        "queueOffset": result.queue_offset,
    }


# --- consumer groups ------------------------------------------------------------------------


async def _online(admin: AdminClient, group: str) -> tuple[int, str, str]:
    """(members, consume type, message model) of an online group; (0, "", "") if offline."""
    try:
        cc = await admin.examine_consumer_connection(group)
    except TideMQError:
        return 0, "", ""
    kind = "PULL" if cc.consume_type is ConsumeType.CONSUME_ACTIVELY else "PUSH"
    return len(cc.connections), kind, cc.message_model.value


async def groups_view(admin: AdminClient) -> dict[str, Any]:
    async def row(name: str) -> dict[str, Any]:
        system = group_is_system(name)
        members, kind, model = (0, "", "") if system else await _online(admin, name)
        diff = 0 if system else (await admin.examine_consume_stats(name)).total_diff()
        return {
            "group": name,
            "system": system,
            "members": members,
            "consumeType": kind,
            "messageModel": model,
            "diffTotal": diff,
        }

    return {"groups": list(await asyncio.gather(*map(row, await admin.examine_groups())))}


async def group_view(admin: AdminClient, group: str) -> dict[str, Any]:
    """A group's members and subscriptions (when online) and its lag per queue."""
    members: list[dict[str, Any]] = []
    subscriptions: list[dict[str, str]] = []
    online = True
    try:
        cc = await admin.examine_consumer_connection(group)
    except TideMQError:
        online = False
    else:
        members = [
            {
                "clientId": c.client_id,
                "clientAddr": c.client_addr,
                "language": c.language,
                "version": c.version,
            }
            for c in sorted(cc.connections, key=lambda c: c.client_id)
        ]
        subscriptions = [
            {"topic": topic, "expression": sub.sub_string}
            for topic, sub in sorted(cc.subscriptions.items())
        ]
    stats = await admin.examine_consume_stats(group)
    queues = [o.progress_data(mq) for mq, o in sorted(stats.offset_table.items())]
    topics = sorted({q["topic"] for q in queues} | {s["topic"] for s in subscriptions})
    return {
        "group": group,
        "online": online,
        "members": members,
        "subscriptions": subscriptions,
        "queues": queues,
        "topics": [t for t in topics if not t.startswith(RETRY_PREFIX)],
        "diffTotal": stats.total_diff(),
        "consumeTps": stats.consume_tps,
    }


async def reset_offset(
    admin: AdminClient, group: str, topic: str, timestamp: int | None
) -> dict[str, Any]:
    """Move the group's offsets on `topic` to `timestamp` (ms), or to the end (None: skip the
    backlog)."""
    if timestamp is None:
        table = await admin.skip_backlog(group, topic)
    else:
        table = await admin.reset_offset_by_time(group, topic, timestamp)
    return {
        "group": group,
        "topic": topic,
        "offsets": [
            {"brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": offset}
            for mq, offset in sorted(table.items())
        ],
    }


# --- messages -------------------------------------------------------------------------------


def message_summary(
    msg: StoredMessage, broker_name: str = "", body: ReadableBody | None = None
) -> dict[str, Any]:
    """A message's list row; its bodySize is the body's as its producer gave it (`body`, when
    the caller has it, else inflated here when compressed)."""
    if body is None:
        body = readable_body(msg)
    return {
        "msgId": msg.properties.get("UNIQ_KEY", msg.msg_id),
        "offsetMsgId": msg.msg_id,
        "topic": msg.topic,
        "brokerName": broker_name,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "tags": msg.tags or "",
        "keys": msg.keys or "",
        "storeTimestamp": msg.store_timestamp,
        "bornTimestamp": msg.born_timestamp,
        "bodySize": body.size,
    }


def message_detail(msg: StoredMessage, broker_name: str = "") -> dict[str, Any]:
    """A message's fields, and its body as its producer gave it (inflated when compressed)."""
    body = readable_body(msg)
    return {
        **message_summary(msg, broker_name, body),
        "reconsumeTimes": msg.reconsume_times,
        "bornHost": f"{msg.born_host[0]}:{msg.born_host[1]}",
        "storeHost": f"{msg.store_host[0]}:{msg.store_host[1]}",
        "commitLogOffset": msg.physical_offset,
        "properties": dict(msg.properties),
        "body": body.text(limit=BODY_PREVIEW),
        "bodyTruncated": body.error is None and body.size > BODY_PREVIEW,
        "sysFlag": msg.sys_flag,
        "deadLetter": msg.topic.startswith(DLQ_PREFIX),
    }


async def messages_by_time(
    admin: AdminClient, topic: str, begin: int, end: int, page: int, page_size: int
) -> dict[str, Any]:
    """One page (from 1) of the topic's messages stored in [begin, end], newest first."""
    if page < 1 or not 1 <= page_size <= PAGE_SIZE_MAX:
        raise ValueError(f"page must be >= 1 and pageSize 1..{PAGE_SIZE_MAX}")
    found, truncated = await admin.messages_by_time(topic, begin, end)
    start = (page - 1) * page_size
    return {
        "topic": topic,
        "total": len(found),
        "truncated": truncated,
        "page": page,
        "pageSize": page_size,
        "messages": [message_summary(m, b) for b, m in found[start : start + page_size]],
    }


async def messages_by_key(admin: AdminClient, topic: str, key: str) -> dict[str, Any]:
    found = await admin.query_message(topic, key, 64)
    found.sort(key=lambda pair: pair[1].store_timestamp, reverse=True)
    return {"topic": topic, "key": key, "messages": [message_summary(m, b) for b, m in found]}


async def message_by_id(admin: AdminClient, msg_id: str, topic: str) -> dict[str, Any]:
    """A message by its offsetMsgId, or by its client msgId (UNIQ_KEY) within `topic`."""
    try:
        return message_detail(await admin.view_message(msg_id))
    except TideMQError:
        if not topic:
            raise
    found = await admin.query_message(topic, msg_id, 32)
    exact = [(b, m) for b, m in found if m.properties.get("UNIQ_KEY") == msg_id]
    if not exact:
        raise ClientError(f"message {msg_id} not found in topic {topic}")
    broker_name, msg = exact[0]
    return message_detail(msg, broker_name)


async def message_trace(admin: AdminClient, msg_id: str) -> dict[str, Any]:
    """The trace of a message (its client msgId) in the trace topic, oldest record first:
    where it was sent and stored, which groups consumed it, with cost and status (empty when
    nothing traced it: its producer and consumers write traces only with enable_trace)."""
    records, skipped = await admin.message_trace(msg_id)
    return {"msgId": msg_id, "records": [r.to_data() for r in records], "skipped": skipped}


async def resend_dead_letter(admin: AdminClient, msg_id: str) -> dict[str, Any]:
    broker_name, queue_id, result = await admin.resend_dead_letter(msg_id)
    return {
        "status": result.status.value,
        "offsetMsgId": result.msg_id,
        "brokerName": broker_name,
        "queueId": queue_id,
        "queueOffset": result.queue_offset,
    }


# --- producers, broker configuration, ACL ---------------------------------------------------


async def producers_view(admin: AdminClient, topic: str, group: str) -> dict[str, Any]:
    """The producers of `group` connected to the masters serving `topic` (RocketMQ Dashboard's
    producer page: GET_PRODUCER_CONNECTION_LIST); an empty list when none is connected."""
    try:
        connection = await admin.examine_producer_connection(group, topic)
    except TopicNotExistError:
        raise
    except BrokerResponseError:
        connection = None
    rows = [] if connection is None else [c.to_dict() for c in connection.connections]
    return {"topic": topic, "group": group, "producers": sorted(rows, key=lambda r: r["clientId"])}


async def rocketmq5_view(admin: AdminClient) -> dict[str, Any]:
    """The RocketMQ 5 side of every master (RocketMQ's own Dashboard shows no proxy client):
    the 5.x clients on the gRPC ports (language and version from their settings), POP progress
    per group, topic and queue, and timer messages waiting per topic (GET_TIMER_METRICS)."""
    clients: list[dict[str, Any]] = []
    pop: list[dict[str, Any]] = []
    timers: list[dict[str, Any]] = []
    for broker in await admin.masters():
        found = await admin.grpc_clients(broker.address)
        clients.extend({**c.to_dict(), "brokerName": c.broker_name} for c in found)
        queues = await admin.pop_progress(broker.address)
        pop.extend({**q.to_dict(), "brokerName": q.broker_name} for q in queues)
        timers.extend(
            {
                "brokerName": broker.broker_name,
                "topic": count.topic,
                "pending": count.count,
                "timeStamp": count.timestamp,
            }
            for count in await admin.timer_metrics(broker.address)
        )
    clients.sort(key=lambda c: (c["clientType"], c["group"], c["clientId"]))
    pop.sort(key=lambda q: (q["group"], q["topic"], q["brokerName"], q["queueId"]))
    timers.sort(key=lambda t: (t["topic"], t["brokerName"]))
    return {"clients": clients, "pop": pop, "timers": timers}


# Values of these keys are not shown: a key that names a secret (none today) stays on the broker.
HIDDEN_CONFIG: Final = ("secret", "password")


def _shown_config(config: dict[str, str]) -> dict[str, str]:
    return {
        key: "(hidden)" if any(word in key.lower() for word in HIDDEN_CONFIG) else value
        for key, value in sorted(config.items())
    }


async def _config(admin: AdminClient, broker: BrokerAddress) -> dict[str, Any]:
    row: dict[str, Any] = {
        "brokerName": broker.broker_name,
        "brokerId": broker.broker_id,
        "address": broker.address,
    }
    try:
        row["config"] = _shown_config(await admin.broker_config(broker.address))
    except (TideMQError, OSError, TimeoutError) as exc:
        row["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return row


async def broker_configs_view(admin: AdminClient) -> dict[str, Any]:
    """Every broker's configuration (GET_BROKER_CONFIG), keys sorted; a broker that does not
    answer is shown with an `error` line."""
    brokers = await admin.brokers()
    return {"brokers": list(await asyncio.gather(*(_config(admin, b) for b in brokers)))}


async def update_broker_config(
    admin: AdminClient, address: str, key: str, value: str
) -> dict[str, Any]:
    """UPDATE_BROKER_CONFIG of one key on one broker of the cluster (ClientError for an address
    that is not one of its brokers; the broker's refusal of a key it cannot change as it is)."""
    if address not in {b.address for b in await admin.brokers()}:
        raise ClientError(f"{address} is not a broker of this cluster")
    await admin.update_broker_config(address, {key: value})
    return {"address": address, "key": key, "value": (await admin.broker_config(address))[key]}


async def acl_view(admin: AdminClient) -> dict[str, Any]:
    """Whether each broker checks requests against its plain ACL file (aclEnable, aclFile),
    from its configuration; `acl` is "on", "off" or "unknown" (the broker did not answer, or
    refused an unsigned question: then it checks ACL)."""
    rows = []
    for row in (await broker_configs_view(admin))["brokers"]:
        config = row.pop("config", None)
        if config is None:
            row["acl"] = "unknown"
        else:
            enabled = config.get("aclEnable", "false").strip().lower() == "true"
            row["acl"] = "on" if enabled else "off"
            row["aclFile"] = config.get("aclFile", "") if enabled else ""
        rows.append(row)
    return {"brokers": rows}


def writable_without_account(acl: dict[str, Any]) -> tuple[bool | None, str]:
    """(writable, why) for a dashboard without an account on loopback: only when every broker
    said it checks no ACL (a broker with ACL would refuse its unsigned changes anyway);
    writable None while no broker is registered (not decided yet: ask again)."""
    brokers = acl["brokers"]
    if not brokers:
        return None, "no broker is registered yet, so the ACL of the cluster is unknown"
    with_acl = [f"{b['brokerName']}/{b['brokerId']}" for b in brokers if b["acl"] == "on"]
    if with_acl:
        return False, f"brokers {', '.join(with_acl)} check ACL: start it with --ak/--sk"
    unknown = [f"{b['brokerName']}/{b['brokerId']}" for b in brokers if b["acl"] != "off"]
    if unknown:
        return False, f"brokers {', '.join(unknown)} did not say whether they check ACL"
    return True, "no broker checks ACL and it listens on loopback only"
