"""keras ``PyDataset`` with multiprocessing workers, read the way ``model.fit`` reads it.

A ``PyDataset`` returns whole batches (keras's documented contract); keras runs
``__getitem__`` in ``workers`` processes (``use_multiprocessing=True``: a forked pool). The
benchmark reads it through ``PyDatasetAdapter(...).get_tf_dataset()``, the adapter
``model.fit`` uses on the TensorFlow backend: iterating a ``PyDataset`` by hand would run no
worker at all (keras's documentation says so). For speed runs the dataset is endless
(``num_batches`` None, keras's way to avoid restarting the pool each epoch); the one-epoch
check uses a finite one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from h5feed.bench.contender import Contender, Setup
from h5feed.bench.workload import BATCH_SIZE, CLIP_SHAPE, ClipReader, draw_clip


def _make_dataset_class() -> type:
    """The PyDataset subclass (built lazily: keras is imported only when a run needs it)."""
    import keras

    class ClipBatches(keras.utils.PyDataset):  # type: ignore[misc, name-defined]
        """Batch ``i`` of an endless sequence of epochs, each a permutation of the videos."""

        def __init__(self, setup: Setup, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.setup = setup
            self.reader = ClipReader(setup.paths)
            self.per_epoch = math.ceil(len(setup.videos) / BATCH_SIZE)

        def __len__(self) -> int:
            return self.per_epoch * (self.setup.epochs or 1)

        @property
        def num_batches(self) -> int | None:
            return None if self.setup.epochs is None else len(self)

        def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
            epoch, batch = divmod(int(index), self.per_epoch)
            order = np.random.default_rng([self.setup.seed, epoch]).permutation(
                len(self.setup.videos)
            )
            chosen = order[batch * BATCH_SIZE : (batch + 1) * BATCH_SIZE]
            rng = np.random.default_rng([self.setup.seed, epoch, batch])
            frames = np.empty((len(chosen), *CLIP_SHAPE), np.uint8)
            labels = np.zeros(len(chosen), np.int64)
            for row, video in enumerate(chosen):
                self.reader.clip(draw_clip(rng, self.setup.videos[int(video)]), frames[row])
            return frames, labels

    return ClipBatches


class KerasPyDataset(Contender):
    """See the module docstring."""

    _iterator: Iterator[Any] | None = None

    def start(self) -> None:
        from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

        dataset = _make_dataset_class()(
            self.setup, workers=self.setup.workers, use_multiprocessing=True
        )
        self.adapter = PyDatasetAdapter(dataset, shuffle=False)
        self._iterator = iter(self.adapter.get_tf_dataset())

    def next_frames(self) -> Any:
        if self._iterator is None:
            raise RuntimeError("next_frames() before start()")
        return next(self._iterator)[0]

    def close(self) -> None:
        self._iterator = None
        enqueuer = getattr(getattr(self, "adapter", None), "enqueuer", None)
        if enqueuer is not None and enqueuer.is_running():
            enqueuer.stop()
