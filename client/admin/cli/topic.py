"""Topic commands: updateTopic, updateTopicList, updateTopicPerm, deleteTopic, topicList,
topicRoute, topicStatus, topicClusterList."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import click

from tidemq.client.admin.api import AdminClient
from tidemq.client.admin.cli.base import (
    LIST_REQUEST_SIZE,
    Output,
    Table,
    common,
    format_time,
    main,
    need_one,
    parse_bool,
    read_config_list,
    run,
)
from tidemq.client.errors import TideMQError
from tidemq.client.protocol.models import MASTER_ID, TopicConfig, perm_to_string


def topic_config_line(config: TopicConfig) -> str:
    return (
        f"TopicConfig [topicName={config.topic_name}, readQueueNums={config.read_queue_nums}, "
        f"writeQueueNums={config.write_queue_nums}, perm={perm_to_string(config.perm)}, "
        f"topicFilterType={config.topic_filter_type}, topicSysFlag={config.topic_sys_flag}, "
        f"order={str(config.order).lower()}]"
    )


@main.command("updateTopic")
@common
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Create on this broker.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Create on every master.")
@click.option("-r", "--readQueueNums", "read_queues", type=int, default=8, show_default=True)
@click.option("-w", "--writeQueueNums", "write_queues", type=int, default=8, show_default=True)
@click.option("-p", "--perm", type=click.Choice(["2", "4", "6"]), default="6", help="2=W 4=R 6=RW.")
@click.option("-o", "--order", default="false", help="Ordered topic (true|false).")
def update_topic(
    namesrv_addr: str | None,
    as_json: bool,
    topic: str,
    broker_addr: str | None,
    cluster: str | None,
    read_queues: int,
    write_queues: int,
    perm: str,
    order: str,
) -> None:
    """Create or update a topic."""
    need_one("updateTopic", b=broker_addr, c=cluster)
    config = TopicConfig(topic, read_queues, write_queues, int(perm), order=parse_bool(order))

    async def work(admin: AdminClient) -> Output:
        if broker_addr is not None:
            addresses = [broker_addr]
        else:
            addresses = [b.address for b in await admin.masters(cluster)]
        lines = []
        for address in addresses:
            await admin.create_topic(address, config)
            lines.append(f"create topic to {address} success.")
        lines.append(topic_config_line(config))
        return Output({"brokers": addresses, "topicConfig": config.to_dict()}, lines_before=lines)

    run("updateTopic", namesrv_addr, as_json, work)


@main.command("updateTopicList")
@common
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="Create on this broker.")
@click.option("-c", "--clusterName", "cluster", default=None, help="Create on every master.")
@click.option(
    "-f",
    "--filename",
    "filename",
    required=True,
    help="A JSON file: a list of TopicConfig objects (topicName, readQueueNums, ...).",
)
def update_topic_list(
    namesrv_addr: str | None,
    as_json: bool,
    broker_addr: str | None,
    cluster: str | None,
    filename: str,
) -> None:
    """Create or update topics in batch (UPDATE_AND_CREATE_TOPIC_LIST)."""
    need_one("updateTopicList", b=broker_addr, c=cluster)

    async def work(admin: AdminClient) -> Output:
        configs = read_config_list(filename, TopicConfig.from_dict, "topicName")
        if broker_addr is not None:
            addresses = [broker_addr]
        else:
            addresses = [b.address for b in await admin.masters(cluster)]
        lines = []
        for address in addresses:
            # Requests of at most LIST_REQUEST_SIZE topics: each is one change of the table.
            for start in range(0, len(configs), LIST_REQUEST_SIZE):
                await admin.create_topic_list(address, configs[start : start + LIST_REQUEST_SIZE])
            lines.append(
                f"submit batch of topic config to {address} success, please check the result later."
            )
        return Output({"brokers": addresses, "topics": len(configs)}, lines_before=lines)

    run("updateTopicList", namesrv_addr, as_json, work)


@main.command("deleteTopic")
@common
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-c", "--clusterName", "cluster", required=True, help="Cluster to delete it from.")
def delete_topic(namesrv_addr: str | None, as_json: bool, topic: str, cluster: str) -> None:
    """Delete a topic from every master of a cluster and from the name servers."""

    async def work(admin: AdminClient) -> Output:
        masters = await admin.masters(cluster)
        for broker in masters:
            await admin.delete_topic_in_broker(broker.address, topic)
        await admin.delete_topic_in_namesrv(topic, cluster)
        lines = [
            f"delete topic [{topic}] from cluster [{cluster}] success.",
            f"delete topic [{topic}] from NameServer success.",
        ]
        return Output({"topic": topic, "cluster": cluster}, lines_before=lines)

    run("deleteTopic", namesrv_addr, as_json, work)


@main.command("topicList")
@common
@click.option(
    "-c", "--clusterModel", "cluster_model", is_flag=True, help="Show clusters and groups."
)
def topic_list(namesrv_addr: str | None, as_json: bool, cluster_model: bool) -> None:
    """List the topics the name servers know."""

    async def work(admin: AdminClient) -> Output:
        topics = await admin.topic_list()
        if not cluster_model:
            return Output(topics, lines_before=list(topics))
        info = await admin.cluster_info()
        cluster_of = {name: data.cluster for name, data in info.broker_addr_table.items()}
        table = Table(["#Cluster Name", "#Topic", "#Consumer Group"])
        data = []
        for topic in topics:
            try:
                route = await admin.topic_route(topic)
            except TideMQError:
                continue
            clusters = sorted({cluster_of.get(b.broker_name, "") for b in route.broker_datas})
            groups: set[str] = set()
            for broker in route.broker_datas:
                address = broker.broker_addrs.get(MASTER_ID)
                if address is not None:
                    with contextlib.suppress(TideMQError):
                        groups.update(await admin.topic_consumed_by(address, topic))
            for cluster in clusters:
                for group in sorted(groups) or [""]:
                    table.rows.append([cluster, topic, group])
                data.append({"cluster": cluster, "topic": topic, "groups": sorted(groups)})
        return Output(data, tables=[table])

    run("topicList", namesrv_addr, as_json, work)


@main.command("topicRoute")
@common
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-l", "--list", "as_list", is_flag=True, help="One line per broker group.")
def topic_route(namesrv_addr: str | None, as_json: bool, topic: str, as_list: bool) -> None:
    """Print a topic's route (the name server's answer)."""

    async def work(admin: AdminClient) -> Output:
        route = await admin.topic_route(topic)
        data = route.to_dict()
        if not as_list:
            return Output(data, lines_before=[json.dumps(data, indent=2)])
        queues = {q.broker_name: q for q in route.queue_datas}
        table = Table(
            ["#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"]
        )
        for broker in sorted(route.broker_datas, key=lambda b: b.broker_name):
            q = queues.get(broker.broker_name)
            addrs = ",".join(f"{i}:{a}" for i, a in sorted(broker.broker_addrs.items()))
            table.rows.append(
                [
                    broker.cluster,
                    broker.broker_name,
                    addrs,
                    q.read_queue_nums if q else 0,
                    q.write_queue_nums if q else 0,
                    perm_to_string(q.perm) if q else "",
                ]
            )
        return Output(data, tables=[table])

    run("topicRoute", namesrv_addr, as_json, work)


@main.command("topicStatus")
@common
@click.option("-t", "--topic", required=True, help="Topic name.")
def topic_status(namesrv_addr: str | None, as_json: bool, topic: str) -> None:
    """Print each queue's min and max offset."""

    async def work(admin: AdminClient) -> Output:
        stats = await admin.examine_topic_stats(topic)
        table = Table(["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"])
        data = []
        for mq in sorted(stats.offset_table):
            o = stats.offset_table[mq]
            table.rows.append(
                [
                    mq.broker_name,
                    mq.queue_id,
                    o.min_offset,
                    o.max_offset,
                    format_time(o.last_update_timestamp),
                ]
            )
            data.append(
                {
                    "brokerName": mq.broker_name,
                    "queueId": mq.queue_id,
                    "minOffset": o.min_offset,
                    "maxOffset": o.max_offset,
                    "lastUpdateTimestamp": o.last_update_timestamp,
                }
            )
        return Output(data, tables=[table])

    run("topicStatus", namesrv_addr, as_json, work)


