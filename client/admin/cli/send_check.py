"""Send probes: sendMsgStatus and clusterRT.

Both send small messages to the topic named after each broker group (brokerTopicEnable), as
RocketMQ's tools do, and report each send's round trip: sendMsgStatus one line per send to one
broker group, clusterRT the average per broker group of each cluster.
"""

from __future__ import annotations

import asyncio
import time

import click

from tidemq.client.admin.api import AdminClient
from tidemq.client.admin.cli.base import CommandError, Output, Table, common, main, run
from tidemq.client.errors import TideMQError
from tidemq.client.message import Message


def _probe(broker_name: str, size: int) -> Message:
    return Message(broker_name, b"x" * size)


async def _send_timed(
    admin: AdminClient, broker_name: str, size: int
) -> tuple[float, str, str | None]:
    """(milliseconds, send status or the error, msgId) of one send to the broker's topic."""
    started = time.perf_counter()
    try:
        _, _, result = await admin.send_message(_probe(broker_name, size), broker_name)
    except TideMQError as exc:
        return (time.perf_counter() - started) * 1000, f"FAILED: {exc}", None
    return (time.perf_counter() - started) * 1000, result.status.value, result.msg_id


@main.command("sendMsgStatus")
@common
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker group name.")
@click.option("-s", "--messageSize", "size", type=int, default=128, show_default=True)
@click.option("-c", "--count", type=int, default=50, show_default=True)
def send_msg_status(
    namesrv_addr: str | None, as_json: bool, broker_name: str, size: int, count: int
) -> None:
    """Send messages to a broker group one by one and print each one's round trip."""
    if size < 1 or count < 1:
        raise click.BadParameter("messageSize and count must be at least 1")

    async def work(admin: AdminClient) -> Output:
        await admin.topic_route(broker_name)  # an unknown broker group fails here, once
        out = Output([])
        for _ in range(count):
            rt, status, msg_id = await _send_timed(admin, broker_name, size)
            out.lines_before.append(f"rt={rt:.2f}ms, SendResult={status} msgId={msg_id or ''}")
            out.data.append({"rtMs": round(rt, 3), "sendStatus": status, "msgId": msg_id})
        return out

    run("sendMsgStatus", namesrv_addr, as_json, work)


@main.command("clusterRT")
@common
@click.option("-a", "--amount", type=int, default=100, show_default=True, help="Sends per broker.")
@click.option("-s", "--size", type=int, default=128, show_default=True, help="Message bytes.")
@click.option("-c", "--cluster", default=None, help="Only this cluster.")
@click.option("-i", "--interval", type=int, default=None, help="Repeat every N s (Ctrl-C).")
@click.option("-p", "--printLog", "print_log", default="false", help="Accepted.")
@click.option("-m", "--machineRoom", "machine_room", default="noname", help="Accepted.")
def cluster_rt(
    namesrv_addr: str | None,
    as_json: bool,
    amount: int,
    size: int,
    cluster: str | None,
    interval: int | None,
    print_log: str,
    machine_room: str,
) -> None:
    """Send messages to every broker group of a cluster and print the average round trip."""
    del print_log, machine_room
    if size < 1 or amount < 1:
        raise click.BadParameter("amount and size must be at least 1")

    async def once(admin: AdminClient) -> Output:
        info = await admin.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            raise CommandError(f"cluster {cluster} not found")
        table = Table(["#Cluster Name", "#Broker Name", "#RT", "#successCount", "#failCount"])
        data = []
        for name in sorted(info.cluster_addr_table):
            if cluster is not None and name != cluster:
                continue
            for broker_name in sorted(info.cluster_addr_table[name]):
                times, failed = [], 0
                for _ in range(amount):
                    rt, status, _ = await _send_timed(admin, broker_name, size)
                    if status == "SEND_OK":
                        times.append(rt)
                    else:
                        failed += 1
                average = sum(times) / len(times) if times else 0.0
                table.rows.append([name, broker_name, f"{average:.2f}", len(times), failed])
                data.append(
                    {
                        "clusterName": name,
                        "brokerName": broker_name,
                        "rtMs": round(average, 3),
                        "successCount": len(times),
                        "failCount": failed,
                    }
                )
        return Output(data, tables=[table])

    async def work(admin: AdminClient) -> Output:
        while True:
            output = await once(admin)
            if interval is None:
                return output
            click.echo(output.text())
            await asyncio.sleep(interval)

    run("clusterRT", namesrv_addr, as_json, work)
