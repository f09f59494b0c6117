"""RocketMQ 4.x remoting protocol codec, sans-IO: bytes in, commands out, no sockets.

- `codes`: request/response codes, languages, serialisations, flag bits.
- `command`: the `RemotingCommand` dataclass.
- `headers`: JSON, ROCKETMQ binary and msgpack header serialisations.
- `frame`: `encode_command` and the incremental `FrameDecoder`.
- `json_body`: fastjson-tolerant body parsing and compact JSON writing.
- `errors`: `RemotingProtocolError` and its leaves.
"""

from tidemq.client.remoting.codes import (
    DEFAULT_VERSION,
    CommandFlag,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from tidemq.client.remoting.command import Body, RemotingCommand
from tidemq.client.remoting.errors import (
    BodyDecodeError,
    EncodeError,
    FrameError,
    HeaderDecodeError,
    RemotingProtocolError,
)
from tidemq.client.remoting.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    encode_command,
    encode_command_parts,
)
from tidemq.client.remoting.headers import decode_header, encode_header
from tidemq.client.remoting.json_body import dumps, loads_fastjson

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_VERSION",
    "Body",
    "BodyDecodeError",
    "CommandFlag",
    "EncodeError",
    "FrameDecoder",
    "FrameError",
    "HeaderDecodeError",
    "LanguageCode",
    "RemotingCommand",
    "RemotingProtocolError",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "decode_header",
    "dumps",
    "encode_command",
    "encode_command_parts",
    "encode_header",
    "loads_fastjson",
]