@main.command("updateTopicPerm")
@common
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-b", "--brokerAddr", "broker_addr", default=None, help="On this broker.")
@click.option("-c", "--clusterName", "cluster", default=None, help="On every master of it.")
@click.option(
    "-p", "--perm", required=True, type=click.Choice(["2", "4", "6"]), help="2=W 4=R 6=RW."
)
def update_topic_perm(
    namesrv_addr: str | None,
    as_json: bool,
    topic: str,
    broker_addr: str | None,
    cluster: str | None,
    perm: str,
) -> None:
    """Change a topic's permission on a broker (or every master of a cluster), keeping its
    queues and flags."""
    need_one("updateTopicPerm", b=broker_addr, c=cluster)
    new_perm = int(perm)

    async def work(admin: AdminClient) -> Output:
        if broker_addr is not None:
            addresses = [broker_addr]
        else:
            addresses = [b.address for b in await admin.masters(cluster)]
        lines, data = [], []
        for address in addresses:
            old = await admin.topic_config(address, topic)
            entry = {"brokerAddr": address, "oldPerm": old.perm, "newPerm": new_perm}
            data.append(entry)
            if old.perm == new_perm:
                lines.append(f"new perm equals to the old one! ({address})")
                continue
            config = dataclasses.replace(old, perm=new_perm)
            await admin.create_topic(address, config)
            lines.append(f"update topic perm from {old.perm} to {new_perm} in {address} success.")
            lines.append(topic_config_line(config))
        return Output(data, lines_before=lines)

    run("updateTopicPerm", namesrv_addr, as_json, work)


@main.command("topicClusterList")
@common
@click.option("-t", "--topic", required=True, help="Topic name.")
def topic_cluster_list(namesrv_addr: str | None, as_json: bool, topic: str) -> None:
    """Print the clusters that serve a topic."""

    async def work(admin: AdminClient) -> Output:
        route = await admin.topic_route(topic)
        info = await admin.cluster_info()
        cluster_of = {name: data.cluster for name, data in info.broker_addr_table.items()}
        clusters = sorted(
            {cluster_of[b.broker_name] for b in route.broker_datas if b.broker_name in cluster_of}
            | {b.cluster for b in route.broker_datas if b.cluster}
        )
        return Output(clusters, lines_before=list(clusters))

    run("topicClusterList", namesrv_addr, as_json, work)
