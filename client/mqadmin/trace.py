"""Message trace commands: queryMsgTraceById."""

from __future__ import annotations

from typing import Any

import click

from tidemq.client.admin import AdminClient
from tidemq.client.errors import DecodeError
from tidemq.client.mqadmin.base import CommandError, Output, Table, common, format_time, main, run
from tidemq.client.trace import TRACE_TOPIC, TraceRecord, TraceType, decode_records

MAX_TRACE_MESSAGES = 256


def _status(record: TraceRecord) -> str:
    if record.type is TraceType.END_TRANSACTION:
        return record.transaction_state
    if record.type is TraceType.SUB_BEFORE:
        return "-"
    return "success" if record.success else "failed"


def _detail(record: TraceRecord) -> str:
    if record.type is TraceType.PUB:
        return (
            f"topic={record.topic} tags={record.tags} keys={record.keys} "
            f"storeHost={record.store_host} offsetMsgId={record.offset_msg_id} "
            f"bodyLength={record.body_length}"
        )
    if record.type is TraceType.SUB_BEFORE:
        return f"requestId={record.request_id} retryTimes={record.retry_times}"
    if record.type is TraceType.SUB_AFTER:
        return f"requestId={record.request_id} contextCode={record.context_code}"
    return (
        f"topic={record.topic} transactionId={record.transaction_id} "
        f"fromTransactionCheck={str(record.from_transaction_check).lower()}"
    )


def record_data(record: TraceRecord) -> dict[str, Any]:
    return {
        "type": record.type.value,
        "timestamp": record.timestamp,
        "group": record.group,
        "msgId": record.msg_id,
        "topic": record.topic,
        "tags": record.tags,
        "keys": record.keys,
        "storeHost": record.store_host,
        "costTime": record.cost_ms,
        "success": record.success,
        "offsetMsgId": record.offset_msg_id,
        "requestId": record.request_id,
        "retryTimes": record.retry_times,
        "contextCode": record.context_code,
        "transactionState": record.transaction_state,
        "fromTransactionCheck": record.from_transaction_check,
    }


@main.command("queryMsgTraceById")
@common
@click.option("-i", "--msgId", "msg_id", required=True, help="The message's msgId (UNIQ_KEY).")
@click.option(
    "-t", "--traceTopic", "trace_topic", default=TRACE_TOPIC, show_default=True, help="Trace topic."
)
def query_msg_trace_by_id(
    namesrv_addr: str | None, as_json: bool, msg_id: str, trace_topic: str
) -> None:
    """Print a message's trace: sent (Pub), consumed (SubBefore, SubAfter) and ended
    (EndTransaction), by whom, when, with cost and status, oldest first."""

    async def work(admin: AdminClient) -> Output:
        found = await admin.query_message(trace_topic, msg_id, MAX_TRACE_MESSAGES)
        records: list[TraceRecord] = []
        skipped: list[str] = []
        for _broker, msg in found:
            try:
                text = msg.body.decode("utf-8")
                records.extend(r for r in decode_records(text) if r.msg_id == msg_id)
            except (DecodeError, UnicodeDecodeError) as exc:
                skipped.append(f"skipped trace message {msg.msg_id}: {exc}")
        if not records:
            raise CommandError(f"no trace of message {msg_id} in topic {trace_topic}")
        # SubAfter has its own time since 4.9: records without one sort after their SubBefore.
        records.sort(key=lambda r: (r.timestamp, r.type is TraceType.SUB_AFTER))
        table = Table(["#Type", "#Group", "#Time", "#CostTimes", "#Status", "#Detail"])
        for record in records:
            table.rows.append(
                [
                    record.type.value,
                    record.group,
                    format_time(record.timestamp),
                    f"{record.cost_ms}ms" if record.type is not TraceType.SUB_BEFORE else "-",
                    _status(record),
                    _detail(record),
                ]
            )
        return Output(
            {"msgId": msg_id, "records": [record_data(r) for r in records], "skipped": skipped},
            tables=[table],
            lines_after=skipped,
        )

    run("queryMsgTraceById", namesrv_addr, as_json, work)
