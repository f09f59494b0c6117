"""The ConsumeQueue root carries the TOPDIR flag (store/topic_folders.py): set at load where
the file system has it, a no-op where it has not, never a reason to refuse a start."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
from pathlib import Path

import pytest

from tests.support.stores import StoreFactory
from tidemq.store import topic_folders
from tidemq.store.topic_folders import FS_TOPDIR_FL, folder_flags, mark_topic_root

STORES = StoreFactory()


async def test_a_store_load_marks_its_consume_queue_root(tmp_path: Path) -> None:
    if folder_flags(tmp_path) is None:
        pytest.skip("the temporary folder's file system has no inode flags")
    store = STORES.open(tmp_path)
    await store.stop()
    root = tmp_path / "consumequeue"
    flags = folder_flags(root)
    assert flags is not None and flags & FS_TOPDIR_FL
    # A store made before (its root without the flag) gets it at its next load.
    clear_flag(root)
    assert not (folder_flags(root) or 0) & FS_TOPDIR_FL
    store = STORES.open(tmp_path)
    await store.stop()
    assert (folder_flags(root) or 0) & FS_TOPDIR_FL


def clear_flag(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = folder_flags(folder) or 0
        fcntl.ioctl(fd, topic_folders.FS_IOC_SETFLAGS, struct.pack("=i", flags & ~FS_TOPDIR_FL))
    finally:
        os.close(fd)


@pytest.mark.parametrize("code", [errno.ENOTTY, errno.EOPNOTSUPP, errno.EPERM, errno.EIO])
async def test_a_file_system_that_refuses_the_flag_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    def refusing(fd: int, request: int, arg: object = 0) -> object:
        raise OSError(code, "refused")

    monkeypatch.setattr(topic_folders.fcntl, "ioctl", refusing)
    with caplog.at_level(logging.WARNING, logger=topic_folders.__name__):
        store = STORES.open(tmp_path)
        await store.stop()
    assert (tmp_path / "consumequeue").is_dir()
    assert mark_topic_root(tmp_path / "consumequeue") is False
    # Only an error that is not "unsupported" is worth a line (a disk failing, say).
    assert bool(caplog.records) == (code == errno.EIO)
