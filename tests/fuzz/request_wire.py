"""One fuzzer connection to a daemon: a request out, its answer (or what happened instead) back.

`FuzzConnection.exchange(frame, opaque, timeout)` writes one frame and waits for the response
with that opaque. The outcome is an `Answer`: the response command, or `closed` (the daemon
closed the connection: right for a malformed frame, a finding for a well-formed one), or
`timeout`. Requests the daemon sends to us (a broker asks a "consumer" for its running info,
or tells it the group's ids changed) are refused at once with SYSTEM_ERROR.

Frames come from the client's own codec (`encode_command`); `typed_frame` is the one frame the
codec cannot write on purpose: a JSON or msgpack header whose extFields values are numbers,
booleans, nulls, lists or objects, which the servers' header readers turn into strings
(client/remoting/headers.py) - the "wrong type" values of a header.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from dataclasses import dataclass
from typing import Any, Final

import msgpack  # type: ignore[import-untyped]

from tidemq.client.remoting.codes import ResponseCode, SerializeType
from tidemq.client.remoting.command import RemotingCommand
from tidemq.client.remoting.errors import FrameError
from tidemq.client.remoting.frame import FrameDecoder, encode_command

__all__ = ["Answer", "FuzzConnection", "typed_frame"]

_PREFIX: Final = struct.Struct(">iI")
# Large enough for a pull of a whole queue's messages; a response above it is a finding.
_MAX_RESPONSE: Final = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Answer:
    """What became of one request: `response`, or `closed`/`timeout` (then response is None)."""

    response: RemotingCommand | None
    closed: bool = False
    timeout: bool = False
    seconds: float = 0.0

    @property
    def code(self) -> int | None:
        return None if self.response is None else self.response.code


def typed_frame(
    code: int, opaque: int, ext: dict[str, Any], body: bytes, serialize: SerializeType
) -> bytes:
    """A request frame whose extFields values keep their JSON/msgpack types."""
    header: dict[str, Any] = {
        "code": code,
        "language": "PYTHON" if serialize is SerializeType.JSON else 3,
        "version": 401,
        "opaque": opaque,
        "flag": 0,
        "extFields": ext,
    }
    if serialize is SerializeType.MSGPACK:
        raw: bytes = msgpack.packb(header, use_bin_type=True)
    else:
        raw = json.dumps(header, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return _PREFIX.pack(4 + len(raw) + len(body), (int(serialize) << 24) | len(raw)) + raw + body


class FuzzConnection:
    """A TCP connection to `host:port` that the fuzzer reopens after the daemon closed it."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._decoder = FrameDecoder(_MAX_RESPONSE)
        self._waiting: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._read_task: asyncio.Task[None] | None = None
        self.requests_from_daemon = 0

    async def _connected(self) -> None:
        if self._writer is not None and not self._writer.is_closing():
            return
        await self.close()
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self._decoder = FrameDecoder(_MAX_RESPONSE)
        self._read_task = asyncio.create_task(self._read_loop(self._reader))

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while chunk := await reader.read(1 << 16):
                for command in self._decoder.feed(chunk):
                    if not command.is_response:
                        self._refuse(command)
                        continue
                    waiter = self._waiting.pop(command.opaque, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(command)
        except (OSError, FrameError):
            pass
        finally:
            for waiter in self._waiting.values():
                if not waiter.done():
                    waiter.set_exception(ConnectionResetError("closed by the daemon"))
            self._waiting.clear()
            if self._writer is not None:
                self._writer.close()

    def _refuse(self, request: RemotingCommand) -> None:
        """Answer a daemon's request (running info, offset reset, ...) with SYSTEM_ERROR at
        once: a broker waits 5 s for a silent client, which would idle the run."""
        self.requests_from_daemon += 1
        if request.is_oneway or self._writer is None or self._writer.is_closing():
            return
        refusal = RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, "fuzzer")
        self._writer.write(encode_command(refusal))

    async def exchange(self, frame: bytes, opaque: int, timeout: float) -> Answer:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await self._connected()
        except OSError:
            return Answer(None, closed=True)
        assert self._writer is not None
        waiter: asyncio.Future[RemotingCommand] = loop.create_future()
        self._waiting[opaque] = waiter
        try:
            self._writer.write(frame)
            await self._writer.drain()
            response = await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            self._waiting.pop(opaque, None)
            return Answer(None, timeout=True, seconds=loop.time() - started)
        except (OSError, ConnectionResetError):
            return Answer(None, closed=True, seconds=loop.time() - started)
        return Answer(response, seconds=loop.time() - started)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        if self._read_task is not None:
            self._read_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._read_task
        self._reader = self._writer = self._read_task = None
