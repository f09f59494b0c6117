"""deploy/controller through `tidemq-cluster run` (issue 16): etcd, a name server and three
brokers of one group in controller mode, started in order, ready once a master is elected and
every broker registered; Ctrl-C stops everything, etcd last."""

from __future__ import annotations

from pathlib import Path

from tests.support.conditions import eventually
from tests.support.failover import controller
from tests.support.launcher import LaunchedCluster, alive
from tidemq.client.api import BrokerAPI


async def test_the_controller_topology_elects_a_master_and_stops_cleanly(
    tmp_path: Path, api: BrokerAPI
) -> None:
    cluster = LaunchedCluster.start("controller", tmp_path / "controller")
    try:
        assert "started etcd" in cluster.output()
        names = ["broker-a-1", "broker-a-2", "broker-a-3"]
        infos = [await controller(api, cluster.address(n)) for n in names]
        assert sum(1 for i in infos if i["isMaster"]) == 1, infos
        master = next(n for n, i in zip(names, infos, strict=True) if i["isMaster"])

        async def full_set() -> bool:
            members = (await controller(api, cluster.address(master)))["syncStateSet"]
            return members == [1, 2, 3]

        await eventually(full_set, "the SyncStateSet of all three", 30)
    finally:
        code = cluster.stop()
    assert code == 0, cluster.output()
    output = cluster.output()
    assert output.index("stopped namesrv") < output.index("stopped etcd")
    assert not any(alive(pid) for pid in cluster.pids.values())
