"""The work floor of a Python broker: a minimal uvloop + msgpack server and its load generator.

The broker bench measures tidemq beside this pair in the same run (issue 15's baseline). Both
sides do what a send must do and nothing more, the way a 100-line server would:

- frames as the remoting protocol lays them out: int32 length, int32 header length, a msgpack
  header (a map: code, opaque, flag, extFields), the body;
- per message the server reads the header's topic, queue, timestamp and properties, builds a
  record with RocketMQ's 20 fields (a struct pack) and the body's CRC-32, appends it to a log
  file through a buffered writer, and answers with a msgpack header carrying msgId, queueId and
  queueOffset;
- a batch frame's body is 32 messages, each an int32 length and the body: 32 records, one
  answer;
- the client builds the same header fields tidemq's producer sends (SEND_MESSAGE_V2's one-letter
  keys, a UNIQ_KEY per message), packs it, keeps `in_flight` requests outstanding and matches
  answers by opaque.

`python -m tests.bench.baseline PORT LOG` serves on 127.0.0.1:PORT until killed, after printing
"ready".
"""

from __future__ import annotations

import asyncio
import os
import struct
import sys
import time
from typing import Any

import msgpack  # type: ignore[import-untyped]
from isal import isal_zlib

from tidemq.client.message import UniqueIdGenerator

_FRAME = struct.Struct(">ii")
_LEN = struct.Struct(">i")
# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP BORNHOST
# STORETIMESTAMP STOREHOST RECONSUMETIMES PREPAREDOFFSET BODYLENGTH (body) TOPICLENGTH (topic)
# PROPERTIESLENGTH (properties): RocketMQ's 20 fields.
_RECORD_HEAD = struct.Struct(">iiiiiqqiq8sq8siqi")
_HOST = b"\x7f\x00\x00\x01\x00\x00\x27\x10"
SEND = 310
SEND_BATCH = 320


class _ServerProtocol(asyncio.Protocol):
    def __init__(self, log: Any, offsets: dict[tuple[str, int], int]) -> None:
        self.log = log
        self.offsets = offsets
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.position = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        pos, end, out = 0, len(buffer), []
        while end - pos >= 8:
            length, header_length = _FRAME.unpack_from(buffer, pos)
            if end - pos - 4 < length:
                break
            header_end = pos + 8 + header_length
            header = msgpack.unpackb(buffer[pos + 8 : header_end])
            body = buffer[header_end : pos + 4 + length]
            out.append(self.store(header, body))
            pos += 4 + length
        self.buffer = buffer[pos:]
        if out and self.transport is not None:
            self.transport.writelines(out)

    def store(self, header: dict[str, Any], body: bytes) -> bytes:
        ext = header["extFields"]
        topic, queue_id = ext["b"], int(ext["e"])
        born, props = int(ext["g"]), ext.get("i", "").encode()
        if header["code"] == SEND_BATCH:
            bodies, at = [], 0
            while at < len(body):
                (size,) = _LEN.unpack_from(body, at)
                bodies.append(body[at + 4 : at + 4 + size])
                at += 4 + size
        else:
            bodies = [body]
        key = (topic, queue_id)
        first = offset = self.offsets.get(key, 0)
        topic_bytes = topic.encode()
        tail = bytes((len(topic_bytes),)) + topic_bytes + struct.pack(">h", len(props)) + props
        first_position = self.position
        now = int(time.time() * 1000)
        for item in bodies:
            total = _RECORD_HEAD.size + len(item) + len(tail)
            head = _RECORD_HEAD.pack(
                total,
                -626843481,
                isal_zlib.crc32(item) & 0x7FFFFFFF,
                queue_id,
                0,
                offset,
                self.position,
                0,
                born,
                _HOST,
                now,
                _HOST,
                0,
                0,
                len(item),
            )
            self.log.write(head)
            self.log.write(item)
            self.log.write(tail)
            self.position += total
            offset += 1
        self.offsets[key] = offset
        answer = msgpack.packb(
            {
                "code": 0,
                "opaque": header["opaque"],
                "flag": 1,
                "extFields": {
                    "msgId": f"7F00000100002710{first_position:016X}",
                    "queueId": str(queue_id),
                    "queueOffset": str(first),
                },
            }
        )
        return _FRAME.pack(4 + len(answer), len(answer)) + answer


async def serve(port: int, log: Any) -> None:
    loop = asyncio.get_running_loop()
    offsets: dict[tuple[str, int], int] = {}
    server = await loop.create_server(
        lambda: _ServerProtocol(log, offsets), "127.0.0.1", port, reuse_address=True
    )
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


class _ClientProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.buffer = b""
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        pos, end = 0, len(buffer)
        while end - pos >= 8:
            length, header_length = _FRAME.unpack_from(buffer, pos)
            if end - pos - 4 < length:
                break
            header = msgpack.unpackb(buffer[pos + 8 : pos + 8 + header_length])
            future = self.waiting.pop(header["opaque"], None)
            if future is not None:
                future.set_result(header)
            pos += 4 + length
        self.buffer = buffer[pos:]


async def load(port: int, messages: int, in_flight: int, batch: int, body: bytes) -> float:
    """Messages per second of `messages` sends (`batch` per request when > 1) from one client."""
    loop = asyncio.get_running_loop()
    _transport, protocol = await loop.create_connection(_ClientProtocol, "127.0.0.1", port)
    requests = messages // batch
    next_request = 0
    opaques = iter(range(1, 2**31))
    ids = UniqueIdGenerator(b"\x7f\x00\x00\x01")  # as the producer makes UNIQ_KEY
    payload = b"".join(_LEN.pack(len(body)) + body for _ in range(batch)) if batch > 1 else body

    async def worker() -> None:
        nonlocal next_request
        while next_request < requests:
            queue_id = next_request % 8
            next_request += 1
            opaque = next(opaques)
            props = f"UNIQ_KEY\x01{ids.next_id()}\x02WAIT\x01true\x02TAGS\x01bench\x02"
            header = msgpack.packb(
                {
                    "code": SEND_BATCH if batch > 1 else SEND,
                    "language": 12,
                    "version": 417,
                    "opaque": opaque,
                    "flag": 0,
                    "extFields": {
                        "a": "BenchPG",
                        "b": "BaselineTopic",
                        "c": "TBW102",
                        "d": "8",
                        "e": str(queue_id),
                        "f": "0",
                        "g": str(int(time.time() * 1000)),
                        "h": "0",
                        "i": props,
                        "k": "false",
                        "m": "true" if batch > 1 else "false",
                    },
                }
            )
            future: asyncio.Future[dict[str, Any]] = loop.create_future()
            protocol.waiting[opaque] = future
            assert protocol.transport is not None
            protocol.transport.writelines(
                (_FRAME.pack(4 + len(header) + len(payload), len(header)), header, payload)
            )
            answer = await future
            assert answer["code"] == 0, answer

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    elapsed = time.perf_counter() - started
    assert protocol.transport is not None
    protocol.transport.close()
    return requests * batch / elapsed


def main(argv: list[str]) -> None:
    import uvloop

    port, log_path = int(argv[0]), argv[1]
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    with open(log_path, "ab") as log:
        uvloop.run(serve(port, log))


if __name__ == "__main__":
    main(sys.argv[1:])
