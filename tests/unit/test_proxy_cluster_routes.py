"""QueryRoute's view of the cluster (broker/proxy/cluster_routes.py) with a fake remoting API:
each master at its own gRPC port, asked of it and remembered; a broker without one left out."""

from __future__ import annotations

from typing import Any

from tidemq.broker.proxy.cluster_routes import ClusterRoutes
from tidemq.broker.proxy.protocol.definition_pb2 import Broker, Resource
from tidemq.broker.proxy.routes import endpoints
from tidemq.client.errors import ConnectError
from tidemq.client.protocol.models import BrokerData, QueueData, TopicRouteData
from tidemq.client.remoting.codes import ResponseCode
from tidemq.client.remoting.command import RemotingCommand

ROUTE = TopicRouteData(
    queue_datas=[QueueData("b", 2, 2, 6), QueueData("a", 1, 1, 6), QueueData("c", 1, 1, 6)],
    broker_datas=[
        BrokerData("C", "a", {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}),
        BrokerData("C", "b", {0: "10.0.0.3:10911"}),
        BrokerData("C", "c", {0: "10.0.0.4:10911"}),
    ],
)


class FakeAPI:
    def __init__(self, ports: dict[str, Any]) -> None:
        self.ports = ports
        self.config_calls: list[str] = []
        self.route: TopicRouteData | None = ROUTE

    def request(self, code: int) -> RemotingCommand:
        return RemotingCommand.request(code)

    async def get_route(self, namesrv: str, topic: str) -> TopicRouteData | None:
        if namesrv == "down:9876":
            raise ConnectError("refused")
        return self.route

    async def call(self, address: str, request: RemotingCommand, **_: Any) -> RemotingCommand:
        self.config_calls.append(address)
        port = self.ports[address]
        if isinstance(port, Exception):
            raise port
        body = f"brokerName=x\ngrpcServerPort={port}\n".encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, None, body=body)


def routes(api: FakeAPI, now: list[float]) -> ClusterRoutes:
    own = Broker(name="a", id=0, endpoints=endpoints("10.0.0.1", 8081))
    return ClusterRoutes(
        api,  # type: ignore[arg-type]
        lambda: ["down:9876", "ns:9876"],
        lambda: own,
        clock=lambda: now[0],
    )


async def test_each_master_is_listed_at_its_own_grpc_port() -> None:
    api = FakeAPI({"10.0.0.3:10911": 8181, "10.0.0.4:10911": -1})
    now = [0.0]
    queues = await routes(api, now).queues(Resource(name="T"), "T")
    assert queues is not None
    listed = [(q.broker.name, q.id, q.broker.endpoints.addresses[0].port) for q in queues]
    # a: this broker, no call; b: asked; c: serves no gRPC, left out; slaves never listed
    assert listed == [("a", 0, 8081), ("b", 0, 8181), ("b", 1, 8181)]
    assert queues[1].broker.endpoints.addresses[0].host == "10.0.0.3"
    assert sorted(api.config_calls) == ["10.0.0.3:10911", "10.0.0.4:10911"]


async def test_ports_are_remembered_and_an_unreached_broker_is_asked_again_soon() -> None:
    api = FakeAPI({"10.0.0.3:10911": ConnectError("refused"), "10.0.0.4:10911": 8282})
    now = [0.0]
    cluster = routes(api, now)
    first = await cluster.queues(Resource(name="T"), "T")
    assert first is not None and {q.broker.name for q in first} == {"a", "c"}
    api.ports["10.0.0.3:10911"] = 8181
    now[0] = 6.0  # past the short memory of a failure, within the port's
    second = await cluster.queues(Resource(name="T"), "T")
    assert second is not None and {q.broker.name for q in second} == {"a", "b", "c"}
    assert api.config_calls.count("10.0.0.4:10911") == 1


async def test_no_route_leaves_the_answer_to_this_broker() -> None:
    api = FakeAPI({})
    api.route = None
    assert await routes(api, [0.0]).queues(Resource(name="T"), "T") is None
