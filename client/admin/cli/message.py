"""Message commands: queryMsgById, queryMsgByUniqueKey, queryMsgByKey, queryMsgByOffset,
sendMessage, consumeMessage (printMsg and printMsgByQueue are in `print_messages`)."""

from __future__ import annotations

from collections import Counter

import click

from tidemq.client.admin.api import AdminClient, offset_message_address
from tidemq.client.admin.cli.base import (
    CommandError,
    Output,
    Table,
    common,
    format_time,
    java_map_text,
    main,
    run,
)
from tidemq.client.api import PullStatus
from tidemq.client.inflate import readable_body
from tidemq.client.message import Message, UniqueIdGenerator
from tidemq.store.record import StoredMessage, pack_host

BODY_PREVIEW = 512
# What a broker answers a QUERY_MESSAGE with at most (RocketMQ's maxMsgsNumBatch default), -m
# or not: a broker that answers this many may hold more.
BROKER_QUERY_CAP = 64


def _body_text(msg: StoredMessage) -> str:
    """The body as its producer gave it (inflated when compressed), cut at BODY_PREVIEW."""
    body = readable_body(msg)
    return body.text(limit=BODY_PREVIEW) + ("..." if body.size > BODY_PREVIEW else "")


def message_data(msg: StoredMessage, broker_name: str = "") -> dict[str, object]:
    return {
        "msgId": msg.properties.get("UNIQ_KEY", msg.msg_id),
        "offsetMsgId": msg.msg_id,
        "topic": msg.topic,
        "brokerName": broker_name,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.physical_offset,
        "tags": msg.tags,
        "keys": msg.keys,
        "reconsumeTimes": msg.reconsume_times,
        "bornTimestamp": msg.born_timestamp,
        "storeTimestamp": msg.store_timestamp,
        "bornHost": f"{msg.born_host[0]}:{msg.born_host[1]}",
        "storeHost": f"{msg.store_host[0]}:{msg.store_host[1]}",
        "sysFlag": msg.sys_flag,
        "properties": msg.properties,
        "body": _body_text(msg),
    }


def message_lines(msg: StoredMessage) -> list[str]:
    rows = [
        ("Message ID:", msg.properties.get("UNIQ_KEY", msg.msg_id)),
        ("OffsetID:", msg.msg_id),
        ("Topic:", msg.topic),
        ("Tags:", f"[{msg.tags or ''}]"),
        ("Keys:", f"[{msg.keys or ''}]"),
        ("Queue ID:", msg.queue_id),
        ("Queue Offset:", msg.queue_offset),
        ("CommitLog Offset:", msg.physical_offset),
        ("Reconsume Times:", msg.reconsume_times),
        ("Born Timestamp:", format_time(msg.born_timestamp)),
        ("Store Timestamp:", format_time(msg.store_timestamp)),
        ("Born Host:", f"{msg.born_host[0]}:{msg.born_host[1]}"),
        ("Store Host:", f"{msg.store_host[0]}:{msg.store_host[1]}"),
        ("System Flag:", msg.sys_flag),
        ("Properties:", java_map_text(msg.properties)),
        ("Message Body:", _body_text(msg)),
    ]
    return [f"{k:<20s} {v}" for k, v in rows]


@main.command("queryMsgById")
@common
@click.option(
    "-i",
    "--msgId",
    "msg_ids",
    required=True,
    help="The id a send returned: offsetMsgId or client msgId (UNIQ_KEY); comma-separated.",
)
@click.option(
    "-t", "--topic", default=None, help="Topic, to look a client msgId up in it only (faster)."
)
def query_msg_by_id(
    namesrv_addr: str | None, as_json: bool, msg_ids: str, topic: str | None
) -> None:
    """Print a message by the id a send returned.

    An offsetMsgId names the broker that stores the message, which is asked directly; a client
    msgId (UNIQ_KEY) names no broker, so it is looked up in the index of -t, or of every topic.
    Then, for each group consuming the topic, whether it consumed the message (MessageTrack).
    """
    ids = [i.strip() for i in msg_ids.split(",") if i.strip()]

    async def work(admin: AdminClient) -> Output:
        out = Output([])
        for msg_id in ids:
            msg = await admin.find_message(msg_id, topic)
            tracks = await admin.message_tracks(msg)
            data = message_data(msg)
            data["messageTracks"] = [
                {
                    "consumerGroup": t.consumer_group,
                    "trackType": t.track_type.value,
                    "exceptionDesc": t.exception_desc,
                }
                for t in tracks
            ]
            out.data.append(data)
            if len(out.lines_before):
                out.lines_before.append("")
            out.lines_before.extend(message_lines(msg))
            out.lines_before.append("")
            out.lines_before.extend([str(t) for t in tracks] or ["WARN: No Consumer"])
        if len(ids) == 1:
            out.data = out.data[0]
        return out

    run("queryMsgById", namesrv_addr, as_json, work)


