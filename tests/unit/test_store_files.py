"""tidemq.common.files.write_file_safely: content, the `.bak` of the previous version, and a crash
between writing the temporary file and renaming it (os.replace raising) leaving the old file."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from tidemq.common import files
from tidemq.common.files import fsync_dir, make_dirs, write_file_safely


def test_first_write_creates_the_file_and_its_folder_without_a_backup(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    write_file_safely(path, b"one")
    assert path.read_bytes() == b"one"
    assert sorted(p.name for p in path.parent.iterdir()) == ["topics.json"]


def test_each_write_keeps_the_previous_version_as_bak(tmp_path: Path) -> None:
    path = tmp_path / "offsets.json"
    write_file_safely(path, b"one")
    write_file_safely(path, b"two")
    assert (path.read_bytes(), (tmp_path / "offsets.json.bak").read_bytes()) == (b"two", b"one")
    write_file_safely(path, b"three")
    assert (path.read_bytes(), (tmp_path / "offsets.json.bak").read_bytes()) == (
        b"three",
        b"two",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["offsets.json", "offsets.json.bak"]


def test_without_backup_only_the_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    write_file_safely(path, b"old", keep_backup=False)
    write_file_safely(path, b"new", keep_backup=False)
    assert path.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_backup_is_a_copy_where_hard_links_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f"
    write_file_safely(path, b"one")

    def no_links(src: object, dst: object) -> None:
        raise OSError("no hard links on this file system")

    monkeypatch.setattr(os, "link", no_links)
    write_file_safely(path, b"two")
    assert (path.read_bytes(), (tmp_path / "f.bak").read_bytes()) == (b"two", b"one")


def test_a_crash_before_the_rename_leaves_the_old_file_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "consumerOffset.json"
    write_file_safely(path, b"old table")
    real_replace = os.replace

    def crash_on_main_rename(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst) == path:
            raise OSError("power lost")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_main_rename)
    with pytest.raises(OSError, match="power lost"):
        write_file_safely(path, b"new table")
    assert path.read_bytes() == b"old table"
    assert (tmp_path / "consumerOffset.json.bak").read_bytes() == b"old table"
    # The new content was written whole to the temporary file, which the next write replaces.
    assert (tmp_path / "consumerOffset.json.tmp").read_bytes() == b"new table"
    monkeypatch.setattr(os, "replace", real_replace)
    write_file_safely(path, b"newer table")
    assert path.read_bytes() == b"newer table"
    assert not (tmp_path / "consumerOffset.json.tmp").exists()


def test_fsync_dir_accepts_a_directory_and_rejects_a_missing_one(tmp_path: Path) -> None:
    fsync_dir(tmp_path)
    with pytest.raises(FileNotFoundError):
        fsync_dir(tmp_path / "missing")


def test_concurrent_writes_of_one_path_take_turns(tmp_path: Path) -> None:
    """Two threads replacing one file share `<path>.tmp`: each write must still succeed, whole."""
    path = tmp_path / "consumerOffset.json"
    contents = [bytes([65 + n]) * (20_000 + n) for n in range(2)]
    errors: list[BaseException] = []

    def writer(data: bytes) -> None:
        try:
            for _ in range(150):
                write_file_safely(path, data)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(data,)) for data in contents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    assert path.read_bytes() in contents
    assert (tmp_path / "consumerOffset.json.bak").read_bytes() in contents


def test_a_second_writer_of_one_path_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found in review: the turns hid that a path had two writers (whichever writes last
    wins, and it may hold the older data)."""
    path = tmp_path / "offsets.json"
    first_writing = threading.Event()
    second_waiting = threading.Event()
    real_write = files._write_synced

    def write_synced(target: Path, data: bytes) -> None:
        if data == b"first":
            first_writing.set()
            assert second_waiting.wait(10)
        real_write(target, data)

    monkeypatch.setattr(files, "_write_synced", write_synced)
    first = threading.Thread(target=write_file_safely, args=(path, b"first"))
    first.start()
    assert first_writing.wait(10)
    second = threading.Thread(target=write_file_safely, args=(path, b"second"))
    second.start()
    deadline = time.monotonic() + 10
    while "two writers" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.01)  # the second writer logs before it waits for the first
    second_waiting.set()
    first.join(10)
    second.join(10)
    assert f"two writers of {path} at once" in caplog.text
    assert path.read_bytes() == b"second"


def test_one_writer_at_a_time_logs_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for n in range(3):
        write_file_safely(tmp_path / "checkpoint", bytes([n]), keep_backup=False)
    assert "two writers" not in caplog.text


def test_make_dirs_makes_every_missing_folder_and_accepts_existing_ones(tmp_path: Path) -> None:
    make_dirs(tmp_path / "a" / "b" / "c")
    assert (tmp_path / "a" / "b" / "c").is_dir()
    make_dirs(tmp_path / "a" / "b")  # there already: nothing to do


def test_make_dirs_refuses_a_file_in_the_way_as_mkdir_p_does(tmp_path: Path) -> None:
    # A file where a folder of the path should be: "Not a directory", as `mkdir -p` and
    # os.makedirs say it (the dispatch fault test reads it in a broker's log).
    (tmp_path / "queue").write_text("not a folder")
    with pytest.raises(NotADirectoryError):
        make_dirs(tmp_path / "queue" / "0")
    with pytest.raises(FileExistsError):
        make_dirs(tmp_path / "queue")
