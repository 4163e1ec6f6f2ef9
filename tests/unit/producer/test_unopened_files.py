"""Rows of a file this worker failed to open (h5feed/producer/files/open_files.py): the trainer
may deal a worker rows of a file before the worker's failure to open it reaches the trainer
(an extra reader on this host is dealt at once). The unit then fails with a FileReadError
naming the file and its number, which moves the rows to another reader, never a KeyError."""

from __future__ import annotations

import pathlib

import pytest
from conftest import one_file_of_tiny_videos

from h5feed.common.errors import FileReadError
from h5feed.common.layouts import Auto
from h5feed.common.protocol import messages
from h5feed.producer.files.open_files import OpenFiles


def test_a_file_whose_open_failed_is_a_file_read_error_naming_it(tmp_path: pathlib.Path) -> None:
    files = OpenFiles(max_open=2)
    missing = str(tmp_path / "gone.h5")
    with pytest.raises(FileReadError):
        files.open(3, missing, Auto())
    with pytest.raises(FileReadError) as refused:
        files.get(3)  # a row of it, dealt before the trainer heard of the failure
    assert refused.value.number == 3 and refused.value.file == missing
    error = messages.Error.of("job", 7, refused.value)
    assert (error.file_number, error.file, error.unit) == (3, missing, 7)  # the trainer moves it


def test_a_file_never_named_is_a_file_read_error_with_its_number() -> None:
    with pytest.raises(FileReadError, match="file number 5") as refused:
        OpenFiles(max_open=2).get(5)
    assert refused.value.number == 5


def test_a_file_opened_after_a_failed_open_is_read(tmp_path: pathlib.Path) -> None:
    (path,) = sorted(one_file_of_tiny_videos(tmp_path, videos=2).glob("*.h5"))
    files = OpenFiles(max_open=2)
    with pytest.raises(FileReadError):
        files.open(0, str(tmp_path / "not-yet.h5"), Auto())
    files.open(0, str(path), Auto())
    assert len(files.get(0).index()) == 2
    files.close()
