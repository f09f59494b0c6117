"""Controller-mode commands (issue 16): getSyncStateSet, getBrokerEpoch and electMaster.

RocketMQ 5 asks its controller; tidemq's controller is etcd, and each broker reports its view in
its HA status (GET_BROKER_HA_STATUS "controller"): these commands find a group's brokers through
the name servers and ask them. `-b` names broker groups (`,`-separated), `-c` takes every group
of a cluster. electMaster asks the group's master to hand over to another broker of its
SyncStateSet, and waits until that one is master.
"""

from __future__ import annotations

import asyncio

import click

from tidemq.client.admin.api import AdminClient, BrokerAddress
from tidemq.client.admin.cli.base import CommandError, Output, common, main, need_one, run
from tidemq.client.errors import TideMQError
from tidemq.client.protocol.admin import ControllerRuntimeInfo


async def _groups(
    admin: AdminClient, names: str | None, cluster: str | None
) -> dict[str, list[BrokerAddress]]:
    wanted = {n.strip() for n in (names or "").split(",") if n.strip()}
    groups: dict[str, list[BrokerAddress]] = {}
    for broker in await admin.brokers(cluster):
        if not wanted or broker.broker_name in wanted:
            groups.setdefault(broker.broker_name, []).append(broker)
    missing = wanted - groups.keys()
    if missing:
        raise CommandError(f"broker {', '.join(sorted(missing))} not found on the name servers")
    return groups


async def _controller(admin: AdminClient, address: str) -> ControllerRuntimeInfo | None:
    try:
        return (await admin.ha_status(address)).controller
    except TideMQError:
        return None


@main.command("getSyncStateSet")
@common
@click.option("-b", "--brokerName", "broker_names", default=None, help="Broker groups, ','.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Every group of a cluster.")
def get_sync_state_set(
    namesrv_addr: str | None, as_json: bool, broker_names: str | None, cluster: str | None
) -> None:
    """Print each group's master, epoch and SyncStateSet (controller mode)."""
    need_one("getSyncStateSet", b=broker_names, c=cluster)

    async def work(admin: AdminClient) -> Output:
        output = Output([])
        for name, brokers in sorted((await _groups(admin, broker_names, cluster)).items()):
            infos = await asyncio.gather(*(_controller(admin, b.address) for b in brokers))
            masters = [
                (b, i) for b, i in zip(brokers, infos, strict=True) if i is not None and i.is_master
            ]
            if not any(infos):
                raise CommandError(f"broker {name} does not run in controller mode")
            if not masters:
                output.data.append({"brokerName": name, "master": None})
                output.lines_before += ["", f"#brokerName\t{name}", "#Master\tnone (no election)"]
                continue
            broker, info = masters[0]
            output.data.append(
                {
                    "clusterName": broker.cluster,
                    "brokerName": name,
                    "masterBrokerId": info.broker_id,
                    "masterAddr": broker.address,
                    "masterEpoch": info.epoch,
                    "syncStateSet": info.sync_state_set,
                }
            )
            output.lines_before += [
                "",
                f"#clusterName\t{broker.cluster}",
                f"#brokerName\t{name}",
                f"#MasterBrokerId\t{info.broker_id}",
                f"#MasterAddr\t{broker.address}",
                f"#MasterEpoch\t{info.epoch}",
                f"#SyncStateSetNums\t{len(info.sync_state_set)}",
                f"InSyncReplicas:\t{', '.join(map(str, info.sync_state_set))}",
            ]
        return output

    run("getSyncStateSet", namesrv_addr, as_json, work)


@main.command("getBrokerEpoch")
@common
@click.option("-b", "--brokerName", "broker_names", default=None, help="Broker groups, ','.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Every group of a cluster.")
def get_broker_epoch(
    namesrv_addr: str | None, as_json: bool, broker_names: str | None, cluster: str | None
) -> None:
    """Print each broker's epoch file: which epoch's master wrote from which offset."""
    need_one("getBrokerEpoch", b=broker_names, c=cluster)

    async def work(admin: AdminClient) -> Output:
        output = Output([])
        for name, brokers in sorted((await _groups(admin, broker_names, cluster)).items()):
            for broker in brokers:
                info = await _controller(admin, broker.address)
                if info is None:
                    continue
                entries = info.epoch_entries
                output.data.append(
                    {
                        "clusterName": broker.cluster,
                        "brokerName": name,
                        "brokerAddr": broker.address,
                        "brokerId": info.broker_id,
                        "epochs": [{"epoch": e, "startOffset": o} for e, o in entries],
                    }
                )
                output.lines_before += [
                    "",
                    f"#clusterName\t{broker.cluster}",
                    f"#brokerName\t{name}",
                    f"#brokerAddr\t{broker.address}",
                    f"#brokerId\t{info.broker_id}",
                ]
                ends = [o for _e, o in entries[1:]] + [-1]
                for (epoch, start), end in zip(entries, ends, strict=True):
                    output.lines_before.append(
                        f"#Epoch: {epoch}, start: {start}, end: {end if end >= 0 else 'now'}"
                    )
        if not output.data:
            raise CommandError("no broker of those groups runs in controller mode")
        return output

    run("getBrokerEpoch", namesrv_addr, as_json, work)


@main.command("electMaster")
@common
@click.option("-b", "--brokerName", "broker_name", required=True, help="The broker group.")
@click.option("-i", "--brokerId", "broker_id", type=int, required=True, help="The new master.")
@click.option("-w", "--wait", "wait", type=float, default=30.0, help="Seconds to wait for it.")
def elect_master(
    namesrv_addr: str | None, as_json: bool, broker_name: str, broker_id: int, wait: float
) -> None:
    """Make broker BROKERID of group BROKERNAME its master (a manual switch)."""

    async def work(admin: AdminClient) -> Output:
        brokers = (await _groups(admin, broker_name, None))[broker_name]
        masters = [b for b in brokers if b.broker_id == 0]
        if not masters:
            raise CommandError(f"broker {broker_name} has no master registered")
        await admin.elect_master(masters[0].address, broker_name, broker_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while loop.time() < deadline:
            for broker in await admin.brokers():
                if broker.broker_name != broker_name:
                    continue
                info = await _controller(admin, broker.address)
                if info is not None and info.is_master and info.broker_id == broker_id:
                    return Output(
                        {
                            "brokerName": broker_name,
                            "masterBrokerId": broker_id,
                            "epoch": info.epoch,
                        },
                        lines_before=[
                            f"#brokerName\t{broker_name}",
                            f"#MasterBrokerId\t{broker_id}",
                            f"#MasterAddr\t{broker.address}",
                            f"#MasterEpoch\t{info.epoch}",
                        ],
                    )
            await asyncio.sleep(0.2)
        raise CommandError(f"broker {broker_id} of {broker_name} is not master after {wait:.0f} s")

    run("electMaster", namesrv_addr, as_json, work)
