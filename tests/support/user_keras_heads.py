"""A keras PyDataset for a two-headed model, as in Keras' multi-output examples: item ``b``
is ``(x, [y_a, y_b])`` with labels of different widths (4 and 3). The tests run it inside
h5feed's workers (``source="user_keras_heads:TwoHeads"``); nothing here imports h5feed."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np


class TwoHeads(keras.utils.PyDataset):
    """``n_batches`` batches of ``batch`` rows (the last one ``last`` rows if given):
    x float32 [rows, 5]; y_a = 2 * x[:, :4] float32 [rows, 4]; y_b = x[:, 2:] - 1 float32
    [rows, 3]. Row r of batch b has x[:, 0] = b * 100 + r, so a batch names itself. Batch
    ``one_label`` (if given) has only y_a: a structure that differs from the others."""

    def __init__(
        self, n_batches: int, batch: int, last: int | None = None, one_label: int | None = None
    ) -> None:
        super().__init__()
        self.n_batches, self.batch, self.last, self.one_label = n_batches, batch, last, one_label

    def __len__(self) -> int:
        return self.n_batches

    def __getitem__(self, b: int) -> tuple[np.ndarray, list[np.ndarray]]:
        rows = self.last if self.last is not None and b == self.n_batches - 1 else self.batch
        x = np.random.default_rng(b).normal(size=(rows, 5)).astype(np.float32) / 10
        x[:, 0] = b * 100 + np.arange(rows)
        labels = [2 * x[:, :4], x[:, 2:] - 1]
        return x, labels[:1] if b == self.one_label else labels
