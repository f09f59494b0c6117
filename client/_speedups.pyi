from typing import Any

from tidemq.client.protocol.headers import SendMessageRequestHeader
from tidemq.client.remoting.codes import SerializeType
from tidemq.client.remoting.command import Body, RemotingCommand

def _command_from_mapping(
    obj: Any, body: Body, serialize_type: SerializeType, fmt: str
) -> RemotingCommand: ...
def decode_send_header(ext: dict[str, str], short_keys: bool) -> SendMessageRequestHeader: ...
