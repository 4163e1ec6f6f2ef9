"""The node-local cache of whole objects (h5feed/producer/files/node_cache.py), in one process
with local files standing in for the object's reads: what a copy is named by, that it holds
exactly the object's bytes or nothing, its bound on disk, one download per node, and the
directories it refuses. Over a real S3 server, through workers:
tests/system/test_object_storage_node_cache.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
from typing import Any

import pytest

from h5feed.producer.files import node_cache

URL = "s3://bucket/data/a.h5"
WAIT_S = 10.0


@pytest.fixture()
def root(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The cache's directory, as a producer's environment names it (made by :func:`directory`)."""
    monkeypatch.setenv(node_cache.DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(node_cache.GIB_ENV, raising=False)
    made = node_cache.directory()
    assert made is not None
    return made


def _object(tmp_path: pathlib.Path, name: str, size: int) -> tuple[pathlib.Path, dict[str, Any]]:
    path = tmp_path / name
    path.write_bytes(os.urandom(size))
    return path, {"size": size, "ETag": f'"{name}-etag"'}


def _copied(root: str, url: str, details: dict[str, Any], body: pathlib.Path) -> str | None:
    """The copy made by a download whose reads are of ``body`` (the object's, or not)."""
    node_cache.queue_download(root, url, details, lambda: open(body, "rb"))  # noqa: SIM115
    assert node_cache.wait_idle(WAIT_S)
    return node_cache.copy_path(root, url, details)


def test_a_copy_holds_the_objects_bytes_and_is_found_by_url_size_and_etag(
    root: str, tmp_path: pathlib.Path
) -> None:
    source, details = _object(tmp_path, "a", 3 * 1024 + 7)
    assert node_cache.copy_path(root, URL, details) is None  # nothing before the download
    downloads = node_cache.stats["downloads"]
    copy = _copied(root, URL, details, source)
    assert copy is not None and pathlib.Path(copy).read_bytes() == source.read_bytes()
    assert node_cache.stats["downloads"] == downloads + 1
    assert oct(os.stat(copy).st_mode & 0o777) == oct(0o600)
    # another ETag (the object replaced), size or URL: not this copy
    assert node_cache.copy_path(root, URL, {**details, "ETag": '"other"'}) is None
    assert node_cache.copy_path(root, URL, {**details, "size": details["size"] + 1}) is None
    assert node_cache.copy_path(root, URL + "x", details) is None
    with open(copy, "rb") as plain, contextlib.closing(node_cache.open_copy(copy, URL)) as named:
        assert repr(named) == URL  # h5py names the file by it: messages name the URL
        assert named.read() == plain.read()


def test_a_streaming_worker_is_told_once_that_the_copy_is_ready(
    root: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_cache, "CHECK_EVERY_S", 0.0)
    source, details = _object(tmp_path, "b", 2048)
    url = "s3://bucket/data/b.h5"
    assert not node_cache.copy_ready(url)  # not streamed here
    assert _copied(root, url, details, source) is not None
    assert node_cache.copy_ready(url)
    assert not node_cache.copy_ready(url)  # reopened once, not at every read


def test_a_body_cut_short_leaves_no_copy_and_no_partial_file_and_is_counted(
    root: str, tmp_path: pathlib.Path
) -> None:
    source, details = _object(tmp_path, "c", 4096)
    failed = node_cache.stats["failed_downloads"]
    short = tmp_path / "short"
    short.write_bytes(source.read_bytes()[:1000])
    assert _copied(root, "s3://bucket/data/c.h5", details, short) is None
    assert node_cache.stats["failed_downloads"] == failed + 1
    assert [p for p in os.listdir(root) if not p.endswith(".lock")] == []


def test_an_object_without_etag_or_version_is_never_copied(
    root: str, tmp_path: pathlib.Path
) -> None:
    source, details = _object(tmp_path, "d", 1024)
    anonymous = {"size": details["size"]}
    assert _copied(root, "s3://bucket/data/d.h5", anonymous, source) is None
    assert os.listdir(root) == []


def test_the_copies_stay_within_the_bound_least_recently_opened_dropped_first(
    root: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(node_cache.GIB_ENV, str(2.5 * 1024 / (1 << 30)))  # 2.5 KiB
    copies = {}
    for age, name in enumerate("xyz"):
        source, details = _object(tmp_path, name, 1024)
        url = f"s3://bucket/data/{name}.h5"
        copies[name] = (url, details)
        copy = _copied(root, url, details, source)
        assert copy is not None, name
        os.utime(copy, (1000 + age, 1000 + age))  # x opened first, y second
        if name == "y":
            node_cache.copy_path(root, *copies["x"])  # x opened again: y is the oldest now
    assert node_cache.copy_path(root, *copies["y"]) is None
    assert node_cache.copy_path(root, *copies["x"]) is not None
    assert node_cache.copy_path(root, *copies["z"]) is not None
    # an object larger than the whole bound is streamed, never copied
    big, big_details = _object(tmp_path, "big", 3 * 1024)
    too_large = node_cache.stats["too_large"]
    assert _copied(root, "s3://bucket/big.h5", big_details, big) is None
    assert node_cache.stats["too_large"] == too_large + 1


def test_an_object_another_process_is_downloading_is_left_to_it(
    root: str, tmp_path: pathlib.Path
) -> None:
    source, details = _object(tmp_path, "e", 1024)
    url = "s3://bucket/data/e.h5"
    lock = os.path.join(root, node_cache.key(url, details) + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: another process's
        assert _copied(root, url, details, source) is None
    finally:
        os.close(fd)
    assert _copied(root, url, details, source) is not None  # lock free


def test_a_directory_others_may_write_into_is_refused_and_the_cache_is_off(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = tmp_path / "fresh"
    monkeypatch.setenv(node_cache.DIR_ENV, str(made))
    assert node_cache.directory() == str(made)
    assert oct(made.stat().st_mode & 0o777) == oct(0o700)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv(node_cache.DIR_ENV, str(shared))
    refused = node_cache.stats["refused_directory"]
    assert node_cache.directory() is None
    assert node_cache.stats["refused_directory"] == refused + 1
    monkeypatch.delenv(node_cache.DIR_ENV)
    assert node_cache.directory() is None  # unset: no cache


@pytest.mark.parametrize("value", ["0", "-1", "lots", "nan"])
def test_a_bound_that_is_not_a_positive_number_is_an_error_naming_the_variable(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(node_cache.GIB_ENV, value)
    with pytest.raises(ValueError, match=node_cache.GIB_ENV):
        node_cache.bound_bytes()


def test_a_partial_copy_left_by_a_process_that_died_is_removed_by_the_next_download(
    root: str, tmp_path: pathlib.Path
) -> None:
    source, details = _object(tmp_path, "f", 2048)
    url = "s3://bucket/data/f.h5"
    stale = pathlib.Path(root, node_cache.key(url, details) + ".h5.part.999999")
    stale.write_bytes(b"half")  # a worker SIGKILLed while it downloaded
    assert node_cache.copy_path(root, url, details) is None  # never read as a copy
    assert _copied(root, url, details, source) is not None
    assert not stale.exists()
