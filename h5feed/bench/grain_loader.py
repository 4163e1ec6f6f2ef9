"""Grain with multiprocess prefetch, as its documentation recommends.

``grain.MapDataset.source(videos).shuffle(seed).repeat(epochs)`` then ``random_map`` (the clip:
random start, crop and flip from Grain's per-element generator; h5py opened lazily inside
each worker), ``batch(8)``, ``to_iter_dataset()`` and ``mp_prefetch(MultiprocessingOptions(
num_workers=N))``: the workers each produce a slice of the batches; shuffling before
``repeat`` gives every epoch its own order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from h5feed.bench.contender import DictIterator, Setup
from h5feed.bench.workload import ClipReader, VideoRef, draw_clip


class LoadClip:
    """``random_map`` transform: a video to its random clip (frames, label)."""

    def __init__(self, setup: Setup) -> None:
        self.reader = ClipReader(setup.paths)

    def __call__(self, video: VideoRef, rng: np.random.Generator) -> dict[str, Any]:
        return {"frames": self.reader.clip(draw_clip(rng, video)), "label": 0}


class GrainLoader(DictIterator):
    """See the module docstring."""

    def start(self) -> None:
        import grain

        ds = grain.MapDataset.source(list(self.setup.videos)).shuffle(seed=self.setup.seed)
        ds = ds.repeat(self.setup.epochs)
        ds = ds.random_map(LoadClip(self.setup), seed=self.setup.seed).batch(8)
        prefetched = ds.to_iter_dataset().mp_prefetch(
            grain.MultiprocessingOptions(num_workers=self.setup.workers)
        )
        self._iterator = iter(prefetched)
