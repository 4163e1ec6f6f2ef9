"""HDF5 file locking as workers meet it (h5feed/producer/files/locking.py): several readers of
one file at once, and a file open for writing elsewhere, which is refused naming the file."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest
from conftest import one_file_of_tiny_videos

from h5feed.common.errors import FileReadError
from h5feed.common.layouts import Auto
from h5feed.producer.files.locking import READ_LOCKING, open_read_only
from h5feed.producer.layouts import open_reader

pytestmark = pytest.mark.processes

_TIMEOUT_S = 60


def _one_file(directory: pathlib.Path, videos: int) -> pathlib.Path:
    (path,) = sorted(one_file_of_tiny_videos(directory, videos).glob("*.h5"))
    return path


def _holder(path: pathlib.Path, mode: str, locking: object = True) -> subprocess.Popen[str]:
    """A process that holds ``path`` open in ``mode`` until its stdin closes; it prints
    "open" once it holds it."""
    code = textwrap.dedent(
        f"""
        import sys, h5py
        with h5py.File({str(path)!r}, {mode!r}, locking={locking!r}):
            print("open", flush=True)
            sys.stdin.read()
        """
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "open"  # bounded: the process exits on error
    return holder


def _release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(timeout=_TIMEOUT_S)


def test_several_processes_hold_one_file_read_only_at_once(tmp_path: pathlib.Path) -> None:
    path = _one_file(tmp_path, videos=3)
    holders = [_holder(path, "r", READ_LOCKING) for _ in range(3)]  # three other workers
    try:
        reader = open_reader(str(path), Auto())  # and this one, while they hold it
        try:
            assert len(reader.index()) == 3
        finally:
            reader.close()
    finally:
        for holder in holders:
            _release(holder)


def test_a_file_open_for_writing_elsewhere_is_refused_naming_the_file(
    tmp_path: pathlib.Path,
) -> None:
    path = _one_file(tmp_path, videos=2)
    writer = _holder(path, "a")  # being written in place: HDF5's exclusive lock
    try:
        with pytest.raises(FileReadError, match="unable to lock file") as refused:
            open_reader(str(path), Auto())
        assert str(path) in str(refused.value)
    finally:
        _release(writer)
    open_reader(str(path), Auto()).close()  # the writer gone, the same file opens


def test_a_worker_reading_a_file_keeps_a_writer_out(tmp_path: pathlib.Path) -> None:
    """The shared lock is held while a worker has the file open: a writer opening it in place
    is refused (it would change what the worker reads under its index)."""
    path = _one_file(tmp_path, videos=2)
    held = open_read_only(str(path))
    try:
        attempt = subprocess.run(
            [sys.executable, "-c", f"import h5py; h5py.File({str(path)!r}, 'a')"],
            capture_output=True, text=True, timeout=_TIMEOUT_S,
        )  # fmt: skip
        assert attempt.returncode != 0 and "unable to lock file" in attempt.stderr
    finally:
        held.close()
