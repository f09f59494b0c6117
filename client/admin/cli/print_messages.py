"""Reading a topic's messages between two times: printMsg (every queue) and printMsgByQueue
(one queue, optionally counting its messages by tag).

As RocketMQ's tools: each queue's range is [offset at -b, offset at -e) (default: its first to
its last message), read with pulls filtered by the tag expression -s; a queue is announced by a
`minOffset=.., maxOffset=.., MessageQueue [...]` line and each message printed as
`MSGID: <msgId> <fields> BODY: <body>`, its properties as Java prints a map ({k=v, k2=v2}) and
its body as its producer gave it (inflated when compressed).
"""

from __future__ import annotations

import codecs
from collections import Counter
from dataclasses import dataclass

import click

from tidemq.client.admin.api import AdminClient
from tidemq.client.admin.cli.base import (
    Output,
    common,
    java_map_text,
    main,
    parse_bool,
    parse_timestamp,
    run,
)
from tidemq.client.admin.cli.message import message_data
from tidemq.client.api import PullStatus
from tidemq.client.inflate import readable_body
from tidemq.store.record import StoredMessage

PULL_BATCH = 32


@dataclass(slots=True)
class QueueRange:
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int


def _charset(name: str) -> str:
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise click.BadParameter(f"{name!r}: unknown charset") from None


def _time(text: str | None) -> int | None:
    if text is None:
        return None
    value = parse_timestamp(text)
    return None if value < 0 else value


def _message_line(msg: StoredMessage, charset: str, print_body: bool) -> str:
    uniq = msg.properties.get("UNIQ_KEY", msg.msg_id)
    fields = (
        f"MessageExt [topic={msg.topic}, queueId={msg.queue_id}, "
        f"queueOffset={msg.queue_offset}, offsetMsgId={msg.msg_id}, tags={msg.tags or ''}, "
        f"keys={msg.keys or ''}, reconsumeTimes={msg.reconsume_times}, "
        f"bornTimestamp={msg.born_timestamp}, storeTimestamp={msg.store_timestamp}, "
        f"storeHost={msg.store_host[0]}:{msg.store_host[1]}, sysFlag={msg.sys_flag}, "
        f"properties={java_map_text(msg.properties)}]"
    )
    body = readable_body(msg).text(charset) if print_body else "NOT PRINT BODY"
    return f"MSGID: {uniq} {fields} BODY: {body}"


async def _read_queue(
    admin: AdminClient, topic: str, queue: QueueRange, expression: str
) -> list[StoredMessage]:
    out: list[StoredMessage] = []
    offset = queue.min_offset
    while offset < queue.max_offset:
        batch = min(PULL_BATCH, queue.max_offset - offset)
        result = await admin.pull(
            queue.broker_name, topic, queue.queue_id, offset, batch, expression
        )
        if result.status is PullStatus.FOUND:
            out.extend(m for m in result.messages if m.queue_offset < queue.max_offset)
        elif result.status is not PullStatus.NO_MATCHED_MSG:
            break
        if result.next_begin_offset <= offset:
            break
        offset = result.next_begin_offset
    return out


def _queue_line(topic: str, queue: QueueRange) -> str:
    return (
        f"minOffset={queue.min_offset}, maxOffset={queue.max_offset}, MessageQueue "
        f"[topic={topic}, brokerName={queue.broker_name}, queueId={queue.queue_id}]"
    )


