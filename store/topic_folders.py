"""The ConsumeQueue root marked as holding one directory hierarchy per topic (`chattr +T`).

ext2/3/4 place a new directory by the Orlov allocator: a directory whose parent is the file
system's root, or carries the TOPDIR flag (FS_TOPDIR_FL, `chattr +T`), is put in a block group
of its own with room to grow; any other new directory, and every new file, goes to its parent's
group, where the allocator takes the first free inode from the start of the group's bitmap.
Without a journal, ext4 skips each free inode deleted in the last 5-10 seconds there
(`recently_deleted`: a buffer lookup per inode skipped), so in a group where other programs
create and delete many files (a temporary folder, test runs), every inode a new queue needs
(its topic's folder, its own folder, its file) paid for a walk over hundreds of them: 0.8-0.9 ms
of kernel CPU per new queue measured on this machine's /tmp under a parallel test run, against
0.05-0.16 ms with the root marked (same moment, alternated; 2,000 queues each). Marked, each
topic's folder starts a hierarchy in its own group, and its queues' folders and files follow it.

Nothing else changes: the layout, the names, what is synced and when. A file system without
the flag (xfs, tmpfs, FUSE: ENOTTY, EOPNOTSUPP, EINVAL) or a store not ours to change (EPERM,
EACCES) keeps the default placement; the hint is set once at load, where missing.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

# <linux/fs.h>: FS_IOC_GETFLAGS / FS_IOC_SETFLAGS (_IOR/_IOW('f', 1/2, long)); the kernel
# reads and writes an int through the pointer.
FS_IOC_GETFLAGS: Final = 0x80086601
FS_IOC_SETFLAGS: Final = 0x40086602
FS_TOPDIR_FL: Final = 0x00020000
_FLAGS = struct.Struct("=i")
_UNSUPPORTED: Final = frozenset(
    {errno.ENOTTY, errno.EOPNOTSUPP, errno.EINVAL, errno.EPERM, errno.EACCES, errno.EROFS}
)


def folder_flags(folder: Path) -> int | None:
    """The inode flags of `folder` (`lsattr -d`), None where the file system has none."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        buffer = bytearray(_FLAGS.size)
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, buffer)
        return int(_FLAGS.unpack(buffer)[0])
    except OSError as exc:
        if exc.errno in _UNSUPPORTED:
            return None
        raise
    finally:
        os.close(fd)


def mark_topic_root(folder: Path) -> bool:
    """Set the TOPDIR flag on `folder` unless set; True when it is set now. Never raises for
    a file system or permission that refuses it (module docstring)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        log.debug("%s: not marked as a root of topic folders: %s", folder, exc)
        return False
    try:
        buffer = bytearray(_FLAGS.size)
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, buffer)
        flags = _FLAGS.unpack(buffer)[0]
        if not flags & FS_TOPDIR_FL:
            fcntl.ioctl(fd, FS_IOC_SETFLAGS, _FLAGS.pack(flags | FS_TOPDIR_FL))
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            log.warning("%s: not marked as a root of topic folders: %s", folder, exc)
        return False
    finally:
        os.close(fd)
    return True
