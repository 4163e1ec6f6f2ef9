"""User code that the tests run inside h5feed's workers (``source="user_sources:..."``).

Workers find this module through the trainer's ``sys.path`` (pytest puts ``tests/`` on it).
Nothing here imports h5feed: it is what a user would write.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import cv2
import h5py
import numpy as np


class Squares:
    """A PyTorch-style map dataset: item i is {"i": i, "x": [i, i, i] float32}."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"i": i, "x": np.full(3, i, np.float32)}


class Tokens:
    """Variable-length fields: item i has i % 5 + 1 tokens, a label and a name."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "tokens": np.arange(i % 5 + 1, dtype=np.int64) + i,
            "label": i,
            "name": f"item-{i}",
        }


class Nested:
    """Nested dicts and tuples: ({"a": {"b": [2, 2] int32}, "c": str}, float)."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> tuple[dict[str, Any], float]:
        return ({"a": {"b": np.full((2, 2), i, np.int32)}, "c": f"c{i}"}, float(i) / 2)


class BadShape:
    """Item ``bad`` has a depth field of another shape than every other item."""

    def __init__(self, n: int, bad: int) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        depth = np.zeros(4 if i == self.bad else 3, np.float32)
        return {"x": (np.zeros(2, np.float32), {"depth": depth})}


class Raising:
    """Item ``bad`` raises."""

    def __init__(self, n: int, bad: int) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            raise ValueError(f"cannot load item {i}: corrupt record")
        return i


def count_up(n: int, shard_index: int, shard_count: int) -> Iterator[dict[str, int]]:
    """A generator function that shards itself: this shard's numbers below n."""
    for value in range(shard_index, n, shard_count):
        yield {"value": value, "shard": shard_index}


class SceneGenerator:
    """In the seed's style: reads parts of HDF5 video files and yields (X, y).

    X: the first ``frames`` frames of a video, decoded, uint8 [frames, H, W, 3]; y: its label
    and ``file:video`` name. Shard ``i`` of ``n`` takes every n-th video of the sorted list.
    """

    def __init__(
        self, files: list[str], frames: int = 2, shard_index: int = 0, shard_count: int = 1
    ) -> None:
        self.files = files
        self.frames = frames
        videos = []
        for path in files:
            with h5py.File(path, "r") as f:
                videos.extend((path, name) for name in sorted(f))
        self.videos = videos[shard_index::shard_count]

    def generate_data(self) -> Iterator[tuple[np.ndarray, dict[str, Any]]]:
        for path, name in self.videos:
            with h5py.File(path, "r") as f:
                group = f[name]
                jpegs = group["frames"][: self.frames]  # only the part we need
                label = int(group.attrs["label"])
            images = [cv2.imdecode(np.asarray(j, np.uint8), cv2.IMREAD_COLOR) for j in jpegs]
            yield np.stack(images), {"label": label, "video": f"{path}:{name}"}


def make_squares(n: int) -> Squares:
    return Squares(n)


def not_a_source() -> int:
    return 3


def failing_generator(n: int, fail_at: int, shard_index: int, shard_count: int) -> Iterator[int]:
    """Shard 0 raises after ``fail_at`` elements; other shards yield n elements (each shard
    its own: element #i of shard w is i * shard_count + w)."""
    for value in range(n):
        if shard_index == 0 and value == fail_at:
            raise RuntimeError(f"sensor {value} unplugged")
        yield value * shard_count + shard_index


def forgot_to_shard(n: int, shard_index: int = 0, shard_count: int = 1) -> Iterator[dict[str, int]]:
    """Takes the shard arguments and ignores them: every worker yields every sample."""
    for value in range(n):
        yield {"value": value}


def unsharded(n: int) -> Iterator[dict[str, int]]:
    """Does not take the shard arguments: every worker yields every sample."""
    for value in range(n):
        yield {"value": value}


def header_first(n: int, shard_index: int = 0, shard_count: int = 1) -> Iterator[dict[str, int]]:
    """Sharded, but every shard begins with the same few elements (a header, or warm-up
    rows of a synthetic feed): ``value`` -1 four times, then this shard's numbers below n."""
    for _ in range(4):
        yield {"value": -1}
    for value in range(shard_index, n, shard_count):
        yield {"value": value}


def varlen(n: int = 10, shard_index: int = 0, shard_count: int = 1) -> Iterator[Any]:
    """A field whose first dimension varies between elements (issue 22's repro)."""
    for i in range(shard_index, n, shard_count):
        yield np.full((3 + i % 4, 2), i, np.float32), i


def hdf5_batches(
    n: int, batch: int, shard_index: int = 0, shard_count: int = 1, bad: bool = False
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The widely copied "HDF5 dataset generator": whole batches ``(images[i:i+B],
    labels[i:i+B])``, the last one shorter; each shard takes every ``shard_count``-th batch.
    ``bad``: the labels of a batch lack one row."""
    images = np.arange(n * 2 * 2 * 3, dtype=np.float32).reshape(n, 2, 2, 3)
    labels = np.arange(n, dtype=np.int64)
    for start in range(shard_index * batch, n, batch * shard_count):
        stop = start + batch
        yield images[start:stop], labels[start : stop - 1 if bad else stop]


class Augmented:
    """A map dataset whose items are augmented with the global ``np.random`` (unseeded)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        noise = np.random.normal(size=3).astype(np.float32)
        flip = random.random() < 0.5
        return {"i": i, "noise": noise, "flip": flip}


class DivergentCopies:
    """Each copy draws an offset from a fresh generator (OS entropy): every copy is the same
    twice, but the copies differ."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.offset = int(np.random.default_rng().integers(1 << 30))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, int]:
        return {"i": i, "v": i + self.offset}


class Unreproducible:
    """Item 0 draws from a fresh generator (OS entropy) on every fetch; the others do not."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> dict[str, float]:
        noise = float(np.random.default_rng().normal()) if i == 0 else 0.0
        return {"i": float(i), "noise": noise}


def noisy(n: int, shard_index: int, shard_count: int) -> Iterator[dict[str, Any]]:
    """A generator drawing from the global generators, unseeded."""
    for i in range(shard_index, n, shard_count):
        yield {"i": i, "v": np.random.random(), "r": random.random()}


def single_label_batches() -> Iterator[tuple[np.ndarray, int]]:
    """Batches whose label is one number, not one per sample."""
    yield np.zeros((3, 2), np.float32), 1


def given(items: list[int], shard_index: int = 0, shard_count: int = 1) -> Iterator[dict[str, int]]:
    """This shard's part of ``items`` (``items[shard_index::shard_count]``)."""
    for value in items[shard_index::shard_count]:
        yield {"value": value}
