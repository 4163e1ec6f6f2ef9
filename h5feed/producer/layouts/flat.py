"""All frames in one vlen-uint8 ``jpeg`` dataset; videos cut by ``offsets``; ``labels`` [V]."""

from __future__ import annotations

import h5py
import numpy as np

from h5feed.common.errors import DataError
from h5feed.common.layouts import Flat
from h5feed.producer.index_cache import VideoEntry
from h5feed.producer.layouts._common import (
    dataset_at,
    read_labels,
    read_offsets,
    read_rows,
    video_name,
    video_number,
)
from h5feed.producer.layouts.base import LayoutReader


class FlatReader(LayoutReader):
    """Video v is frames ``offsets[v] .. offsets[v+1] - 1`` of ``jpeg`` (one encoded image per
    element); its label is ``labels[v]``; its name the number zero-padded to 6 digits
    (``"000012"``). Offsets must run from 0 to the number of frames, strictly increasing (a
    video with no frame is an error naming it)."""

    spec: Flat

    def __init__(self, h5: h5py.File, path: str, spec: Flat) -> None:
        super().__init__(h5, path, spec)
        self.jpeg = dataset_at(h5, spec.jpeg, path, "name it with Flat(jpeg=...)")
        if self.jpeg.ndim != 1:
            raise DataError(
                f"{spec.jpeg!r} must be a 1-D dataset of encoded frames, got {self.jpeg.shape}",
                file=path,
            )
        offsets = dataset_at(h5, spec.offsets, path, "name it with Flat(offsets=...)")
        self.offsets = read_offsets(offsets, int(self.jpeg.shape[0]), path)

    @property
    def num_videos(self) -> int:
        return len(self.offsets) - 1

    def index(self) -> list[VideoEntry]:
        count = self.num_videos
        labels = read_labels(self.h5, self.spec.labels, count, self.path, "Flat(labels=None)")
        lengths = np.diff(self.offsets)
        return [(video_name(v), int(lengths[v]), int(labels[v])) for v in range(count)]

    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        base = int(self.offsets[video_number(video, self.num_videos, self.path)])
        return read_rows(self.jpeg, [base + i for i in indices])
