"""Message trace commands: queryMsgTraceById."""

from __future__ import annotations

import click

from tidemq.client.admin.api import AdminClient
from tidemq.client.admin.cli.base import CommandError, Output, Table, common, format_time, main, run
from tidemq.client.trace import TRACE_TOPIC, TraceType

MAX_TRACE_MESSAGES = 256


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
        records, skipped = await admin.message_trace(msg_id, trace_topic, MAX_TRACE_MESSAGES)
        if not records:
            raise CommandError(f"no trace of message {msg_id} in topic {trace_topic}")
        table = Table(["#Type", "#Group", "#Time", "#CostTimes", "#Status", "#Detail"])
        for record in records:
            table.rows.append(
                [
                    record.type.value,
                    record.group,
                    format_time(record.timestamp),
                    f"{record.cost_ms}ms" if record.type is not TraceType.SUB_BEFORE else "-",
                    record.status,
                    record.detail,
                ]
            )
        return Output(
            {"msgId": msg_id, "records": [r.to_data() for r in records], "skipped": skipped},
            tables=[table],
            lines_after=skipped,
        )

    run("queryMsgTraceById", namesrv_addr, as_json, work)
