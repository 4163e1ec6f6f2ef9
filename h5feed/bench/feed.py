"""h5feed itself with N local workers and default settings: ``h5feed.dataset(...)`` (the
trainer path, TensorFlow) and ``h5feed.batches(...)`` (NumPy batches, for trainers without
TensorFlow, e.g. PyTorch)."""

from __future__ import annotations

from typing import Any

from h5feed.bench.contender import DictIterator
from h5feed.bench.workload import BATCH_SIZE, CLIP_LEN, CROP, RESIZE


class H5Feed(DictIterator):
    """The trainer path: ``iter(h5feed.dataset(...))`` and ``next()``, as ``model.fit`` does.
    Only the workload's arguments, ``workers`` and ``epochs`` are given (and the index cache
    directory, which only shortens start-up)."""

    def start(self) -> None:
        import h5feed

        self._iterator = iter(h5feed.dataset(list(self.setup.paths), **self.arguments()))

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of ``h5feed.dataset`` / ``h5feed.batches``."""
        return {
            "clip_len": CLIP_LEN,
            "resize": RESIZE,
            "crop": CROP,
            "flip": True,
            "batch_size": BATCH_SIZE,
            "shuffle": True,
            "seed": self.setup.seed,
            "epochs": self.setup.epochs,
            "workers": self.setup.workers,
            "index_cache": self.setup.cache_dir,
        }


class H5FeedNumPy(H5Feed):
    """The same through ``h5feed.batches(...)``: NumPy batches, no TensorFlow."""

    def start(self) -> None:
        import h5feed

        self._iterator = iter(h5feed.batches(list(self.setup.paths), **self.arguments()))
