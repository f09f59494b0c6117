"""Malformed frames to a real namesrvd: that connection closes with one log line, nothing else.

The first input is issue 20's: a msgpack header whose extFields value is a map holding binary
data (found by mutating frames against a live broker). It used to escape the decoder as a
TypeError from the JSON encoder, and uvloop logged "Fatal error on transport" with a traceback.
"""

from __future__ import annotations

import asyncio
import socket

from tests.support.conditions import eventually
from tests.support.processes import LOOPBACK, Daemon
from tidemq.client.protocol.namesrv import parse_cluster_info_response, simple_request
from tidemq.client.remoting.codes import RequestCode
from tidemq.client.transport.client import RemotingClient

BINARY_IN_EXT_MAP = bytes.fromhex(
    "000000430200003f86a4636f6465cd0136a86c616e677561676500a776657273696f6ecd0191a66f7061"
    "71756501a4666c616700a96578744669656c647381a17881a161c40101"
)


def send_and_read_until_closed(port: int, frame: bytes) -> tuple[bytes, str]:
    """Send `frame`, read until the server closes; what it answered and our local address."""
    with socket.create_connection((LOOPBACK, port), timeout=10) as sock:
        sock.sendall(frame)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
        host, local_port = sock.getsockname()
        return received, f"{host}:{local_port}"


async def test_binary_inside_an_ext_field_map_closes_only_that_connection(
    namesrv: Daemon, remoting_client: RemotingClient
) -> None:
    port = int(namesrv.address.rsplit(":", 1)[1])
    # a connection opened before the bad frame stays open and keeps being served
    request = simple_request(RequestCode.GET_BROKER_CLUSTER_INFO)
    parse_cluster_info_response(await remoting_client.invoke(namesrv.address, request, 5.0))

    answered, peer = await asyncio.to_thread(send_and_read_until_closed, port, BINARY_IN_EXT_MAP)

    assert answered == b""
    await eventually(lambda: peer in namesrv.log_text(), "the log line of the closed connection")
    lines = [line for line in namesrv.log_text().splitlines() if peer in line]
    assert len(lines) == 1, lines
    assert "malformed frame" in lines[0]
    assert "extFields['x'] holds a value JSON cannot carry" in lines[0]
    log = namesrv.log_text()
    assert "Traceback" not in log
    assert "Fatal error" not in log
    request = simple_request(RequestCode.GET_BROKER_CLUSTER_INFO)
    parse_cluster_info_response(await remoting_client.invoke(namesrv.address, request, 5.0))
    assert namesrv.running
