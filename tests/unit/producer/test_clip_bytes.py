"""Where a clip's bytes lie (h5feed/producer/files/clip_bytes.py), read through the range cache
that object storage's files use (h5feed/producer/files/range_cache.py), in process over local
files: a file object whose every miss is one counted fetch.

What it shows: for each layout that can be planned (groups, packs, flat, raw, video), once a
clip's plan is fetched (read_ahead.Source.fetch_plan, on this thread), h5py reads the clip's
frames (and a pack's CRCs) without one more fetch, and they are the bytes on disk; a layout or
dataset that cannot be planned (frame datasets, blobs, a compressed dataset) has no plan; forged
descriptors and headers pointing outside the file are ignored."""

from __future__ import annotations

import io
import pathlib
import threading
from typing import Any

import h5py
import numpy as np
import pytest
from h5py._objects import phil
from one_file_cases import CASES

from h5feed.common.layouts import Auto, resolve
from h5feed.producer.files import clip_bytes, read_ahead
from h5feed.producer.files.range_cache import RangeCache
from h5feed.producer.files.read_limits import DEFAULT_BOUNDS
from h5feed.producer.layouts import READERS
from h5feed.producer.layouts.base import LayoutReader
from h5feed.producer.layouts.detect import detect

PLANNED = ("groups", "packs", "flat", "raw", "video")


class Counted:
    """The bytes of a local file, each call one fetch (counted)."""

    def __init__(self, path: str) -> None:
        self.data = pathlib.Path(path).read_bytes()
        self.fetches: list[tuple[int, int]] = []

    def __call__(self, start: int, stop: int) -> bytes:
        self.fetches.append((start, stop))
        return self.data[start:stop]


