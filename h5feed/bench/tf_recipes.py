"""The seed recipes: tf.data pipelines that run the cv2 per-clip work in Python.

* :class:`Interleave`: ``from_generator`` per file (the generator opens its file, yields one
  clip per video in a random order) and ``interleave`` over the files, sequential;
* :class:`ParallelInterleave`: the same with ``num_parallel_calls=AUTOTUNE`` and
  ``deterministic=False`` (the tf.data performance guide's advice);
* :class:`MapPyFunction`: ``from_generator`` of shuffled video indices, then
  ``map(py_function(clip), num_parallel_calls=AUTOTUNE, deterministic=False)``.

All end with ``batch(8).prefetch(AUTOTUNE)``. Each epoch is every video once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from h5feed.bench.contender import Contender
from h5feed.bench.workload import (
    BATCH_SIZE,
    CLIP_SHAPE,
    ClipReader,
    draw_clip,
    produce_direct,
)


class _TfContender(Contender):
    """Iterates the dataset :meth:`build` returns."""

    _iterator: Iterator[Any] | None = None

    def build(self) -> Any:
        raise NotImplementedError

    def start(self) -> None:
        self._iterator = iter(self.build())

    def next_frames(self) -> Any:
        if self._iterator is None:
            raise RuntimeError("next_frames() before start()")
        return next(self._iterator)

    def close(self) -> None:
        self._iterator = None


class Interleave(_TfContender):
    """``from_generator`` per file + ``interleave`` (no ``num_parallel_calls``)."""

    parallel = False

    def file_clips(self, file_index: Any) -> Iterator[np.ndarray]:
        """One clip of each video of one file, in a random order (runs in a tf.data thread)."""
        index = int(file_index)
        videos = [v for v in self.setup.videos if v.file_index == index]
        rng = np.random.default_rng()
        with h5py.File(self.setup.paths[index], "r") as handle:
            for i in rng.permutation(len(videos)):
                clip = draw_clip(rng, videos[int(i)])
                out = np.empty(CLIP_SHAPE, np.uint8)
                produce_direct(handle[clip.video]["frames"], clip, out)
                yield out

    def build(self) -> Any:
        import tensorflow as tf

        spec = tf.TensorSpec(CLIP_SHAPE, tf.uint8)
        files = len(self.setup.paths)
        ds = tf.data.Dataset.range(files).shuffle(files, seed=self.setup.seed)
        ds = ds.repeat(self.setup.epochs)

        def per_file(index: Any) -> Any:
            return tf.data.Dataset.from_generator(
                self.file_clips, args=(index,), output_signature=spec
            )

        if self.parallel:
            ds = ds.interleave(per_file, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
        else:
            ds = ds.interleave(per_file)
        return ds.batch(BATCH_SIZE).prefetch(tf.data.AUTOTUNE)


class ParallelInterleave(Interleave):
    """``interleave(num_parallel_calls=AUTOTUNE, deterministic=False)``."""

    parallel = True


class MapPyFunction(_TfContender):
    """``from_generator`` of indices + ``map(py_function, num_parallel_calls=AUTOTUNE)``."""

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        self.reader = ClipReader(setup.paths)

    def indices(self) -> Iterator[int]:
        """Each epoch: every video index once, shuffled."""
        rng = np.random.default_rng(self.setup.seed)
        epochs = range(self.setup.epochs) if self.setup.epochs is not None else itertools.count()
        for _ in epochs:
            yield from (int(i) for i in rng.permutation(len(self.setup.videos)))

    def load(self, index: Any) -> np.ndarray:
        """The clip of video ``index`` (runs in a tf.data thread, under the GIL but for cv2)."""
        rng = np.random.default_rng()
        return self.reader.clip(draw_clip(rng, self.setup.videos[int(index)]))

    def build(self) -> Any:
        import tensorflow as tf

        ds = tf.data.Dataset.from_generator(
            self.indices, output_signature=tf.TensorSpec((), tf.int64)
        )

        def clip(index: Any) -> Any:
            frames = tf.py_function(self.load, [index], tf.uint8)
            return tf.ensure_shape(frames, CLIP_SHAPE)

        ds = ds.map(clip, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
        return ds.batch(BATCH_SIZE).prefetch(tf.data.AUTOTUNE)

    def close(self) -> None:
        super().close()
        self.reader.close()
