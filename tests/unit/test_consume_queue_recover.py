"""ConsumeQueue.recover (store/consume_queue.py): structural checks of every unit, samples.

Queues here hold synthetic units (record k of the queue at physical offset 1000 + 100k, 90
bytes); the checker stands in for the CommitLog and knows where each queue offset's record is.
Files of 2000 units put file bounds at 2000 and 4000 and the 1024-unit samples in between.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidemq.store.consume_queue import SAMPLE_EVERY, SAMPLE_TAIL, ConsumeQueue

UNITS_PER_FILE = 2000
CQ_FILE = 20 * UNITS_PER_FILE
COUNT = 5000  # units in the queue: two full files and half a third
COMMITLOG_END = 10**9


def phy_of(queue_offset: int) -> int:
    return 1000 + 100 * queue_offset


class Checker:
    """The CommitLog's answer: does queue offset q's record sit at phy with that size?"""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, phy: int, size: int, queue_offset: int) -> bool:
        self.calls += 1
        return (phy, size) == (phy_of(queue_offset), 90)


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    queue = ConsumeQueue(tmp_path, "T", 0, CQ_FILE)
    queue.load()
    for q in range(COUNT):
        queue.put(phy_of(q), 90, q % 7, q)
    queue.close()
    yield tmp_path / "T" / "0"


def overwrite(folder: Path, queue_offset: int, data: bytes) -> None:
    """Write raw unit bytes at `queue_offset` (within one file)."""
    path = folder / f"{queue_offset // UNITS_PER_FILE * CQ_FILE:020d}"
    raw = bytearray(path.read_bytes())
    at = queue_offset % UNITS_PER_FILE * 20
    raw[at : at + len(data)] = data
    path.write_bytes(bytes(raw))


def unit(phy: int, size: int = 90, tags: int = 0) -> bytes:
    return struct.pack(">qiq", phy, size, tags)


def recovered(folder: Path, checker: Checker | None = None) -> tuple[bool, int, int]:
    """(clean, max offset, end of the last unit's record) after recover on a fresh load."""
    queue = ConsumeQueue(folder.parent.parent, "T", 0, CQ_FILE)
    queue.load()
    try:
        clean = queue.recover(checker or Checker(), COMMITLOG_END)
        return clean, queue.max_offset, queue.max_physical_offset
    finally:
        queue.close()


def test_a_sound_queue_is_kept_and_only_samples_are_cross_checked(folder: Path) -> None:
    checker = Checker()
    assert recovered(folder, checker) == (True, COUNT, phy_of(COUNT - 1) + 90)
    # Every 1024th unit, each file's first and last, and the last 256: not all 5000.
    assert checker.calls <= COUNT // SAMPLE_EVERY + 1 + 2 * 3 + SAMPLE_TAIL


def test_garbage_in_the_middle_of_a_file_is_found_by_the_structure(folder: Path) -> None:
    overwrite(folder, 2600, random.Random(7).randbytes(20 * 30))
    assert recovered(folder) == (False, 2600, phy_of(2599) + 90)


def test_structurally_valid_garbage_is_found_by_the_samples(folder: Path) -> None:
    # Units 1000..1099 point one byte off their records: offsets still grow between the
    # neighbours', sizes are plausible, so only the CommitLog tells. Sample 1024 fails and the
    # units after the previous passing sample are checked one by one.
    overwrite(folder, 1000, b"".join(unit(phy_of(q) + 1) for q in range(1000, 1100)))
    assert recovered(folder) == (False, 1000, phy_of(999) + 90)


def test_a_repeated_unit_is_found_by_the_structure(folder: Path) -> None:
    overwrite(folder, 1500, unit(phy_of(1499)))  # offsets stop growing
    assert recovered(folder) == (False, 1500, phy_of(1499) + 90)


def test_units_shifted_by_a_lost_unit_are_found_by_the_next_sample(folder: Path) -> None:
    # From queue offset 1500 on, each unit holds the next record (as if unit 1500 were lost):
    # structurally sound, but every queue offset from 1500 is wrong. The file's last unit
    # (1999) is a failing sample; the scan from sample 1024 finds 1500.
    shifted = b"".join(unit(phy_of(q + 1)) for q in range(1500, UNITS_PER_FILE))
    overwrite(folder, 1500, shifted)
    assert recovered(folder) == (False, 1500, phy_of(1499) + 90)


def test_a_wrong_unit_in_the_tail_is_found(folder: Path) -> None:
    overwrite(folder, COUNT - 100, unit(phy_of(COUNT - 100) + 1))
    assert recovered(folder) == (False, COUNT - 100, phy_of(COUNT - 101) + 90)


def test_a_single_structurally_valid_wrong_unit_between_samples_is_not_found(
    folder: Path,
) -> None:
    """The accepted trade-off of sampling (see ConsumeQueue.recover): kept as it is."""
    overwrite(folder, 1500, unit(phy_of(1500) + 1))
    assert recovered(folder) == (True, COUNT, phy_of(COUNT - 1) + 90)


def test_units_past_the_commitlog_end_are_cut(folder: Path) -> None:
    queue = ConsumeQueue(folder.parent.parent, "T", 0, CQ_FILE)
    queue.load()
    try:
        assert not queue.recover(Checker(), phy_of(3000))
        assert (queue.max_offset, queue.max_physical_offset) == (3000, phy_of(2999) + 90)
    finally:
        queue.close()


def test_padding_units_are_skipped(tmp_path: Path) -> None:
    queue = ConsumeQueue(tmp_path, "T", 0, CQ_FILE)
    queue.load()
    queue.put(phy_of(2500), 90, 0, 2500)  # units 2000..2499 of the file are padding
    for q in range(2501, 2600):
        queue.put(phy_of(q), 90, 0, q)
    queue.close()
    queue = ConsumeQueue(tmp_path, "T", 0, CQ_FILE)
    queue.load()
    try:
        assert queue.recover(Checker(), COMMITLOG_END)
        assert (queue.min_offset, queue.max_offset) == (2500, 2600)
    finally:
        queue.close()