@main.command("printMsg")
@common
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-c", "--charsetName", "charset", default="UTF-8", show_default=True)
@click.option("-s", "--subExpression", "expression", default="*", show_default=True)
@click.option("-b", "--beginTimestamp", "begin", default=None, help="ms or yyyy-MM-dd#HH:mm:ss:SSS")
@click.option("-e", "--endTimestamp", "end", default=None, help="ms or yyyy-MM-dd#HH:mm:ss:SSS")
@click.option("-d", "--printBody", "print_body", default="true", show_default=True)
def print_msg(
    namesrv_addr: str | None,
    as_json: bool,
    topic: str,
    charset: str,
    expression: str,
    begin: str | None,
    end: str | None,
    print_body: str,
) -> None:
    """Print every message of a topic stored between two times (every queue)."""
    encoding, show_body = _charset(charset), parse_bool(print_body)
    begin_ms, end_ms = _time(begin), _time(end)

    async def work(admin: AdminClient) -> Output:
        route = await admin.topic_route(topic)
        out = Output([])
        queues = sorted(
            (q.broker_name, qid) for q in route.queue_datas for qid in range(q.read_queue_nums)
        )
        for broker_name, qid in queues:
            low, high = await admin.queue_offsets(broker_name, topic, qid, begin_ms, end_ms)
            queue = QueueRange(broker_name, qid, low, high)
            out.lines_before.append(_queue_line(topic, queue))
            for msg in await _read_queue(admin, topic, queue, expression):
                out.lines_before.append(_message_line(msg, encoding, show_body))
                data = message_data(msg, broker_name)
                data["body"] = readable_body(msg).text(encoding) if show_body else None
                out.data.append(data)
        return out

    run("printMsg", namesrv_addr, as_json, work)


@main.command("printMsgByQueue")
@common
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-a", "--brokerName", "broker_name", required=True, help="Broker group name.")
@click.option("-i", "--queueId", "queue_id", type=int, required=True, help="Queue id.")
@click.option("-c", "--charsetName", "charset", default="UTF-8", show_default=True)
@click.option("-s", "--subExpression", "expression", default="*", show_default=True)
@click.option("-b", "--beginTimestamp", "begin", default=None, help="ms or yyyy-MM-dd#HH:mm:ss:SSS")
@click.option("-e", "--endTimestamp", "end", default=None, help="ms or yyyy-MM-dd#HH:mm:ss:SSS")
@click.option("-p", "--print", "print_msgs", default="false", show_default=True, help="Messages.")
@click.option("-d", "--printBody", "print_body", default="false", show_default=True)
@click.option("-f", "--calculate", "by_tag", default="false", show_default=True, help="By tag.")
def print_msg_by_queue(
    namesrv_addr: str | None,
    as_json: bool,
    topic: str,
    broker_name: str,
    queue_id: int,
    charset: str,
    expression: str,
    begin: str | None,
    end: str | None,
    print_msgs: str,
    print_body: str,
    by_tag: str,
) -> None:
    """Read one queue between two times: print its messages (-p) and count them by tag (-f)."""
    encoding = _charset(charset)
    show, show_body, count = parse_bool(print_msgs), parse_bool(print_body), parse_bool(by_tag)
    begin_ms, end_ms = _time(begin), _time(end)

    async def work(admin: AdminClient) -> Output:
        low, high = await admin.queue_offsets(broker_name, topic, queue_id, begin_ms, end_ms)
        queue = QueueRange(broker_name, queue_id, low, high)
        messages = await _read_queue(admin, topic, queue, expression)
        out = Output(
            {
                "topic": topic,
                "brokerName": broker_name,
                "queueId": queue_id,
                "minOffset": low,
                "maxOffset": high,
                "messageCount": len(messages),
            },
            lines_before=[_queue_line(topic, queue)],
        )
        if show:
            out.lines_before.extend(_message_line(m, encoding, show_body) for m in messages)
            out.data["messages"] = [message_data(m, broker_name) for m in messages]
        if count:
            tags = Counter(m.tags or "" for m in messages)
            ranked = sorted(tags.items(), key=lambda item: (-item[1], item[0]))
            out.lines_after.extend(f"Tag: {tag:<30s} Count: {n}" for tag, n in ranked)
            out.data["tagCounts"] = dict(ranked)
        return out

    run("printMsgByQueue", namesrv_addr, as_json, work)
