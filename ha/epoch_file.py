"""The epoch file (RocketMQ 5's EpochFileCache on its CheckpointFile): which epoch's master wrote
which part of the CommitLog.

Format, text, one item a line ending in "\\n"::

    2            the number of entries
    773307083    CRC-32 of the entry lines (each with its "\\n"), masked to 31 bits as
                 RocketMQ's UtilAll.crc32 does; 0 means "not checked"
    7-7000       epoch-startOffset: epoch 7's master wrote from CommitLog offset 7000 on
    8-8000

Entries are in increasing epoch and start offset; an entry ends where the next starts (the last
at the end of the log). Writing goes through `<file>.tmp`, keeps the previous file as
`<file>.bak` and renames (RocketMQ's MixAll.string2File); reading falls back to the `.bak` when
the file is missing, empty, or fails its count or checksum.
"""

from __future__ import annotations

import logging
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

from tidemq.common.files import make_dirs

log = logging.getLogger(__name__)


class EpochFileError(Exception):
    """Neither the epoch file nor its .bak copy could be read."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


def crc32_31(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


def encode(entries: list[EpochEntry]) -> str:
    lines = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries)
    return f"{len(entries)}\n{crc32_31(lines.encode())}\n{lines}"


def decode(text: str) -> list[EpochEntry]:
    """The entries of a file's text (EpochFileError when it is damaged)."""
    head = text.split("\n", 2)
    if len(head) < 2:
        raise EpochFileError("too short")
    try:
        count, crc = int(head[0]), int(head[1])
    except ValueError:
        raise EpochFileError("the count or checksum line is not a number") from None
    body = head[2] if len(head) > 2 else ""
    entries = []
    for line in body.splitlines():
        epoch, sep, start = line.partition("-")
        if not sep or not epoch.isdigit() or not start.isdigit():
            raise EpochFileError(f"entry {line!r} is not epoch-startOffset")
        entries.append(EpochEntry(int(epoch), int(start)))
    if len(entries) != count:
        raise EpochFileError(f"expected {count} entries, found {len(entries)}")
    if crc != 0 and crc != crc32_31(body.encode()):
        raise EpochFileError("entries checksum does not match")
    return entries


class EpochFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[EpochEntry] = []

    @property
    def backup(self) -> Path:
        return self.path.with_name(self.path.name + ".bak")

    def load(self) -> None:
        failures = []
        for path in (self.path, self.backup):
            try:
                entries = decode(path.read_text(encoding="utf-8"))
            except FileNotFoundError:
                continue
            except (OSError, UnicodeDecodeError, EpochFileError) as exc:
                failures.append(f"{path}: {exc}")
                continue
            if entries:
                if failures:
                    log.warning("epoch file damaged (%s): read its copy %s", failures[0], path)
                self.entries = entries
                return
        if failures:
            raise EpochFileError("; ".join(failures))
        self.entries = []

    @property
    def last(self) -> EpochEntry | None:
        return self.entries[-1] if self.entries else None

    @property
    def last_epoch(self) -> int:
        last = self.last
        return 0 if last is None else last.epoch

    def append(self, epoch: int, start_offset: int) -> bool:
        """Record that epoch `epoch` starts at `start_offset`; False (nothing written) when the
        file knows it already. An epoch lower than the last, or a start before the last
        start, is an error: epochs and offsets only grow."""
        last = self.last
        if last is not None:
            if epoch == last.epoch:
                return False
            if epoch < last.epoch or start_offset < last.start_offset:
                raise ValueError(
                    f"epoch {epoch} at {start_offset} does not follow "
                    f"epoch {last.epoch} at {last.start_offset}"
                )
        self.entries.append(EpochEntry(epoch, start_offset))
        self._write()
        return True

    def truncate_after(self, offset: int) -> None:
        """The log was cut at `offset`: epochs starting beyond it are forgotten."""
        kept = [e for e in self.entries if e.start_offset <= offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def _write(self) -> None:
        make_dirs(self.path.parent)
        temporary = self.path.with_name(self.path.name + ".tmp")
        with temporary.open("w", encoding="utf-8") as out:
            out.write(encode(self.entries))
            out.flush()
            os.fsync(out.fileno())
        if self.path.exists():
            os.replace(self.path, self.backup)
        os.replace(temporary, self.path)
