"""A keras PyDataset that the tests run inside h5feed's workers (the user's module imports
keras; h5feed's worker never does)."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np


class Batches(keras.utils.PyDataset):
    """``n_batches`` batches of ``batch`` rows; row r of batch b has x = b * batch + r, the
    last batch is partial."""

    def __init__(self, n_batches: int, batch: int, rows: int) -> None:
        super().__init__()
        self.n_batches, self.batch, self.rows = n_batches, batch, rows
        self.epochs_ended = 0

    def __len__(self) -> int:
        return self.n_batches

    def __getitem__(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        start = b * self.batch
        stop = min(start + self.batch, self.rows)
        x = np.arange(start, stop, dtype=np.float32)[:, None].repeat(2, axis=1)
        y = np.full(stop - start, self.epochs_ended, np.int64)  # shows on_epoch_end calls
        return x, y

    def on_epoch_end(self) -> None:
        self.epochs_ended += 1


class ShuffledRows(keras.utils.PyDataset):
    """Found in the wild: ``np.random.shuffle`` of the row order, unseeded, in ``__init__``
    and ``on_epoch_end``; batch ``b`` is rows ``index[b*B:(b+1)*B]`` (x = y = the row)."""

    def __init__(self, rows: int, batch: int) -> None:
        super().__init__()
        self.rows, self.batch = rows, batch
        self.index = np.arange(rows)
        np.random.shuffle(self.index)

    def __len__(self) -> int:
        return -(-self.rows // self.batch)

    def __getitem__(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        rows = self.index[b * self.batch : (b + 1) * self.batch]
        return rows.astype(np.float32)[:, None], rows.astype(np.int64)

    def on_epoch_end(self) -> None:
        np.random.shuffle(self.index)
