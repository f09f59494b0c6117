"""What a newcomer needs of `make run`: the README lists every port it takes, says how to use the
environment, and one option (`--port-base`, `make run PORT_BASE=N`) moves all the ports at once.

The ports are those `tidemq-cluster run local` would check and take (load_topology's fixed
ports, with the dashboard make run starts), so a port added to deploy/local without the README
fails here. What `make run` installs is tests/integration/test_install.py's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tidemq.broker.daemons.cluster import (
    ClusterError,
    based_ports,
    load_topology,
    port_layout,
)
from tidemq.client.dashboard.cli import DEFAULT_PORT as DASHBOARD_PORT

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCAL = REPO_ROOT / "deploy" / "local"
README = REPO_ROOT / "README.md"


def quick_start() -> str:
    return README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]


def test_the_readme_lists_every_port_make_run_takes(tmp_path: Path) -> None:
    topology = load_topology(LOCAL, tmp_path, dashboard_port=DASHBOARD_PORT)
    taken = {port for _, _, port in port_layout(topology)}
    assert {5556, 5557, 5559, 9876, 10911, 10912, 11011, 8082, 8081, 8181} <= taken
    table = {int(m) for m in re.findall(r"^\| [^|]+ \| (\d+) \|", quick_start(), re.M)}
    assert table == taken


def test_the_readme_says_how_to_use_the_environment() -> None:
    top = README.read_text().split("## Status", 1)[0]
    assert ".venv/bin/python" in top
    assert "source .venv/bin/activate" in top


def test_a_port_base_moves_every_port_of_make_run(tmp_path: Path) -> None:
    default = load_topology(LOCAL, tmp_path, dashboard_port=DASHBOARD_PORT)
    moved = load_topology(LOCAL, tmp_path, dashboard_port=DASHBOARD_PORT, port_base=20000)
    assert port_layout(moved) == [
        ("namesrv", "listenPort", 20000),
        ("namesrv", "metricsPort", 20002),
        ("broker-a", "listenPort", 20010),
        ("broker-a", "haListenPort", 20011),
        ("broker-a", "metricsPort", 20012),
        ("broker-a", "grpcServerPort", 20013),
        ("broker-a-s", "listenPort", 20020),
        ("broker-a-s", "metricsPort", 20022),
        ("broker-a-s", "grpcServerPort", 20023),
        ("dashboard", "port", 20030),
    ]
    assert [(n, k) for n, k, _ in port_layout(default)] == [
        (n, k) for n, k, _ in port_layout(moved)
    ]
    # The brokers register with the moved name server; the dashboard reads it.
    assert all(b.props["namesrvAddr"] == "127.0.0.1:20000" for b in moved.brokers)
    assert moved.dashboard is not None and "127.0.0.1:20000" in moved.dashboard.args
    assert "namesrvAddr=127.0.0.1:20000" in moved.brokers[0].args


def test_an_override_still_wins_over_the_port_base(tmp_path: Path) -> None:
    moved = load_topology(
        LOCAL, tmp_path, ["broker-a:metricsPort=31000"], dashboard_port=0, port_base=20000
    )
    layout = {(name, key): port for name, key, port in port_layout(moved)}
    assert layout[("broker-a", "metricsPort")] == 31000
    assert layout[("broker-a", "listenPort")] == 20010


def test_a_port_base_covers_etcd_and_brokers_without_metrics() -> None:
    controller = REPO_ROOT / "deploy" / "controller"
    brokers = sorted(controller.glob("broker*.properties"))
    overrides, dashboard = based_ports(
        30000, controller / "namesrv.properties", brokers, controller / "etcd.properties"
    )
    ports = [int(o.rpartition("=")[2]) for o in overrides]
    assert len(ports) == len(set(ports))
    etcd_block = 30000 + 10 * (len(brokers) + 1)
    assert overrides[-2:] == [f"etcd:clientPort={etcd_block}", f"etcd:peerPort={etcd_block + 1}"]
    assert all(30000 <= port < dashboard for port in ports)
    assert dashboard == etcd_block + 10


def test_a_port_base_past_the_last_port_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"--port-base 65530: the topology takes ports 65530-"):
        based_ports(
            65530,
            LOCAL / "namesrv.properties",
            sorted(LOCAL.glob("broker*.properties")),
            LOCAL / "etcd.properties",
        )
