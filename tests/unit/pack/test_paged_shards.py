"""``h5feed pack`` keeps a shard's metadata in pages of its own (HDF5's paged file-space
strategy) and its frames contiguous, and a producer opening a paged file from object storage
reads those pages, not the frames around them, then keeps the metadata it read
(h5feed/pack/shards.py, h5feed/producer/files/remote_files.py)."""

from __future__ import annotations

import json
import pathlib

import cv2
import h5py
import numpy as np
import pytest

from h5feed.common.layouts import Auto
from h5feed.common.object_urls import BENCH_ENV, BENCH_SCHEME
from h5feed.pack.run import PackSettings, pack
from h5feed.pack.shards import MAX_PAGE_BYTES, MIN_PAGE_BYTES, page_bytes
from h5feed.producer.files import request_counts
from h5feed.producer.layouts import open_reader
from h5feed.producer.sample_data import write_video_file

VIDEOS, FRAMES = 60, 24
#: A block of 64 KiB: a producer's cache of a file is 256 KiB, a file here about 8 x that.
BLOCK = 256 << 10


def image_folders(root: pathlib.Path) -> dict[str, list[bytes]]:
    """``root/<video>/<frame>.jpg``: VIDEOS videos of FRAMES noisy JPEGs (about 8 KB each)."""
    rng = np.random.default_rng(3)
    videos: dict[str, list[bytes]] = {}
    for v in range(VIDEOS):
        frames = []
        for f in range(FRAMES):
            image = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
            frames.append(cv2.imencode(".jpg", image)[1].tobytes())
            (root / f"v{v:03d}").mkdir(parents=True, exist_ok=True)
            (root / f"v{v:03d}" / f"{f:02d}.jpg").write_bytes(frames[-1])
        videos[f"v{v:03d}"] = frames
    return videos


