"""PyTorch ``DataLoader`` with worker processes, as its documentation recommends.

A map-style ``Dataset`` of one clip per video (h5py files opened lazily inside each worker,
never in the parent), ``DataLoader(batch_size=8, shuffle=True, num_workers=N,
persistent_workers=True, pin_memory=False)`` (pinning only helps copies to a GPU), the default
collate, the default ``prefetch_factor``. Each epoch is one pass of the loader; endless runs
start the next pass at once (the workers persist).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from h5feed.bench.contender import Contender, Setup
from h5feed.bench.workload import ClipReader, draw_clip


class ClipDataset:
    """Item ``i``: a random clip of video ``i`` (frames [16, 112, 112, 3] uint8, label)."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.reader = ClipReader(setup.paths)
        self._rng: np.random.Generator | None = None

    def __len__(self) -> int:
        return len(self.setup.videos)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import torch

        if self._rng is None:  # one stream per worker process, from fresh entropy
            self._rng = np.random.default_rng()
        clip = draw_clip(self._rng, self.setup.videos[index])
        return torch.from_numpy(self.reader.clip(clip)), 0


class TorchLoader(Contender):
    """See the module docstring."""

    _iterator: Iterator[Any] | None = None

    def start(self) -> None:
        import torch
        import torch.utils.data

        class _Dataset(ClipDataset, torch.utils.data.Dataset):  # type: ignore[misc,type-arg]
            pass

        self.loader = torch.utils.data.DataLoader(
            _Dataset(self.setup),
            batch_size=8,
            shuffle=True,
            num_workers=self.setup.workers,
            persistent_workers=True,
            pin_memory=False,
            generator=torch.Generator().manual_seed(self.setup.seed),
        )
        self.epoch = 0
        self._iterator = iter(self.loader)

    def next_frames(self) -> Any:
        if self._iterator is None:
            raise RuntimeError("next_frames() before start()")
        while True:
            try:
                return next(self._iterator)[0]
            except StopIteration:
                self.epoch += 1
                if self.setup.epochs is not None and self.epoch >= self.setup.epochs:
                    raise
                self._iterator = iter(self.loader)

    def close(self) -> None:
        self._iterator = None
        # Persistent workers stop when the loader and its iterator are collected.
        self.__dict__.pop("loader", None)
