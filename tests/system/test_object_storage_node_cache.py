"""The node-local cache of whole objects over a real S3 server (moto's, on loopback), read by
real workers through s3fs: the copies they make hold the objects' bytes, a later iteration on
the node reads them with no ranged GET and gives the batches read from disk, exactly once; a
worker streaming an object switches to its copy once complete; an object replaced in the
bucket is never read from its old copy. Without a server: tests/unit/producer/test_node_cache.py.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time
from typing import Any

import h5py
import numpy as np
import pytest
from ports import free_port
from s3_server import BUCKET

import h5feed
from h5feed.common.layouts import Auto
from h5feed.producer.files import node_cache, read_ahead, remote_files
from h5feed.producer.files.open_files import OpenFiles

pytestmark = pytest.mark.processes

OPTIONS: dict[str, Any] = {
    "clip_len": 2, "resize": (24, 32), "clips_per_video": 2, "batch_size": 3, "seed": 11,
    "index_cache": False, "start_timeout_s": 60, "unit_timeout_s": 60,
}  # fmt: skip
WAIT_S = 30.0


@pytest.fixture()
def cache_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """The node cache's directory, set in the environment the local workers inherit."""
    path = tmp_path / "node-cache"
    monkeypatch.setenv(node_cache.DIR_ENV, str(path))
    return path


def _copies(directory: pathlib.Path) -> list[pathlib.Path]:
    return sorted(directory.glob("*.h5")) if directory.exists() else []


def _arrays(batches: Any) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v) for k, v in b.items() if k != "file"} for b in batches]


def _same(got: list[dict[str, np.ndarray]], expected: list[dict[str, np.ndarray]]) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _content(h5: h5py.File) -> dict[str, bytes]:
    """Every dataset's stored values, by name (variable-length rows joined)."""
    found: dict[str, bytes] = {}

    def visit(name: str, item: Any) -> None:
        if isinstance(item, h5py.Dataset):
            data = item[()]
            rows = data.ravel() if data.dtype == object else [data]
            found[name] = b"".join(np.asarray(row).tobytes() for row in rows)

    h5.visititems(visit)
    return found


def test_workers_copy_the_objects_and_a_later_iteration_reads_only_the_copies(
    s3: Any, uploaded: list[pathlib.Path], cache_dir: pathlib.Path
) -> None:
    options = {**OPTIONS, "epochs": 2, "workers": 2}
    expected = _arrays(h5feed.batches([str(p) for p in uploaded], **options))
    feed = h5feed.batches(f"s3://{BUCKET}/data/*.h5", **options)
    got: list[dict[str, np.ndarray]] = []
    with feed.stream() as stream:
        for batch in stream:
            got.append({k: np.array(v) for k, v in batch.items() if k != "file"})
            if len(got) == 1:  # the workers download while they stream: wait for both copies
                deadline = time.monotonic() + WAIT_S
                while len(_copies(cache_dir)) < len(uploaded) and time.monotonic() < deadline:
                    time.sleep(0.05)
    _same(got, expected)
    copies = _copies(cache_dir)
    assert sorted(p.read_bytes() for p in copies) == sorted(p.read_bytes() for p in uploaded)
    assert list(cache_dir.glob("*.part.*")) == []

    again = h5feed.batches(f"s3://{BUCKET}/data/*.h5", **options)
    _same(_arrays(again), expected)  # the same batches, exactly once, from the copies
    for worker in again.stats()["workers"]:
        assert worker["object_bytes"] == 0, worker  # HEADs only: no ranged GET
        assert worker["object_requests"] > 0, worker


def test_a_worker_streaming_an_object_switches_to_its_copy_once_complete(
    s3: Any, uploaded: list[pathlib.Path], cache_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_cache, "CHECK_EVERY_S", 0.0)
    url = f"s3://{BUCKET}/data/{uploaded[0].name}"
    files = OpenFiles()
    try:
        streaming = files.open(0, url, Auto())
        video = streaming.index()[0][0]
        before = streaming.read_frames(video, [0, 1])
        assert read_ahead.ahead(url, video, key="streamed") == 1  # fetched ahead while streamed
        assert node_cache.wait_idle(WAIT_S)
        opened = node_cache.stats["opened_copies"]
        switched = files.get(0)
        assert switched is not streaming and node_cache.stats["opened_copies"] == opened + 1
        assert files.get(0) is switched and files.reopened == 0  # once, not a reopening
        assert switched.h5.filename == url  # messages still name the URL
        assert read_ahead.ahead(url, video, key="copied") == 0  # nothing asks the store now
        after = switched.read_frames(video, [0, 1])
        for a, b in zip(before, after, strict=True):
            np.testing.assert_array_equal(a, b)
    finally:
        files.close()


