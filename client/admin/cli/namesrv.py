"""Name server commands: getNamesrvConfig, updateNamesrvConfig, updateKvConfig,
deleteKvConfig (each name server of -n is asked or changed in turn, as RocketMQ's tools do)."""

from __future__ import annotations

import click

from tidemq.client.admin.api import AdminClient
from tidemq.client.admin.cli.base import Output, common, main, run


@main.command("getNamesrvConfig")
@common
def get_namesrv_config(namesrv_addr: str | None, as_json: bool) -> None:
    """Print each name server's effective configuration."""

    async def work(admin: AdminClient) -> Output:
        configs = await admin.namesrv_config()
        lines = []
        for address, props in configs.items():
            lines.append(f"============{address}============")
            lines.extend(f"{k:<50s}=  {v}" for k, v in props.items())
        return Output(configs, lines_before=lines)

    run("getNamesrvConfig", namesrv_addr, as_json, work)


@main.command("updateNamesrvConfig")
@common
@click.option("-k", "--key", required=True, help="Config key, e.g. orderMessageEnable.")
@click.option("-v", "--value", required=True, help="Its new value.")
def update_namesrv_config(namesrv_addr: str | None, as_json: bool, key: str, value: str) -> None:
    """Change a name server setting while it runs (keys that take effect at once)."""

    async def work(admin: AdminClient) -> Output:
        servers = await admin.update_namesrv_config({key: value})
        lines = [f"update name server config success!{servers}", f"{key} : {value}"]
        return Output({"namesrvAddrs": servers, "key": key, "value": value}, lines_before=lines)

    run("updateNamesrvConfig", namesrv_addr, as_json, work)


@main.command("updateKvConfig")
@common
@click.option("-s", "--namespace", required=True, help="Namespace, e.g. ORDER_TOPIC_CONFIG.")
@click.option("-k", "--key", required=True, help="Key.")
@click.option("-v", "--value", required=True, help="Value.")
def update_kv_config(
    namesrv_addr: str | None, as_json: bool, namespace: str, key: str, value: str
) -> None:
    """Set a value in the name servers' KV configuration."""

    async def work(admin: AdminClient) -> Output:
        await admin.put_kv_config(namespace, key, value)
        data = {"namespace": namespace, "key": key, "value": value}
        return Output(data, lines_before=["create or update kv config to namespace success."])

    run("updateKvConfig", namesrv_addr, as_json, work)


@main.command("deleteKvConfig")
@common
@click.option("-s", "--namespace", required=True, help="Namespace.")
@click.option("-k", "--key", required=True, help="Key.")
def delete_kv_config(namesrv_addr: str | None, as_json: bool, namespace: str, key: str) -> None:
    """Delete a key from the name servers' KV configuration."""

    async def work(admin: AdminClient) -> Output:
        await admin.delete_kv_config(namespace, key)
        data = {"namespace": namespace, "key": key}
        return Output(data, lines_before=["delete kv config from namespace success."])

    run("deleteKvConfig", namesrv_addr, as_json, work)
