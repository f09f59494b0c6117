"""Types of the compiled twins in store/_fast_scan.pyx (mypy cannot read Cython)."""

from collections.abc import Mapping

from typing_extensions import Buffer

from tidemq.store.fast_scan import QueueRun
from tidemq.store.record import DispatchInfo

def scan_fast(
    mm: Buffer, pos: int, end: int
) -> tuple[int, int, int, int, int, int, bytes] | None: ...
def find_value(mm: Buffer, needle: bytes, start: int, end: int) -> bytes | None: ...
def gather_entries(
    mm: Buffer, pos: int, end: int, keys: KeyGatherer, entries: list[tuple[int, int, int]]
) -> tuple[int, bool]: ...

class KeyGatherer:
    def __init__(self) -> None: ...
    def prefix(self, topic_raw: bytes) -> int: ...
    def gather(
        self,
        mm: Buffer,
        entries: list[tuple[int, int, int]],
        topic_raw: bytes,
        phy: int,
        store_ts: int,
        props: int,
        rec_end: int,
    ) -> None: ...
    def gather_info(self, info: DispatchInfo, entries: list[tuple[int, int, int]]) -> None: ...

def extend_runs(
    mm: Buffer,
    pos: int,
    end: int,
    stop: int,
    runs: Mapping[tuple[bytes, int], QueueRun],
    keys: KeyGatherer | None,
    entries: list[tuple[int, int, int]],
    index_from: int,
    skip_topics: tuple[bytes, bytes],
) -> tuple[int, int]: ...
