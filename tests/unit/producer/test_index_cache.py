"""The on-disk index cache: used when valid, never when the file changed."""

from __future__ import annotations

import os
import pathlib

import cv2
import numpy as np

import h5feed
from h5feed.common.layouts import Auto, Flat, Groups
from h5feed.producer.files import index_cache
from h5feed.producer.sample_data import write_video_file


def frames(n: int) -> list[bytes]:
    return [cv2.imencode(".jpg", np.full((8, 8, 3), i, np.uint8))[1].tobytes() for i in range(n)]


def test_store_then_load_round_trips(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.h5"
    write_video_file(path, {"video_000": (frames(3), 2)})
    videos = [("video_000", 3, 2)]
    cache = str(tmp_path / "cache")
    assert index_cache.load(cache, str(path), Groups()) is None
    index_cache.store(cache, str(path), Groups(), Groups(), videos)
    assert index_cache.load(cache, str(path), Groups()) == (Groups(), videos)
    assert index_cache.load(cache, str(path), Groups(label="other_label")) is None
    assert index_cache.load(cache, str(path), Flat()) is None  # the layout is in the key


def test_a_changed_file_is_indexed_again(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.h5"
    cache = tmp_path / "cache"
    write_video_file(path, {"video_000": (frames(3), 0)})
    first = list(h5feed.batches(path, clip_len=1, batch_size=8, index_cache=str(cache), workers=1))
    assert len(list(cache.glob("*.msgpack"))) == 1  # (feeds/: the consumer's known lengths)
    assert len(first[0]["label"]) == 1
    write_video_file(path, {"video_000": (frames(3), 0), "video_001": (frames(2), 1)})
    os.utime(path, ns=(1, 1))  # a different mtime whatever the clock's resolution
    second = list(h5feed.batches(path, clip_len=1, batch_size=8, index_cache=str(cache), workers=1))
    assert sorted(second[0]["video"].tolist()) == [b"video_000", b"video_001"]
    assert len(list(cache.glob("*.msgpack"))) == 2


def test_a_corrupt_entry_is_a_miss(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.h5"
    write_video_file(path, {"video_000": (frames(3), 0)})
    cache = tmp_path / "cache"
    list(h5feed.batches(path, clip_len=1, index_cache=str(cache), workers=1))
    (entry,) = cache.glob("*.msgpack")
    entry.write_bytes(b"\xc1 not msgpack")
    assert index_cache.load(str(cache), str(path), Groups()) is None
    (batch,) = h5feed.batches(path, clip_len=1, index_cache=str(cache), workers=1)
    assert batch["video"].tolist() == [b"video_000"]


def test_cache_can_be_turned_off(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.h5"
    write_video_file(path, {"video_000": (frames(3), 0)})
    list(h5feed.batches(path, clip_len=1, index_cache=False, workers=1))
    assert not (tmp_path / "index-cache").exists()  # the per-test default location


def test_a_valid_entry_is_used_instead_of_reading_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.h5"
    write_video_file(path, {"video_000": (frames(3), 0)})
    cache = str(tmp_path / "cache")
    # An entry that disagrees with the file on the label only: if it is used, the label shows it.
    # Keyed by the layout asked for (auto, the default), holding the one recognised.
    index_cache.store(cache, str(path), Auto(), Groups(), [("video_000", 3, 9)])
    (batch,) = h5feed.batches(path, clip_len=1, index_cache=cache, workers=1)
    assert batch["label"].tolist() == [9]
