"""A transport that records what a `RemotingConnection` writes, with no socket."""

from __future__ import annotations

from typing import Any


class FakeTransport:
    """Records each write call; enough of a transport for RemotingConnection."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else None

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def writelines(self, parts: list[bytes]) -> None:
        self.writes.append(b"".join(bytes(p) for p in parts))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass
