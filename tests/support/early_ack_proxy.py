"""A relay for the HA stream between a master and its slave that can make the slave look as if
it acknowledged before storing (issue 32: "a slave that acknowledged before storing would pass").

    proxy = EarlyAckProxy(master_ha_host, master_ha_port, early=True, hold=2.0)
    await proxy.start()        # listens on 127.0.0.1:proxy.port; the slave's haMasterAddress
    ...
    await proxy.close()

It speaks RocketMQ 4.x's HA stream (ha/codec.py: the slave sends 8-byte offsets, the master
frames of a 12-byte header, offset int64 and size int32, and `size` CommitLog bytes). With
`early=False` it relays both ways unchanged: the real slave's acknowledgements, sent after it
appended. With `early=True` it is a broken slave's network stack: for every frame of data from
the master it answers the master at once with an acknowledgement of the frame's end, and hands
the frames to the slave only `hold` seconds later, in order (heartbeats too, so the slave sees
the stream it expects). The slave's own reports are passed on raised to what the proxy already
acknowledged (the master closes a connection whose acknowledgement goes back).
A SYNC_MASTER then answers SEND_OK for messages its slave has not stored; `acked_early` counts
the acknowledgements the proxy made up.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Final

from tests.support.processes import LOOPBACK

HEADER: Final = struct.Struct(">qi")  # a frame's offset and size
ACK: Final = struct.Struct(">q")


class EarlyAckProxy:
    def __init__(self, host: str, port: int, *, early: bool, hold: float = 2.0) -> None:
        self.target = (host, port)
        self.early = early
        self.hold = hold
        self.port = 0
        self.acked_early = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, LOOPBACK, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, slave_r: asyncio.StreamReader, slave_w: asyncio.StreamWriter) -> None:
        try:
            master_r, master_w = await asyncio.open_connection(*self.target)
        except OSError:
            slave_w.close()
            return
        self._writers += [slave_w, master_w]
        acked = [-1]  # the highest offset the master was told, by either side
        self._spawn(self._upstream(slave_r, master_w, acked))
        self._spawn(self._downstream(master_r, slave_w, master_w, acked))

    async def _upstream(
        self, slave_r: asyncio.StreamReader, master_w: asyncio.StreamWriter, acked: list[int]
    ) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                data = await slave_r.readexactly(ACK.size)
                (offset,) = ACK.unpack(data)
                # The first report (where to start) goes as it is; later ones never go back
                # below what the proxy acknowledged, but still go (the master's housekeeping
                # closes a connection it hears nothing from).
                acked[0] = offset if acked[0] < 0 else max(acked[0], offset)
                master_w.write(ACK.pack(acked[0]))
                await master_w.drain()
        master_w.close()

    async def _downstream(
        self,
        master_r: asyncio.StreamReader,
        slave_w: asyncio.StreamWriter,
        master_w: asyncio.StreamWriter,
        acked: list[int],
    ) -> None:
        held: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        self._spawn(self._deliver(held, slave_w))
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                header = await master_r.readexactly(HEADER.size)
                offset, size = HEADER.unpack(header)
                body = await master_r.readexactly(size) if size else b""
                if not self.early:
                    slave_w.write(header + body)
                    await slave_w.drain()
                    continue
                if size and offset + size > acked[0]:
                    # the lie: "stored", before the slave has even seen the bytes
                    acked[0] = offset + size
                    master_w.write(ACK.pack(acked[0]))
                    await master_w.drain()
                    self.acked_early += 1
                held.put_nowait((loop.time() + self.hold, header + body))
        held.put_nowait(None)

    async def _deliver(
        self, held: asyncio.Queue[tuple[float, bytes] | None], slave_w: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while (item := await held.get()) is not None:
                due, frame = item
                await asyncio.sleep(max(0.0, due - asyncio.get_running_loop().time()))
                slave_w.write(frame)
                await slave_w.drain()
        slave_w.close()