@main.command("queryMsgByUniqueKey")
@common
@click.option("-i", "--msgId", "msg_id", required=True, help="Client msgId (UNIQ_KEY).")
@click.option("-t", "--topic", required=True, help="The topic of the message.")
@click.option("-a", "--showAll", "show_all", is_flag=True, help="Every copy (at most 32).")
def query_msg_by_unique_key(
    namesrv_addr: str | None, as_json: bool, msg_id: str, topic: str, show_all: bool
) -> None:
    """Print a message by its client msgId (UNIQ_KEY) in a topic."""

    async def work(admin: AdminClient) -> Output:
        offset_message_address(msg_id)  # refuses what is not an id at all
        found = await admin.query_unique_key(topic, msg_id, 32)
        if not found:
            raise CommandError(f"message {msg_id} not found in topic {topic}")
        shown = found if show_all else found[:1]
        out = Output([message_data(m, name) for name, m in shown])
        for _, msg in shown:
            if out.lines_before:
                out.lines_before.append("")
            out.lines_before.extend(message_lines(msg))
        if not show_all:
            out.data = out.data[0]
        return out

    run("queryMsgByUniqueKey", namesrv_addr, as_json, work)


@main.command("queryMsgByKey")
@common
@click.option("-t", "--topic", required=True, help="Topic.")
@click.option("-k", "--msgKey", "key", required=True, help="Message key.")
@click.option("-b", "--beginTimestamp", "begin", type=int, default=0, help="From (ms).")
@click.option("-e", "--endTimestamp", "end", type=int, default=None, help="To (ms, default now).")
@click.option("-m", "--maxNum", "max_num", type=int, default=64, show_default=True)
def query_msg_by_key(
    namesrv_addr: str | None,
    as_json: bool,
    topic: str,
    key: str,
    begin: int,
    end: int | None,
    max_num: int,
) -> None:
    """List the messages of a topic carrying a key.

    Each broker answers at most -m messages (and at most 64, RocketMQ's maxMsgsNumBatch); when
    the list stops at such a limit, a line on stderr says so: more may carry the key."""

    async def work(admin: AdminClient) -> Output:
        found = await admin.query_message(topic, key, max_num, begin, end)
        table = Table(["#Message ID", "#QID", "#Offset"])
        data = []
        for broker_name, msg in found[:max_num]:
            table.rows.append(
                [msg.properties.get("UNIQ_KEY", msg.msg_id), msg.queue_id, msg.queue_offset]
            )
            data.append(message_data(msg, broker_name))
        out = Output(data, tables=[table])
        per_broker = Counter(name for name, _ in found)
        cap = min(max_num, BROKER_QUERY_CAP)
        full = sorted(name for name, count in per_broker.items() if count >= cap)
        if len(found) > max_num or full:
            where = f" (broker {', '.join(full)} answered its limit of {cap})" if full else ""
            out.notices.append(
                f"stopped at {min(len(found), max_num)} messages{where}: more may carry key "
                f"{key}; narrow the time with -b/-e or raise -m (at most {BROKER_QUERY_CAP} "
                "per broker)"
            )
        return out

    run("queryMsgByKey", namesrv_addr, as_json, work)


@main.command("queryMsgByOffset")
@common
@click.option("-t", "--topic", required=True, help="Topic.")
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker group name.")
@click.option("-i", "--queueId", "queue_id", type=int, required=True, help="Queue id.")
@click.option("-o", "--offset", type=int, required=True, help="Queue offset.")
def query_msg_by_offset(
    namesrv_addr: str | None,
    as_json: bool,
    topic: str,
    broker_name: str,
    queue_id: int,
    offset: int,
) -> None:
    """Print the message at a queue offset."""

    async def work(admin: AdminClient) -> Output:
        result = await admin.pull(broker_name, topic, queue_id, offset, 1)
        if result.status is not PullStatus.FOUND or not result.messages:
            raise CommandError(
                f"no message at {topic}/{broker_name}/{queue_id} offset {offset} "
                f"({result.status.value}; queue holds {result.min_offset}..{result.max_offset})"
            )
        msg = result.messages[0]
        return Output(message_data(msg, broker_name), lines_before=message_lines(msg))

    run("queryMsgByOffset", namesrv_addr, as_json, work)