def index_reads(root: pathlib.Path, name: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """The bytes a producer reads to open ``root/name`` from a URL and learn its index."""
    monkeypatch.setenv(BENCH_ENV, json.dumps({"root": str(root), "latency_ms": 0}))
    monkeypatch.setenv("H5FEED_STORAGE_OPTIONS", json.dumps({"default_block_size": BLOCK}))
    request_counts.take()
    reader = open_reader(f"{BENCH_SCHEME}://{name}", Auto())
    try:
        assert len(reader.index()) == VIDEOS
    finally:
        reader.close()
    return request_counts.take().bytes


def test_a_page_is_a_power_of_two_near_a_128th_of_a_shard_within_its_bounds() -> None:
    assert page_bytes(1 << 30) == MAX_PAGE_BYTES == 4 << 20  # the default shard: 1 GiB
    assert page_bytes(32 << 20) == 256 << 10
    assert page_bytes(40 << 20) == 256 << 10  # rounded down
    assert page_bytes(1) == page_bytes(1 << 20) == MIN_PAGE_BYTES == 64 << 10
    assert page_bytes(1 << 40) == MAX_PAGE_BYTES


def test_a_shard_keeps_its_metadata_in_pages_of_its_own_and_its_frames_contiguous(
    tmp_path: pathlib.Path,
) -> None:
    videos = image_folders(tmp_path / "src")
    settings = PackSettings(shard_size=64 << 20)
    pack(tmp_path / "src", tmp_path / "out", settings)
    [shard] = sorted((tmp_path / "out").glob("*.h5"))
    with h5py.File(shard, "r") as h5:
        create = h5.id.get_create_plist()
        assert create.get_file_space_strategy()[0] == h5py.h5f.FSPACE_STRATEGY_PAGE
        assert create.get_file_space_page_size() == page_bytes(settings.shard_size)
        for name, frames in videos.items():  # no chunk index: a clip's descriptors, one range
            assert h5[name]["frames"].chunks is None
            assert [bytes(f) for f in h5[name]["frames"][()]] == frames


@pytest.mark.parametrize("count", [1, 256, 257, 600])
def test_a_videos_frames_are_copied_into_its_shard_whole_and_in_order(
    tmp_path: pathlib.Path, count: int
) -> None:
    """Across the copy's batches of 256 frames, and a video of one frame (which h5py would
    write as a 2-D shape from a 1-element object array)."""
    frames = [cv2.imencode(".jpg", np.full((8, 8, 3), i % 251, np.uint8))[1].tobytes()
              for i in range(count)]  # fmt: skip
    (tmp_path / "src" / "v").mkdir(parents=True)
    for i, frame in enumerate(frames):
        (tmp_path / "src" / "v" / f"{i:04d}.jpg").write_bytes(frame)
    pack(tmp_path / "src", tmp_path / "out")
    [shard] = sorted((tmp_path / "out").glob("*.h5"))
    with h5py.File(shard, "r") as h5:
        assert [bytes(f) for f in h5["v"]["frames"][()]] == frames
        assert h5["v"]["crc32"].shape == (count,)


def test_a_packed_shard_opened_from_a_url_reads_its_metadata_pages_not_its_frames(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same frames written as HDF5 does by default (metadata between the videos' frames):
    opening it from a URL reads most of the file; the packed shard, a small part of it."""
    videos = image_folders(tmp_path / "src")
    pack(tmp_path / "src", tmp_path / "data", PackSettings(shard_size=32 << 20))  # 256 KiB pages
    [shard] = sorted((tmp_path / "data").glob("*.h5"))
    write_video_file(tmp_path / "data" / "unpaged.h5", {n: (f, 0) for n, f in videos.items()})
    unpaged = index_reads(tmp_path, "data/unpaged.h5", monkeypatch)
    paged = index_reads(tmp_path, f"data/{shard.name}", monkeypatch)
    unpaged_size = (tmp_path / "data" / "unpaged.h5").stat().st_size
    size = shard.stat().st_size
    assert unpaged > unpaged_size / 2, (unpaged, unpaged_size)  # what pages are for
    assert paged < size / 5 and paged * 10 < unpaged, (paged, size, unpaged)


def test_a_file_opened_from_a_url_keeps_16_mib_of_its_metadata_and_no_chunk_cache(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HDF5's default metadata cache (2 MiB, grown by a rule of hit rates) dropped the
    headers of a file's open datasets while clips were read, and each was read again in the
    worker's own read: a round trip holding h5py's lock. A local path keeps HDF5's
    defaults."""
    from h5feed.producer.files import remote_files

    (tmp_path / "data").mkdir()
    write_video_file(tmp_path / "data" / "a.h5", {"v": ([b"\xff\xd8" * 8], 0)})
    monkeypatch.setenv(BENCH_ENV, json.dumps({"root": str(tmp_path), "latency_ms": 0}))
    h5 = remote_files.open_h5(f"{BENCH_SCHEME}://data/a.h5")
    try:
        config = h5.id.get_mdc_config()
        held = (config.initial_size, config.min_size, config.max_size)
        assert held == (remote_files.METADATA_CACHE_BYTES,) * 3 == (16 << 20,) * 3
        assert h5.id.get_access_plist().get_cache()[1:3] == (0, 0)  # no chunk slots, no bytes
    finally:
        h5.close()
    with h5py.File(tmp_path / "data" / "a.h5", "r") as local:
        assert local.id.get_mdc_config().max_size != remote_files.METADATA_CACHE_BYTES


def test_a_still_video_whose_jpegs_are_all_one_size_is_packed(tmp_path: pathlib.Path) -> None:
    """h5feed pack used to fail on it: h5py stacks frames of one length into a 2-D array and
    refuses to write it ("Can't broadcast (256, n) -> (256,)")."""
    still = cv2.imencode(".jpg", np.full((8, 8, 3), 90, np.uint8))[1].tobytes()
    (tmp_path / "src" / "still").mkdir(parents=True)
    for i in range(300):  # across encode's batches of 256 and the shard's copies of 256
        (tmp_path / "src" / "still" / f"{i:04d}.jpg").write_bytes(still)
    pack(tmp_path / "src", tmp_path / "out")
    [shard] = sorted((tmp_path / "out").glob("*.h5"))
    with h5py.File(shard, "r") as h5:
        assert [bytes(f) for f in h5["still"]["frames"][()]] == [still] * 300
