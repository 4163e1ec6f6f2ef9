"""User code that the tests run inside h5feed's workers (``source="user_sources:..."``).

Workers find this module through the trainer's ``sys.path`` (pytest puts ``tests/`` on it).
Nothing here imports h5feed: it is what a user would write.
"""

from __future__ import annotations

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


def failing_generator(n: int, fail_at: int, shard_index: int) -> Iterator[int]:
    """Shard 0 raises after ``fail_at`` elements; other shards yield n elements."""
    for value in range(n):
        if shard_index == 0 and value == fail_at:
            raise RuntimeError(f"sensor {value} unplugged")
        yield value


def varlen(n: int = 10, shard_index: int = 0, shard_count: int = 1) -> Iterator[Any]:
    """A field whose first dimension varies between elements (issue 22's repro)."""
    for i in range(shard_index, n, shard_count):
        yield np.full((3 + i % 4, 2), i, np.float32), i
