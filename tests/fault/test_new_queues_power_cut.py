"""A power cut right after a flush pass over many new ConsumeQueue files, on a lossy FUSE disk
(tests/support/lazyfs.py): every file and its first unit are there after the cut.

The pass has more files to sync than `SYNCFS_AT_SEGMENTS`, so on ext4 it would be one syncfs
(store/fs_sync.py). On FUSE the kernel's syncfs asks the daemon to sync nothing: the store must
see that the file system is not one whose syncfs is durable and sync each file itself. With FUSE
taken as such a file system, this test fails (every file is lost with its folder). What it cannot
see: ext4's own behaviour under a real power cut (tests/unit/test_fs_sync.py checks the calls).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.fault.powercut import power_cut
from tests.support.lazy_mounts import NEEDS_FUSE, LazyMount, can_mount
from tests.support.processes import REPO_ROOT
from tidemq.store.fs_sync import SYNCFS_AT_SEGMENTS

pytestmark = pytest.mark.skipif(not can_mount(), reason=NEEDS_FUSE)

QUEUES = 2 * SYNCFS_AT_SEGMENTS
UNIT = 20


def test_new_queue_files_synced_in_one_pass_survive_a_power_cut(tmp_path: Path) -> None:
    mount = LazyMount(tmp_path, "disk").start()
    writer = None
    try:
        writer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.fault.new_queues_writer",
                str(mount.path / "store"),
                str(QUEUES),
            ],
            stdout=subprocess.PIPE,
            cwd=REPO_ROOT,
        )
        assert writer.stdout is not None
        line = writer.stdout.readline().decode()
        assert line.startswith("FLUSHED "), line
        assert line.split()[1] == "0"  # FUSE: no syncfs, each file synced
        summary = power_cut(mount, "all", 0)
        assert summary["pages_lost"] or summary["files"], summary  # the cut dropped something
    finally:
        if writer is not None:
            writer.kill()
            writer.wait()
            if writer.stdout is not None:
                writer.stdout.close()
        mount.stop()
    queues = mount.backing / "store" / "consumequeue"
    for queue in range(QUEUES):
        files = sorted((queues / f"New{queue}" / "0").glob("0*"))
        assert len(files) == 1, (queue, files)
        unit = files[0].read_bytes()[:UNIT]
        assert int.from_bytes(unit[8:12], "big") > 0, (queue, unit)  # its message's size
