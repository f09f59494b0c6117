"""A lossy file system for power-cut tests (the idea of Jepsen's LazyFS), on FUSE.

    python -m tests.support.lazyfs BACKING MOUNTPOINT --control SOCKET

mounts MOUNTPOINT as a pass-through of the folder BACKING: every operation is done on BACKING at
once, so reads, mmap and every tool see a normal file system. Beside it the daemon keeps what a
power cut would lose (tests/support/lazyfs_volatile.py), and a "power cut" puts BACKING back to
what was durable:

- File data. The first write (or truncate) after a file's last fsync/fdatasync records the file's
  durable size and, for each 4 KiB page it changes, the page as it was (an undo log). fsync or
  fdatasync of the file (msync reaches us as one: the kernel writes the map's dirty pages back
  with WRITE requests, then sends FSYNC) empties it. Files opened O_SYNC/O_DSYNC are synced after
  each write.
- Names. The rule is POSIX's: a create, link, unlink or rename in a directory is durable only
  after an fsync of that directory. It is the weakest promise a file system makes, so a store
  that keeps it is safe on all of them (ext4 and XFS usually commit a new name with the next
  fsync of the file, which would hide a missing directory fsync). The first change to a
  directory after its last fsync records its entries (name -> inode); fsyncdir drops the
  record. A name removed meanwhile keeps its inode alive through a hard link in
  BACKING/.lazyfs-attic (hidden from the mount), so a cut can put it back. mkdir is such a
  change too; rmdir and the rename of a directory are taken as durable at once (they are rare
  in the store, and an empty directory has nothing to lose).

A cut, asked for on the control socket, aborts the FUSE connection first
(/sys/fs/fuse/connections/N/abort): the kernel drops its page cache of the mount, so dirty pages
of a shared map that no fsync wrote back never reach BACKING, as after a real power cut. Then it
applies the undo logs and directory records to BACKING, answers with a summary, lazily unmounts
and exits; a restart is a fresh mount of the same BACKING. Cut modes:

- `all`: every unsynced byte is lost (each file back to its durable size and pages, each
  directory back to its recorded entries);
- `torn SEED`: directories as in `all`, but of each file's unsynced pages a seeded random half
  or so is kept with its new bytes (torn writes), and a grown file may keep a size in between:
  a page-aligned one up to the end of the writes that grew it, or a size a truncate set it to
  (a file sized by one ftruncate is never left at a page in between; lazyfs_volatile.py).

Control protocol (one request line, one answer line, then the connection closes):
`stats` -> JSON {"files", "pages", "dirs"} (what a cut would touch now); `cut all` or
`cut torn SEED` -> JSON {"files", "pages_lost", "pages_kept", "dirs"} and the daemon exits;
`sync` -> everything now volatile is made durable (as a clean unmount would): "ok".
The daemon prints `mounted` on stdout once it serves requests.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyfuse3
import trio

from tests.support.lazyfs_volatile import ATTIC, Volatile

# Attributes and names may be cached by the kernel: every change goes through this daemon, and a
# cut ends the mount (the next one starts with an empty cache).
CACHE_SECONDS: Final = 10.0


@dataclass
class Handle:
    fd: int
    ino: int
    synced_writes: bool


class LazyOperations(pyfuse3.Operations):
    """The pass-through: FUSE inode numbers are the backing folder's (its root's is ROOT_INODE)."""

    supports_dot_lookup = False
    enable_writeback_cache = False

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.root_ino = os.lstat(root).st_ino
        self.volatile = Volatile(root)
        self.paths: dict[int, set[Path]] = {self.root_ino: {root}}
        self.handles: dict[int, Handle] = {}
        self.dir_handles: dict[int, int] = {}
        self._next_fh = 1
        self.cut_started = False

    # --- inodes and paths ---------------------------------------------------------------

    def _backing(self, inode: int) -> int:
        return self.root_ino if inode == pyfuse3.ROOT_INODE else inode

    def _fuse(self, ino: int) -> int:
        return pyfuse3.ROOT_INODE if ino == self.root_ino else ino

    def _path(self, inode: int) -> Path:
        found = self.paths.get(self._backing(inode))
        if not found:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return next(iter(found))

    def _child(self, parent: int, name: bytes) -> Path:
        decoded = os.fsdecode(name)
        if self._backing(parent) == self.root_ino and decoded == ATTIC:
            raise pyfuse3.FUSEError(errno.EACCES)
        return self._path(parent) / decoded

    def _attrs(self, path: Path) -> pyfuse3.EntryAttributes:
        try:
            st = os.lstat(path)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        self.paths.setdefault(st.st_ino, set()).add(path)
        attrs = pyfuse3.EntryAttributes()
        for name in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_size"):
            setattr(attrs, name, getattr(st, name))
        attrs.st_ino = self._fuse(st.st_ino)
        attrs.st_blksize = st.st_blksize
        attrs.st_blocks = st.st_blocks
        attrs.st_atime_ns = st.st_atime_ns
        attrs.st_mtime_ns = st.st_mtime_ns
        attrs.st_ctime_ns = st.st_ctime_ns
        attrs.generation = 0
        attrs.entry_timeout = CACHE_SECONDS
        attrs.attr_timeout = CACHE_SECONDS
        return attrs

    def _forget_path(self, path: Path, ino: int) -> None:
        known = self.paths.get(ino)
        if known is not None:
            known.discard(path)

    def _dir_change(self, parent: int) -> None:
        self.volatile.before_dir_change(self._backing(parent), self._path(parent))

    def _guard(self) -> None:
        if self.cut_started:
            raise pyfuse3.FUSEError(errno.EIO)

    # --- lookups and attributes ---------------------------------------------------------

    async def lookup(
        self, parent_inode: pyfuse3.InodeT, name: pyfuse3.FileNameT, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        if name in (b".", b".."):
            raise pyfuse3.FUSEError(errno.ENOENT)
        try:
            path = self._child(parent_inode, name)
        except pyfuse3.FUSEError as e:
            raise pyfuse3.FUSEError(errno.ENOENT) from e
        return self._attrs(path)

    async def forget(self, inode_list: Sequence[tuple[pyfuse3.InodeT, int]]) -> None:
        return None  # paths are kept: a test's tree is small

    async def getattr(
        self, inode: pyfuse3.InodeT, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        return self._attrs(self._path(inode))

    async def setattr(
        self,
        inode: pyfuse3.InodeT,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: pyfuse3.FileHandleT | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        self._guard()
        path = self._path(inode)
        try:
            if fields.update_size:
                fd = os.open(path, os.O_RDWR)
                try:
                    self.volatile.before_truncate(self._backing(inode), fd, attr.st_size)
                    os.ftruncate(fd, attr.st_size)
                finally:
                    os.close(fd)
            if fields.update_mode:
                os.chmod(path, stat.S_IMODE(attr.st_mode))
            if fields.update_uid or fields.update_gid:
                uid = attr.st_uid if fields.update_uid else -1
                gid = attr.st_gid if fields.update_gid else -1
                os.chown(path, uid, gid, follow_symlinks=False)
            if fields.update_atime or fields.update_mtime:
                st = os.lstat(path)
                atime = attr.st_atime_ns if fields.update_atime else st.st_atime_ns
                mtime = attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns
                os.utime(path, ns=(atime, mtime), follow_symlinks=False)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        return self._attrs(path)

    async def readlink(self, inode: pyfuse3.InodeT, ctx: pyfuse3.RequestContext) -> bytes:
        return os.fsencode(os.readlink(self._path(inode)))

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        st = os.statvfs(self.root)
        data = pyfuse3.StatvfsData()
        for name in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail"):
            setattr(data, name, getattr(st, name))
        for name in ("f_files", "f_ffree", "f_favail", "f_namemax"):
            setattr(data, name, getattr(st, name))
        return data

    # --- names --------------------------------------------------------------------------

    async def mkdir(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        mode: int,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        self._guard()
        path = self._child(parent_inode, name)
        self._dir_change(parent_inode)
        try:
            os.mkdir(path, stat.S_IMODE(mode))
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        return self._attrs(path)

    async def rmdir(
        self, parent_inode: pyfuse3.InodeT, name: pyfuse3.FileNameT, ctx: pyfuse3.RequestContext
    ) -> None:
        self._guard()
        path = self._child(parent_inode, name)
        try:
            ino = os.lstat(path).st_ino
            os.rmdir(path)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        self.volatile.dir_entry_durable(self._backing(parent_inode), path.name, None)
        self.volatile.synced_dir(ino)
        self._forget_path(path, ino)

    async def unlink(
        self, parent_inode: pyfuse3.InodeT, name: pyfuse3.FileNameT, ctx: pyfuse3.RequestContext
    ) -> None:
        self._guard()
        path = self._child(parent_inode, name)
        self._dir_change(parent_inode)
        try:
            ino = os.lstat(path).st_ino
            kept = self.volatile.keep(path, ino)
            os.unlink(path)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        self._forget_path(path, ino)
        self._kept_at(ino, kept)

    async def symlink(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        target: pyfuse3.FileNameT,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        self._guard()
        path = self._child(parent_inode, name)
        self._dir_change(parent_inode)
        try:
            os.symlink(os.fsdecode(target), path)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        return self._attrs(path)

    async def link(
        self,
        inode: pyfuse3.InodeT,
        new_parent_inode: pyfuse3.InodeT,
        new_name: pyfuse3.FileNameT,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        self._guard()
        path = self._child(new_parent_inode, new_name)
        self._dir_change(new_parent_inode)
        try:
            os.link(self._path(inode), path, follow_symlinks=False)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        return self._attrs(path)

    async def rename(
        self,
        parent_inode_old: pyfuse3.InodeT,
        name_old: pyfuse3.FileNameT,
        parent_inode_new: pyfuse3.InodeT,
        name_new: pyfuse3.FileNameT,
        flags: pyfuse3.FlagT,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        self._guard()
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise pyfuse3.FUSEError(errno.EINVAL)
        old = self._child(parent_inode_old, name_old)
        new = self._child(parent_inode_new, name_new)
        try:
            st = os.lstat(old)
            try:
                replaced: os.stat_result | None = os.lstat(new)
            except FileNotFoundError:
                replaced = None
            if replaced is not None and flags & pyfuse3.RENAME_NOREPLACE:
                raise pyfuse3.FUSEError(errno.EEXIST)
            if stat.S_ISDIR(st.st_mode):
                os.rename(old, new)
                self.volatile.dir_entry_durable(self._backing(parent_inode_old), old.name, None)
                self.volatile.dir_entry_durable(
                    self._backing(parent_inode_new), new.name, (st.st_ino, True)
                )
                self._moved_dir(old, new)
            else:
                self._dir_change(parent_inode_old)
                self._dir_change(parent_inode_new)
                self.volatile.keep(old, st.st_ino)
                kept = None
                if replaced is not None and not stat.S_ISDIR(replaced.st_mode):
                    kept = self.volatile.keep(new, replaced.st_ino)
                os.rename(old, new)
                if replaced is not None:
                    self._forget_path(new, replaced.st_ino)
                    if kept is not None:
                        self._kept_at(replaced.st_ino, kept)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        self._forget_path(old, st.st_ino)
        self.paths.setdefault(st.st_ino, set()).add(new)

    def _kept_at(self, ino: int, kept: Path) -> None:
        """An inode that lost a name stays openable, as on any file system, through the name
        the attic keeps it under (the kernel may open it from a dentry looked up just before)."""
        self.paths.setdefault(ino, set()).add(kept)

    def _moved_dir(self, old: Path, new: Path) -> None:
        for known in self.paths.values():
            for path in list(known):
                if path.is_relative_to(old):
                    known.discard(path)
                    known.add(new / path.relative_to(old))

    # --- files --------------------------------------------------------------------------

    def _open_fd(self, path: Path, flags: int, mode: int = 0o644) -> int:
        # Read-write whatever was asked (pages are read back before they change); O_APPEND off:
        # the kernel puts the end of the file in each write's offset, and pwrite on an O_APPEND
        # descriptor would ignore the offset.
        flags = (flags & ~(os.O_ACCMODE | os.O_APPEND | os.O_TRUNC)) | os.O_RDWR
        return os.open(path, flags, mode)

    def _new_handle(self, fd: int, ino: int, flags: int) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self.handles[fh] = Handle(fd, ino, bool(flags & (os.O_SYNC | os.O_DSYNC)))
        return fh

    async def open(
        self, inode: pyfuse3.InodeT, flags: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.FileInfo:
        self._guard()
        path = self._path(inode)
        try:
            fd = self._open_fd(path, flags)
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        ino = self._backing(inode)
        if flags & os.O_TRUNC:
            self.volatile.before_truncate(ino, fd, 0)
            os.ftruncate(fd, 0)
        return pyfuse3.FileInfo(fh=self._new_handle(fd, ino, flags))

    async def create(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        mode: int,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        self._guard()
        path = self._child(parent_inode, name)
        self._dir_change(parent_inode)
        try:
            fd = self._open_fd(path, flags | os.O_CREAT, stat.S_IMODE(mode))
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        ino = os.fstat(fd).st_ino
        self.volatile.files.pop(ino, None)  # a number reused: nothing of the old file applies
        self.paths[ino] = set()
        attrs = self._attrs(path)
        fh = self._new_handle(fd, ino, flags)
        return pyfuse3.FileInfo(fh=fh), attrs

    async def read(self, fh: pyfuse3.FileHandleT, off: int, size: int) -> bytes:
        return os.pread(self.handles[fh].fd, size, off)

    async def write(self, fh: pyfuse3.FileHandleT, off: int, buf: bytes) -> int:
        self._guard()
        handle = self.handles[fh]
        self.volatile.before_write(handle.ino, handle.fd, off, off + len(buf))
        written = os.pwrite(handle.fd, buf, off)
        if handle.synced_writes:
            self.volatile.synced_file(handle.ino)
        return written

    async def flush(self, fh: pyfuse3.FileHandleT) -> None:
        return None

    async def release(self, fh: pyfuse3.FileHandleT) -> None:
        handle = self.handles.pop(fh)
        os.close(handle.fd)

    async def fsync(self, fh: pyfuse3.FileHandleT, datasync: bool) -> None:
        self._guard()
        self.volatile.synced_file(self.handles[fh].ino)

    # --- directories --------------------------------------------------------------------

    async def opendir(
        self, inode: pyfuse3.InodeT, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.FileHandleT:
        self._path(inode)
        fh = self._next_fh
        self._next_fh += 1
        self.dir_handles[fh] = self._backing(inode)
        return fh

    async def readdir(
        self, fh: pyfuse3.FileHandleT, start_id: int, token: pyfuse3.ReaddirToken
    ) -> None:
        ino = self.dir_handles[fh]
        path = self._path(self._fuse(ino))
        names = sorted(n for n in os.listdir(path) if not (ino == self.root_ino and n == ATTIC))
        for index in range(start_id, len(names)):
            try:
                attrs = self._attrs(path / names[index])
            except pyfuse3.FUSEError:
                continue
            if not pyfuse3.readdir_reply(token, os.fsencode(names[index]), attrs, index + 1):
                break

    async def releasedir(self, fh: pyfuse3.FileHandleT) -> None:
        self.dir_handles.pop(fh, None)

    async def fsyncdir(self, fh: pyfuse3.FileHandleT, datasync: bool) -> None:
        self._guard()
        self.volatile.synced_dir(self.dir_handles[fh])
        while self.volatile.gone:
            self.paths.pop(self.volatile.gone.pop(), None)
        if not self.volatile.dirs:  # the attic was emptied: its names are gone
            attic = self.volatile.attic
            for known in self.paths.values():
                for path in [p for p in known if p.parent == attic]:
                    known.discard(path)


# --- the daemon ---------------------------------------------------------------------------


def connection_number(mountpoint: Path) -> int | None:
    """The FUSE connection of the mount at `mountpoint` (its device's minor number).

    Read from /proc/self/mountinfo: a stat of the mount point would wait for this daemon.
    """
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(mountpoint):
            return int(fields[2].split(":")[1])
    return None


def abort_connection(mountpoint: Path) -> None:
    """Abort the FUSE connection: the kernel fails every request and drops the mount's pages."""
    number = connection_number(mountpoint)
    connections = Path("/sys/fs/fuse/connections")
    if number is None:
        raise RuntimeError(f"{mountpoint} is not mounted")
    if not (connections / str(number)).exists():
        subprocess.run(
            ["mount", "-t", "fusectl", "fusectl", str(connections)],
            check=False,
            capture_output=True,
        )
    (connections / str(number) / "abort").write_text("1")


class Daemon:
    def __init__(self, backing: Path, mountpoint: Path, control: Path) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.control = control
        self.ops = LazyOperations(backing)
        self.cut_done = trio.Event()
        self.aborted = False

    async def serve_control(
        self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        self.control.unlink(missing_ok=True)
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(str(self.control))
        sock.listen(8)
        task_status.started()
        await trio.serve_listeners(self.handle, [trio.SocketListener(sock)])

    async def handle(self, stream: trio.SocketStream) -> None:
        data = b""
        while not data.endswith(b"\n"):
            chunk = await stream.receive_some(1024)
            if not chunk:
                return
            data += chunk
        words = data.decode().split()
        answer = self.request(words)
        await stream.send_all(answer.encode() + b"\n")
        await stream.aclose()
        if words and words[0] == "cut" and self.aborted:
            self.cut_done.set()

    def request(self, words: list[str]) -> str:
        if words == ["stats"]:
            return json.dumps(self.ops.volatile.stats())
        if words == ["sync"]:
            self.ops.volatile.sync_all()
            return "ok"
        if words[:1] == ["cut"] and not self.aborted:
            if words[1:] == ["all"]:
                rng = None
            elif len(words) == 3 and words[1] == "torn" and words[2].isdigit():
                rng = random.Random(int(words[2]))
            else:
                return "error: cut all | cut torn SEED"
            self.ops.cut_started = True
            abort_connection(self.mountpoint)
            self.aborted = True
            summary = self.ops.volatile.cut(rng)
            return json.dumps(summary.__dict__)
        return "error: stats | sync | cut all | cut torn SEED"

    async def run(self) -> None:
        options = set(pyfuse3.default_options)
        options.discard("default_permissions")
        options |= {"fsname=lazyfs", "subtype=lazyfs"}
        pyfuse3.init(self.ops, str(self.mountpoint), options)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.serve_control)
                print("mounted", flush=True)
                await pyfuse3.main()
                # The loop ends on an unmount or on the abort of a cut (which answers first).
                if self.aborted:
                    await self.cut_done.wait()
                nursery.cancel_scope.cancel()
        finally:
            pyfuse3.close(unmount=not self.aborted)
            self.control.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.lazyfs", description=__doc__)
    parser.add_argument("backing", type=Path)
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("--control", type=Path, required=True)
    args = parser.parse_args(argv)
    daemon = Daemon(args.backing.resolve(), args.mountpoint.resolve(), args.control.resolve())
    trio.run(daemon.run)
    if daemon.aborted:  # the aborted mount stays until unmounted; lazily: nothing uses it now
        subprocess.run(["umount", "-l", str(daemon.mountpoint)], check=False, capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
