"""The epoch file (ha/epoch_file.py) in RocketMQ 5's CheckpointFile format: count, CRC-32 of the
entry lines (31 bits), `epoch-startOffset` lines; a damaged file falls back to its .bak copy."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from tidemq.ha.epoch_file import EpochEntry, EpochFile, EpochFileError, decode, encode


def test_the_bytes_are_rocketmq_5s() -> None:
    lines = "7-7000\n8-8000\n"
    crc = zlib.crc32(lines.encode()) & 0x7FFFFFFF
    text = encode([EpochEntry(7, 7000), EpochEntry(8, 8000)])
    assert text == f"2\n{crc}\n{lines}"
    assert decode(text) == [EpochEntry(7, 7000), EpochEntry(8, 8000)]
    assert decode("1\n0\n3-5\n") == [EpochEntry(3, 5)]  # a checksum of 0 is not checked


@pytest.mark.parametrize(
    "text",
    ["", "2\n", "x\n1\n", "2\n0\n1-0\n", "1\n12345\n1-0\n", "1\n0\n1:0\n"],
)
def test_damaged_texts_are_refused(text: str) -> None:
    with pytest.raises(EpochFileError):
        decode(text)


def test_append_keeps_a_backup_and_a_damaged_file_reads_the_backup(tmp_path: Path) -> None:
    path = tmp_path / "epochFileCheckpoint"
    epochs = EpochFile(path)
    epochs.load()
    assert epochs.entries == [] and epochs.last_epoch == 0
    assert epochs.append(1, 0)
    assert epochs.append(2, 4096)
    assert not epochs.append(2, 4096)  # known already: nothing written
    assert decode(epochs.backup.read_text()) == [EpochEntry(1, 0)]
    path.write_text("2\n999\n1-0\n2-4096\n")  # checksum damaged
    again = EpochFile(path)
    again.load()
    assert again.entries == [EpochEntry(1, 0)]
    with pytest.raises(ValueError, match="does not follow"):
        epochs.append(1, 8192)
    epochs.truncate_after(100)
    assert epochs.entries == [EpochEntry(1, 0)]


def test_both_damaged_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "epochs"
    path.write_text("garbage")
    (tmp_path / "epochs.bak").write_text("more garbage")
    with pytest.raises(EpochFileError):
        EpochFile(path).load()
