"""Users' loaders for tests/unit/common/test_trainer_main.py: a map dataset of channels-first clips
whose
T varies (``ragged=``), and a Keras-style Sequence of whole batches (cardinality)."""

from __future__ import annotations

import numpy as np


class ChannelsFirst:
    """``{"clip": float32 [2, T, 3], "i": i}`` with T = 1 + i % 3: PyTorch's [C, T, ...]."""

    def __init__(self, n: int = 6) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, object]:
        return {"clip": np.full((2, 1 + i % 3, 3), i, np.float32), "i": i}


class TwoVarying:
    """A field that varies in two dimensions: ragged= cannot take it."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> np.ndarray:
        return np.zeros((1 + i, 2 + i), np.float32)