def test_an_object_replaced_in_the_bucket_is_never_read_from_its_old_copy(
    s3: Any, uploaded: list[pathlib.Path], cache_dir: pathlib.Path
) -> None:
    key = f"{BUCKET}/replaced/{uploaded[0].name}"
    url = f"s3://{key}"

    for local in (uploaded[0], uploaded[1]):  # the object, then another in its place
        s3.put(str(local), key)
        with h5py.File(local, "r") as disk:
            expected = _content(disk)
        opened = node_cache.stats["opened_copies"]
        with remote_files.open_h5(url) as streamed:  # no copy of this version yet: streamed
            assert node_cache.stats["opened_copies"] == opened
            assert _content(streamed) == expected
        assert node_cache.wait_idle(WAIT_S)
        with remote_files.open_h5(url) as copied:  # this version's copy
            assert node_cache.stats["opened_copies"] == opened + 1
            assert _content(copied) == expected
    assert len(_copies(cache_dir)) == 2  # one per version; the old one never read again


def _produce(*flags: str, port: int) -> subprocess.Popen[str]:
    """``h5feed produce`` of one worker for the bucket's data, connecting to ``port``."""
    return subprocess.Popen(
        [sys.executable, "-m", "h5feed", "produce", "--data-root", f"s3://{BUCKET}/data",
         "--workers", "1", "--name", "p", "--connect", f"tcp://127.0.0.1:{port}", *flags],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_producers_node_cache_flag_gives_its_workers_the_cache(
    s3: Any, uploaded: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    directory = tmp_path / "producer-cache"
    port = free_port()
    producer = _produce("--node-cache", str(directory), "--node-cache-gib", "1", port=port)
    try:
        for _iteration in range(2):  # the second finds the copies the first made
            feed = h5feed.batches(
                f"s3://{BUCKET}/data/*.h5", workers=0, listen=f"tcp://127.0.0.1:{port}",
                **{**OPTIONS, "epochs": 1},
            )  # fmt: skip
            assert sum(len(b["sample"]) for b in feed) == 2 * 5 * 2
            deadline = time.monotonic() + WAIT_S
            while len(_copies(directory)) < len(uploaded) and time.monotonic() < deadline:
                time.sleep(0.05)
        assert sorted(p.read_bytes() for p in _copies(directory)) == sorted(
            p.read_bytes() for p in uploaded
        )
        assert oct(directory.stat().st_mode & 0o777) == oct(0o700)
        assert sum(w["object_bytes"] for w in feed.stats()["workers"]) == 0  # read the copies
    finally:
        producer.kill()
        producer.communicate(timeout=30)


def test_a_producers_node_cache_bound_that_is_not_a_number_stops_it_before_any_worker(
    tmp_path: pathlib.Path,
) -> None:
    producer = _produce("--node-cache", str(tmp_path / "c"), "--node-cache-gib", "lots", port=1)
    _out, err = producer.communicate(timeout=60)
    assert producer.returncode != 0
    assert f"${node_cache.GIB_ENV} must be a positive number of GiB, not 'lots'" in err


def test_a_copy_hdf5_cannot_open_is_dropped_the_object_streamed_and_copied_again(
    s3: Any, uploaded: list[pathlib.Path], cache_dir: pathlib.Path
) -> None:
    key = f"{BUCKET}/damaged/{uploaded[0].name}"
    url = f"s3://{key}"
    s3.put(str(uploaded[0]), key)
    with h5py.File(uploaded[0], "r") as disk:
        expected = _content(disk)
    remote_files.open_h5(url).close()  # streamed, and copied
    assert node_cache.wait_idle(WAIT_S)
    (copy,) = _copies(cache_dir)
    copy.write_bytes(b"\0" * copy.stat().st_size)  # the disk damaged it: same size, no HDF5
    dropped = node_cache.stats["dropped_damaged"]
    with remote_files.open_h5(url) as h5:  # streamed again, the same content
        assert _content(h5) == expected
    assert node_cache.stats["dropped_damaged"] == dropped + 1
    assert node_cache.wait_idle(WAIT_S)
    assert _copies(cache_dir)[0].read_bytes() == uploaded[0].read_bytes()  # copied again
