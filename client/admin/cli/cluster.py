"""Cluster and broker commands: clusterList, brokerStatus, haStatus, getBrokerConfig,
updateBrokerConfig, wipeWritePerm, addWritePerm."""

from __future__ import annotations

import asyncio
import time

import click

from tidemq.client.admin.api import AdminClient, BrokerAddress
from tidemq.client.admin.cli.base import (
    Output,
    Table,
    camel_data,
    common,
    format_time,
    main,
    need_one,
    run,
)
from tidemq.client.errors import TideMQError
from tidemq.client.protocol.admin import ControllerRuntimeInfo, HARuntimeInfo

CLUSTER_COLUMNS = [
    "#Cluster Name",
    "#Broker Name",
    "#BID",
    "#Addr",
    "#Version",
    "#InTPS(LOAD)",
    "#OutTPS(LOAD)",
    "#Timer(Progress)",
    "#PCWait(ms)",
    "#Hour",
    "#SPACE",
    "#ACTIVATED",
]


def _first(text: str | None) -> float:
    try:
        return float((text or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


async def _runtime(admin: AdminClient, address: str) -> dict[str, str]:
    try:
        return await admin.runtime_info(address)
    except TideMQError:
        return {}


async def _targets(
    admin: AdminClient, cluster: str | None, broker_addr: str | None, masters_only: bool = False
) -> list[str]:
    if broker_addr is not None:
        return [broker_addr]
    brokers = await (admin.masters(cluster) if masters_only else admin.brokers(cluster))
    return [b.address for b in brokers]


@main.command("clusterList")
@common
@click.option("-m", "--moreStats", "more", is_flag=True, help="Print message totals instead.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Only this cluster.")
def cluster_list(namesrv_addr: str | None, as_json: bool, more: bool, cluster: str | None) -> None:
    """List every broker of every cluster with its load."""

    async def work(admin: AdminClient) -> Output:
        brokers = await admin.brokers(cluster)
        infos = await asyncio.gather(*(_runtime(admin, b.address) for b in brokers))
        rows, data = [], []
        now = time.time() * 1000
        for broker, info in zip(brokers, infos, strict=True):
            data.append({**camel_data(broker), "runtime": info})
            if more:
                put_now, get_now = (
                    int(info.get(k, 0)) for k in ("msgPutTotalTodayNow", "msgGetTotalTodayNow")
                )
                put_morning = int(info.get("msgPutTotalTodayMorning", 0))
                get_morning = int(info.get("msgGetTotalTodayMorning", 0))
                put_yest = put_morning - int(info.get("msgPutTotalYesterdayMorning", 0))
                get_yest = get_morning - int(info.get("msgGetTotalYesterdayMorning", 0))
                rows.append(
                    [
                        broker.cluster,
                        broker.broker_name,
                        put_yest,
                        get_yest,
                        put_now - put_morning,
                        get_now - get_morning,
                    ]
                )
                continue
            earliest = int(info.get("earliestMessageTimeStamp", 0) or 0)
            hours = (now - earliest) / 3_600_000 if earliest > 0 else 0.0
            timer = "{}-{}({:.1f}w, {:.1f}, {:.1f})".format(
                info.get("timerReadBehind", "0"),
                info.get("timerOffsetBehind", "0"),
                float(info.get("timerCongestNum", 0)) / 10000,
                float(info.get("timerEnqueueTps", 0)),
                float(info.get("timerDequeueTps", 0)),
            )
            rows.append(
                [
                    broker.cluster,
                    broker.broker_name,
                    broker.broker_id,
                    broker.address,
                    info.get("brokerVersionDesc", ""),
                    "{:9.2f}({},{}ms)".format(
                        _first(info.get("putTps")),
                        info.get("sendThreadPoolQueueSize", ""),
                        info.get("sendThreadPoolQueueHeadWaitTimeMills", ""),
                    ).strip(),
                    "{:9.2f}({},{}ms)".format(
                        _first(info.get("getTransferedTps")),
                        info.get("pullThreadPoolQueueSize", ""),
                        info.get("pullThreadPoolQueueHeadWaitTimeMills", ""),
                    ).strip(),
                    timer,
                    info.get("pageCacheLockTimeMills", ""),
                    f"{hours:.2f}",
                    f"{float(info.get('commitLogDiskRatio', 0) or 0):.4f}",
                    info.get("brokerActive", "false") if info else "false",
                ]
            )
        if more:
            columns = [
                "#Cluster Name",
                "#Broker Name",
                "#InTotalYest",
                "#OutTotalYest",
                "#InTotalToday",
                "#OutTotalToday",
            ]
            return Output(data, tables=[Table(columns, rows)])
        tables = [Table(CLUSTER_COLUMNS, rows)]
        roles = await _controller_roles(admin, brokers)
        if roles.rows:
            tables.append(roles)
        return Output(data, tables=tables)

    run("clusterList", namesrv_addr, as_json, work)


async def _controller_roles(admin: AdminClient, brokers: list[BrokerAddress]) -> Table:
    """Controller mode (tidemq): each broker's own id, role and epoch, and whether the
    SyncStateSet holds it; a second table, so the first keeps RocketMQ's columns."""

    async def one(address: str) -> ControllerRuntimeInfo | None:
        try:
            return (await admin.ha_status(address)).controller
        except TideMQError:
            return None

    infos = await asyncio.gather(*(one(b.address) for b in brokers))
    table = Table(["#Broker Name", "#Addr", "#BrokerId", "#Role", "#Epoch", "#InSyncStateSet"])
    in_set = {
        (b.broker_name, m)
        for b, i in zip(brokers, infos, strict=True)
        if i is not None and i.is_master
        for m in i.sync_state_set
    }
    for broker, info in zip(brokers, infos, strict=True):
        if info is None:
            continue
        role = "MASTER" if info.is_master else "SLAVE"
        if info.no_master_reason and not info.is_master:
            role += f" ({info.no_master_reason})"
        elif info.deposed and not info.is_master:
            role += f" (deposed: {info.deposed})"
        in_sync = (broker.broker_name, info.broker_id) in in_set
        table.rows.append(
            [broker.broker_name, broker.address, info.broker_id, role, info.epoch, in_sync]
        )
    return table


@main.command("brokerStatus")
@common
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Broker address.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Every broker of a cluster.")
def broker_status(
    namesrv_addr: str | None, as_json: bool, broker_addr: str | None, cluster: str | None
) -> None:
    """Print a broker's runtime statistics (GET_BROKER_RUNTIME_INFO)."""
    need_one("brokerStatus", b=broker_addr, c=cluster)

    async def work(admin: AdminClient) -> Output:
        addresses = await _targets(admin, cluster, broker_addr)
        data, lines = {}, []
        for address in addresses:
            table = await admin.runtime_info(address)
            data[address] = table
            for key in sorted(table):
                prefix = f"{address:<24s} " if cluster is not None else ""
                lines.append(f"{prefix}{key:<32s}: {table[key]}")
        return Output(data, lines_before=lines)

    run("brokerStatus", namesrv_addr, as_json, work)


def _ha_lines(address: str, info: HARuntimeInfo) -> tuple[list[str], Table | None]:
    if info.master:
        head = [
            "",
            f"#MasterAddr\t{address}",
            f"#MasterCommitLogMaxOffset\t{info.master_commit_log_max_offset}",
            f"#SlaveNum\t{len(info.ha_connection_info)}",
            f"#InSyncSlaveNum\t{info.in_sync_slave_nums}",
        ]
        table = Table(
            [
                "#SlaveAddr",
                "#SlaveAckOffset",
                "#Diff",
                "#TransferSpeed(KB/s)",
                "#Status",
                "#TransferFromWhere",
            ]
        )
        for c in info.ha_connection_info:
            table.rows.append(
                [
                    c.addr,
                    c.slave_ack_offset,
                    c.diff,
                    f"{c.transferred_byte_in_second / 1024:.2f}",
                    "OK" if c.in_sync else "Fall Behind",
                    c.transfer_from_where,
                ]
            )
        return head, table
    client = info.ha_client_runtime_info
    if client is None:
        return ["", f"#Broker\t{address}", "#HA\tnot replicating"], None
    return [
        "",
        f"#MasterAddr\t{client.master_addr}",
        f"#CommitLogMaxOffset\t{client.max_offset}",
        f"#TransferSpeed(KB/s)\t{client.transferred_byte_in_second / 1024:.2f}",
        f"#LastReadTime\t{format_time(client.last_read_timestamp)}",
        f"#LastWriteTime\t{format_time(client.last_write_timestamp)}",
        f"#MasterFlushOffset\t{client.master_flush_offset}",
        f"#DispatchBehindBytes\t{client.dispatch_behind_bytes}",
    ], None


@main.command("haStatus")
@common
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Broker address.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Every master of a cluster.")
@click.option(
    "-i", "--interval", type=int, default=None, help="Repeat every N seconds (until Ctrl-C)."
)
def ha_status(
    namesrv_addr: str | None,
    as_json: bool,
    broker_addr: str | None,
    cluster: str | None,
    interval: int | None,
) -> None:
    """Print replication status: each slave's acknowledged offset and lag (#Diff, bytes)."""
    need_one("haStatus", b=broker_addr, c=cluster)

    async def work(admin: AdminClient) -> Output:
        while True:
            output = Output([])
            for address in await _targets(admin, cluster, broker_addr, masters_only=True):
                info = await admin.ha_status(address)
                output.data.append({"brokerAddr": address, **camel_data(info)})
                head, table = _ha_lines(address, info)
                output.lines_before.extend(head)
                if table is not None:
                    output.lines_before.extend(table.render())
            if interval is None:
                return output
            click.echo(output.text())
            await asyncio.sleep(interval)

    run("haStatus", namesrv_addr, as_json, work)


@main.command("getBrokerConfig")
@common
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Broker address.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Every broker of a cluster.")
def get_broker_config(
    namesrv_addr: str | None, as_json: bool, broker_addr: str | None, cluster: str | None
) -> None:
    """Print a broker's effective configuration."""
    need_one("getBrokerConfig", b=broker_addr, c=cluster)

    async def work(admin: AdminClient) -> Output:
        data, lines = {}, []
        for address in await _targets(admin, cluster, broker_addr):
            props = await admin.broker_config(address)
            data[address] = props
            lines.append(f"============{address}============")
            lines.extend(f"{k:<50s}=  {v}" for k, v in props.items())
        return Output(data, lines_before=lines)

    run("getBrokerConfig", namesrv_addr, as_json, work)


@main.command("updateBrokerConfig")
@common
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Broker address.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Every master of a cluster.")
@click.option("-a", "--updateAllBroker", "with_slaves", is_flag=True, help="Slaves too (-c).")
@click.option("-k", "--key", required=True, help="Configuration key, e.g. brokerPermission.")
@click.option("-v", "--value", required=True, help="Its new value.")
def update_broker_config(
    namesrv_addr: str | None,
    as_json: bool,
    broker_addr: str | None,
    cluster: str | None,
    with_slaves: bool,
    key: str,
    value: str,
) -> None:
    """Change a broker setting while it runs (keys that take effect at once)."""
    need_one("updateBrokerConfig", b=broker_addr, c=cluster)

    async def work(admin: AdminClient) -> Output:
        addresses = await _targets(admin, cluster, broker_addr, masters_only=not with_slaves)
        for address in addresses:
            await admin.update_broker_config(address, {key: value})
        lines = [f"update broker config success, {address}" for address in addresses]
        return Output({"updated": addresses, key: value}, lines_before=lines)

    run("updateBrokerConfig", namesrv_addr, as_json, work)


def _perm_command(name: str, verb: str) -> None:
    @main.command(name)
    @common
    @click.option("-b", "--brokerName", "broker_name", required=True, help="Broker group name.")
    def command(namesrv_addr: str | None, as_json: bool, broker_name: str) -> None:
        async def work(admin: AdminClient) -> Output:
            if verb == "wipe":
                counts = await admin.wipe_write_perm(broker_name)
            else:
                counts = await admin.add_write_perm(broker_name)
            lines = [
                f"{verb} write perm of broker[{broker_name}] in name server[{ns}] OK, {n}"
                for ns, n in counts
            ]
            data = [{"namesrvAddr": ns, "topicCount": n} for ns, n in counts]
            return Output(data, lines_before=lines)

        run(name, namesrv_addr, as_json, work)

    command.help = (
        f"{'Take away' if verb == 'wipe' else 'Give back'} a broker group's write permission "
        f"on every name server{' (drain it before maintenance)' if verb == 'wipe' else ''}."
    )


_perm_command("wipeWritePerm", "wipe")
_perm_command("addWritePerm", "add")
