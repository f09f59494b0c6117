"""The RocketMQ 5 side of the brokers: grpcClientConnection (5.x clients over gRPC, with their
language and version), popConsumerProgress (POP consumption per queue: in flight, invisible,
acknowledged) and getTimerMetrics (timer messages waiting per topic).

Named after RocketMQ's consumerConnection / consumerProgress; RocketMQ's own mqadmin has no
view of proxy clients or POP state (the bodies are tidemq's, client/protocol/operators5.py).
getTimerMetrics reads RocketMQ 5's GET_TIMER_METRICS, so it works against RocketMQ 5 brokers too.
"""

from __future__ import annotations

import click

from tidemq.client.admin.api import AdminClient
from tidemq.client.admin.cli.base import (
    CommandError,
    Output,
    Table,
    common,
    format_time,
    main,
    need_one,
    run,
)

CONSUMER_TYPES = ("PUSH_CONSUMER", "SIMPLE_CONSUMER", "PULL_CONSUMER")


@main.command("grpcClientConnection")
@common
@click.option("-g", "--group", default="", help="Only this consumer group's clients.")
@click.option("-t", "--topic", default="", help="Only clients publishing or subscribing to it.")
@click.option(
    "-r",
    "--role",
    type=click.Choice(["all", "producer", "consumer"]),
    default="all",
    show_default=True,
    help="Producers, consumers or both.",
)
@click.option("-c", "--clusterName", "cluster", default=None, help="Only this cluster's masters.")
def grpc_client_connection(
    namesrv_addr: str | None,
    as_json: bool,
    group: str,
    topic: str,
    role: str,
    cluster: str | None,
) -> None:
    """List the 5.x clients (gRPC) connected to the masters, with language and version."""

    async def work(admin: AdminClient) -> Output:
        clients = [
            c
            for c in await admin.examine_grpc_clients(cluster)
            if (not group or c.group == group)
            and (not topic or topic in c.topics)
            and (role == "all" or (role == "consumer") == (c.client_type in CONSUMER_TYPES))
        ]
        table = Table(
            [
                "#",
                "#ClientId",
                "#ClientAddr",
                "#Language",
                "#Version",
                "#Type",
                "#Group",
                "#Topics",
                "#Broker",
            ]
        )
        data = []
        for i, c in enumerate(
            sorted(clients, key=lambda c: (c.client_type, c.group, c.client_id)), 1
        ):
            table.rows.append(
                [
                    f"{i:03d}",
                    c.client_id,
                    c.client_addr,
                    c.language,
                    c.version,
                    c.client_type,
                    c.group or "-",
                    ",".join(c.topics) or "-",
                    c.broker_name,
                ]
            )
            data.append({**c.to_dict(), "brokerName": c.broker_name})
        notices = (
            []
            if clients
            else ["no 5.x client is connected" + (f" in group {group}" if group else "")]
        )
        return Output(data, tables=[table], notices=notices)

    run("grpcClientConnection", namesrv_addr, as_json, work)


@main.command("popConsumerProgress")
@common
@click.option("-g", "--groupName", "group", default="", help="Consumer group (else: all).")
@click.option("-t", "--topicName", "topic", default="", help="Only this topic.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Only this cluster's masters.")
def pop_consumer_progress(
    namesrv_addr: str | None, as_json: bool, group: str, topic: str, cluster: str | None
) -> None:
    """Print POP consumption per queue: where the group pops next (#Pop Offset), its backlog
    (#Diff), messages in flight, how many of those are still invisible, and the acks read.

    In flight minus invisible: past their invisible time, waiting to be revived (put back into
    %RETRY%<group> with one more attempt). A group that never popped here is an error (exit 1)."""

    async def work(admin: AdminClient) -> Output:
        rows = await admin.examine_pop_progress(group, topic, cluster)
        if not rows:
            what = f"consumer group {group}" if group else "no consumer group"
            where = f" on topic {topic}" if topic else ""
            raise CommandError(f"{what} has no POP consumption{where} on any master")
        table = Table(
            [
                "#Group",
                "#Topic",
                "#Broker Name",
                "#QID",
                "#Broker Offset",
                "#Pop Offset",
                "#Diff",
                "#Inflight",
                "#Invisible",
                "#Acked",
            ]
        )
        data = []
        for r in sorted(rows, key=lambda r: (r.group, r.topic, r.broker_name, r.queue_id)):
            diff = max(0, r.broker_offset - r.pop_offset)
            table.rows.append(
                [
                    r.group,
                    r.topic,
                    r.broker_name,
                    r.queue_id,
                    r.broker_offset,
                    r.pop_offset,
                    diff,
                    r.in_flight,
                    r.invisible,
                    r.acked,
                ]
            )
            data.append({**r.to_dict(), "brokerName": r.broker_name, "diff": diff})
        totals = [
            "",
            f"Inflight Total: {sum(r.in_flight for r in rows)}",
            f"Invisible Total: {sum(r.invisible for r in rows)}",
            f"Acked Total: {sum(r.acked for r in rows)}",
        ]
        return Output(data, tables=[table], lines_after=totals)

    run("popConsumerProgress", namesrv_addr, as_json, work)


@main.command("getTimerMetrics")
@common
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="This broker only.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Every master of the cluster.")
@click.option("-t", "--topic", default="", help="Only this topic.")
def get_timer_metrics(
    namesrv_addr: str | None,
    as_json: bool,
    broker_addr: str | None,
    cluster: str | None,
    topic: str,
) -> None:
    """Timer messages waiting for their delivery time, per real topic (GET_TIMER_METRICS)."""
    need_one("getTimerMetrics", b=broker_addr, c=cluster)

    async def work(admin: AdminClient) -> Output:
        if broker_addr is not None:
            brokers = [(broker_addr, broker_addr)]
        else:
            brokers = [(b.broker_name, b.address) for b in await admin.masters(cluster)]
        table = Table(["#Broker", "#Topic", "#Pending", "#LastChange"])
        data = []
        total = 0
        for name, address in brokers:
            for count in await admin.timer_metrics(address):
                if topic and count.topic != topic:
                    continue
                total += count.count
                table.rows.append([name, count.topic, count.count, format_time(count.timestamp)])
                data.append(
                    {
                        "broker": name,
                        "topic": count.topic,
                        "pending": count.count,
                        "timeStamp": count.timestamp,
                    }
                )
        return Output(data, tables=[table], lines_after=["", f"Pending Total: {total}"])

    run("getTimerMetrics", namesrv_addr, as_json, work)
