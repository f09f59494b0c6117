"""Types of the compiled twins in client/remoting/_codec.pyx (mypy cannot read Cython)."""

from collections.abc import Mapping
from typing import Any

from tidemq.client.remoting.codes import SerializeType
from tidemq.client.remoting.command import Body, RemotingCommand
from tidemq.client.remoting.headers import HeaderBytes
from tidemq.common.mac import Mac

def _command_from_mapping(
    obj: Any, body: Body, serialize_type: SerializeType, fmt: str
) -> RemotingCommand: ...
def decode_msgpack_header(data: HeaderBytes, body: Body = b"") -> RemotingCommand: ...
def encode_msgpack_header(cmd: RemotingCommand) -> bytes: ...
def encode_command_parts(cmd: RemotingCommand) -> tuple[bytes, Body]: ...
def parse_frames(view: memoryview, max_frame_size: int) -> tuple[list[RemotingCommand], int]: ...
def decode_json_header(data: HeaderBytes, body: Body = b"") -> RemotingCommand: ...
def encode_json_header(cmd: RemotingCommand) -> bytes: ...
def signed_content_digest(key: Mac, ext_fields: Mapping[str, str], body: Body) -> bytes: ...
def signature_matches(key: Mac, ext_fields: Mapping[str, str], body: Body) -> bool: ...
def encode_send_head(
    template: Any,
    opaque: int,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    flag: int,
    properties: str | None,
    body: bytes,
) -> bytes: ...
def encode_signed_send_head(
    signed: Any,
    opaque: int,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    flag: int,
    properties: str | None,
    body: bytes,
) -> bytes: ...
def send_result(
    status: Any, msg_id: str, offset_msg_id: str, message_queue: Any, queue_offset: int
) -> Any: ...
