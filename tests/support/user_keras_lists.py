"""Seed-era Keras code, as users wrote it before h5feed: a ``keras.utils.Sequence`` whose
labels are Python lists of lists of ints (one-hot rows parsed from a CSV), two heads. The class
is the classic one, unchanged; ``from_csv`` is the factory the tests name
(``source="user_keras_lists:from_csv"``). Nothing here imports h5feed."""

from __future__ import annotations

import csv
import io
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np


class CSVSequence(keras.utils.Sequence):
    def __init__(self, x_set, wlabels, glabels, batch_size):  # type: ignore[no-untyped-def]
        self.x, self.wlabels, self.glabels = x_set, wlabels, glabels
        self.batch_size = batch_size

    def __len__(self):  # type: ignore[no-untyped-def]
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        B = self.batch_size
        batch_x = self.x[i * B : (i + 1) * B]
        return batch_x, [self.wlabels[i * B : (i + 1) * B], self.glabels[i * B : (i + 1) * B]]


def csv_text(rows: int, wide: int, narrow: int) -> str:
    """A CSV of ``rows`` rows: 5 features, a class of ``wide`` and one of ``narrow``."""
    rng = np.random.default_rng(7)
    out = io.StringIO()
    writer = csv.writer(out)
    for r in range(rows):
        features = [r, *np.round(rng.normal(size=4), 3)]
        writer.writerow([*features, r % wide, (r // 2) % narrow])
    return out.getvalue()


def from_csv(rows: int, batch: int, wide: int = 4, narrow: int = 3) -> CSVSequence:
    """The Sequence over :func:`csv_text`, parsed as the seed code did: x a float32 array,
    each label a Python list of one-hot rows (lists of ints)."""
    x, wlabels, glabels = [], [], []
    for line in csv.reader(io.StringIO(csv_text(rows, wide, narrow))):
        x.append([float(v) for v in line[:5]])
        w, g = int(line[5]), int(line[6])
        wlabels.append([int(k == w) for k in range(wide)])
        glabels.append([int(k == g) for k in range(narrow)])
    return CSVSequence(np.array(x, np.float32), wlabels, glabels, batch)