@main.command("sendMessage")
@common
@click.option("-t", "--topic", required=True, help="Topic.")
@click.option("-p", "--body", required=True, help="Message body (UTF-8).")
@click.option("-k", "--key", default=None, help="Message key(s).")
@click.option("-c", "--tags", default=None, help="Message tag.")
@click.option("-b", "--broker", "broker_name", default=None, help="Broker group to send to.")
@click.option("-i", "--qid", "queue_id", type=int, default=None, help="Queue id to send to.")
def send_message(
    namesrv_addr: str | None,
    as_json: bool,
    topic: str,
    body: str,
    key: str | None,
    tags: str | None,
    broker_name: str | None,
    queue_id: int | None,
) -> None:
    """Send one message."""

    async def work(admin: AdminClient) -> Output:
        # The client msgId is made here so it can be printed, as RocketMQ's sendMessage does.
        uniq_key = UniqueIdGenerator(pack_host("127.0.0.1", 0)[:4]).next_id()
        msg = Message(
            topic, body.encode("utf-8"), tags=tags, keys=key, properties={"UNIQ_KEY": uniq_key}
        )
        name, qid, result = await admin.send_message(msg, broker_name, queue_id)
        table = Table(["#Broker Name", "#QID", "#Send Result", "#MsgId"])
        table.rows.append([name, qid, result.status.value, uniq_key])
        data = {
            "brokerName": name,
            "queueId": qid,
            "sendStatus": result.status.value,
            "msgId": uniq_key,
            "offsetMsgId": result.msg_id,
            "queueOffset": result.queue_offset,
        }
        return Output(data, tables=[table])

    run("sendMessage", namesrv_addr, as_json, work)


@main.command("consumeMessage")
@common
@click.option("-t", "--topic", required=True, help="Topic.")
@click.option("-b", "--brokerName", "broker_name", default=None, help="Only this broker group.")
@click.option("-i", "--queueId", "queue_id", type=int, default=None, help="Only this queue.")
@click.option("-o", "--offset", type=int, default=None, help="Start offset (default: queue min).")
@click.option("-c", "--MessageNumber", "count", type=int, default=128, show_default=True)
def consume_message(
    namesrv_addr: str | None,
    as_json: bool,
    topic: str,
    broker_name: str | None,
    queue_id: int | None,
    offset: int | None,
    count: int,
) -> None:
    """Read messages from a topic's queues (no group, no offset commits)."""

    async def work(admin: AdminClient) -> Output:
        route = await admin.topic_route(topic)
        queues = sorted(
            (q.broker_name, qid)
            for q in route.queue_datas
            for qid in range(q.read_queue_nums)
            if (broker_name is None or q.broker_name == broker_name)
            and (queue_id is None or qid == queue_id)
        )
        if not queues:
            raise CommandError(f"no queue of topic {topic} matches")
        table = Table(["#Broker Name", "#QID", "#Offset", "#MsgId", "#Tags", "#Keys", "#Body"])
        data: list[dict[str, object]] = []
        for name, qid in queues:
            position = -1 if offset is None else offset
            while len(data) < count:
                if position < 0:
                    first = await admin.pull(name, topic, qid, 0, 1)
                    position = first.min_offset
                result = await admin.pull(name, topic, qid, position, min(32, count - len(data)))
                if result.status is not PullStatus.FOUND:
                    break
                for msg in result.messages:
                    uniq = msg.properties.get("UNIQ_KEY", msg.msg_id)
                    table.rows.append(
                        [
                            name,
                            qid,
                            msg.queue_offset,
                            uniq,
                            msg.tags or "",
                            msg.keys or "",
                            _body_text(msg),
                        ]
                    )
                    data.append(message_data(msg, name))
                position = result.next_begin_offset
        return Output(data, tables=[table], lines_after=[f"Consumed {len(data)} messages"])

    run("consumeMessage", namesrv_addr, as_json, work)