class CachedFile(io.RawIOBase):
    """What h5py reads a URL's file through, over a local file: reads served by a cache."""

    def __init__(self, cache: RangeCache) -> None:
        self.cache, self.position = cache, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.cache.size}[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.cache._fetch(self.position, self.position + len(view))
        view[: len(data)] = data
        self.position += len(data)
        return len(data)


def open_cached(
    path: str, layout: Any, name: str | None = None
) -> tuple[LayoutReader, RangeCache, Counted]:
    """The reader of ``path`` read through a range cache whose misses fetch exactly what
    h5py asks (a minimum fetch of one byte), and that cache's fetcher; ``name``: what the
    reader calls the file (a URL: it plans clips as a URL's reader does), else ``path``."""
    fetcher = Counted(path)
    cache = RangeCache(fetcher, len(fetcher.data), capacity=1 << 30, min_fetch=1)
    cache.settle()
    h5 = h5py.File(CachedFile(cache), "r")
    spec = resolve(layout, "frames", "label")
    if isinstance(spec, Auto):
        spec = detect(h5, path, spec)
    return READERS[spec.kind](h5, name or path, spec, None, DEFAULT_BOUNDS), cache, fetcher


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_planned_clip_is_read_without_another_request_and_is_the_bytes_on_disk(
    tmp_path: pathlib.Path, case: str
) -> None:
    path, layout = CASES[case](tmp_path)
    reader, cache, fetcher = open_cached(path, layout)
    plain = READERS[reader.spec.kind](h5py.File(path, "r"), path, reader.spec, None, DEFAULT_BOUNDS)
    source = read_ahead.Source("s3://bucket/file.h5", cache)
    try:
        videos = reader.index()
        planned = 0
        for name, frames, _label in videos:
            indices = list(range(max(0, frames - 3), frames))  # the video's last 3 frames
            plan = reader.clip_bytes(name, indices)  # may open the video's datasets
            if plan is None:
                continue
            planned += 1
            source.fetch_plan(plan)
            before = len(fetcher.fetches)
            got = reader.read_frames(name, indices)
            crcs = reader.frame_crcs(name, indices)
            assert fetcher.fetches[before:] == [], (name, indices)  # nothing but the plan
            want = plain.read_frames(name, indices)
            assert [bytes(np.asarray(g)) for g in got] == [bytes(np.asarray(w)) for w in want]
            assert crcs == plain.frame_crcs(name, indices)
        assert (planned > 0) == (case in PLANNED), (case, planned)
    finally:
        reader.close()
        plain.close()


def test_a_compressed_or_cut_dataset_has_no_plan(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "odd.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("zipped", data=np.zeros((64, 8), np.uint8), compression="gzip")
        f.create_dataset("cut", data=np.zeros((64, 8), np.uint8), chunks=(8, 4))
        f.create_dataset("whole", data=np.zeros((64, 8), np.uint8), chunks=(8, 8))
        f.create_dataset("plain", data=np.arange(64 * 8, dtype=np.uint8).reshape(64, 8))
        f.create_dataset("names", data=np.array(["a", "b"], dtype=h5py.string_dtype()))
    size = path.stat().st_size
    with h5py.File(path, "r") as f:
        assert clip_bytes.DatasetBytes.of(f["zipped"], size) is None  # its bytes are not rows
        assert clip_bytes.DatasetBytes.of(f["cut"], size) is None  # a chunk holds half rows
        assert clip_bytes.DatasetBytes.of(f["names"], size) is None  # strings: not planned
        assert clip_bytes.DatasetBytes.of(f["plain"], 1000) is None  # past the (said) end
        whole = clip_bytes.DatasetBytes.of(f["whole"], size)
        assert whole is not None and len(whole.rows(0, 63)) == 8  # one range per chunk
        plain = clip_bytes.DatasetBytes.of(f["plain"], size)
        assert plain is not None
        [(start, stop)] = plain.rows(3, 5)
        assert path.read_bytes()[start:stop] == bytes(range(24, 48))


def test_descriptors_and_headers_pointing_outside_the_file_are_ignored() -> None:
    sizes = (8, 8)

    def descriptor(length: int, address: int) -> bytes:
        return length.to_bytes(4, "little") + address.to_bytes(8, "little") + b"\1\0\0\0"

    forged = descriptor(10, 5000) + descriptor(10, 1 << 60) + descriptor(0, 700) + b"\xff" * 7
    assert clip_bytes.heap_addresses(forged, sizes, file_size=10_000) == [5000]
    header = b"GCOL\1\0\0\0" + (4096).to_bytes(8, "little")
    assert clip_bytes.collection_size(header, sizes) == 4096
    assert clip_bytes.collection_size(b"GCOX" + header[4:], sizes) is None
    assert clip_bytes.collection_size(header[:10], sizes) is None
    spans = clip_bytes.spans([100, 200_000, 120], {100: 4096}, guess=64)
    assert spans == [(100, 4196), (200_000, 200_064)]  # 120 inside the first: one range


def test_a_walked_videos_clip_is_planned_without_waiting_for_h5pys_lock(
    tmp_path: pathlib.Path,
) -> None:
    """Clips are planned on read-ahead threads while the worker's own read may hold h5py's
    lock, waiting for the very fetches a plan would start. A video whose datasets the index
    walk opened is planned without h5py (their storage learnt during the walk, and found
    without asking h5py anything: even ``dataset.id`` takes its lock), so the plan is made
    while the lock is held elsewhere."""
    path, layout = CASES["groups"](tmp_path)
    reader, _cache, _fetcher = open_cached(path, layout, name="s3://bucket/file.h5")
    try:
        name, _frames, _label = reader.index()[0]
        made: list[clip_bytes.ClipBytes | None] = []
        planning = threading.Thread(target=lambda: made.append(reader.clip_bytes(name, [0, 1])))
        with phil:  # the worker's read, holding h5py's lock
            planning.start()
            planning.join(10)
            waited = planning.is_alive()
        planning.join(30)
        assert not waited, "the plan waited for h5py's lock"
        assert made and made[0] is not None and made[0].descriptors
    finally:
        reader.close()
