"""All frames in one vlen-uint8 ``jpeg`` dataset; videos cut by ``offsets``; ``labels`` [V]."""

from __future__ import annotations

import h5py

from h5feed.common.errors import DataError
from h5feed.common.layouts import Flat
from h5feed.producer.files.read_limits import DEFAULT_BOUNDS, DatasetBounds
from h5feed.producer.layouts._common import (
    dataset_at,
    read_offsets,
)
from h5feed.producer.layouts.base import OffsetsReader


class FlatReader(OffsetsReader):
    """Video v is frames ``offsets[v] .. offsets[v+1] - 1`` of ``jpeg`` (one encoded image per
    element); its label is ``labels[v]``; its name the number zero-padded to 6 digits
    (``"000012"``). Offsets must run from 0 to the number of frames, strictly increasing (a
    video with no frame is an error naming it)."""

    spec: Flat
    labels_hint = "Flat(labels=None)"

    def __init__(
        self,
        h5: h5py.File,
        path: str,
        spec: Flat,
        root: str | None = None,
        bounds: DatasetBounds = DEFAULT_BOUNDS,
    ) -> None:
        super().__init__(h5, path, spec, root, bounds)
        self.labels_name = spec.labels
        jpeg = dataset_at(h5, spec.jpeg, path, "name it with Flat(jpeg=...)")
        self.frames = self.readable(jpeg, whole=False)
        if self.frames.ndim != 1:
            raise DataError(
                f"{spec.jpeg!r} must be a 1-D dataset of encoded frames, got {self.frames.shape}",
                file=path,
            )
        offsets = self.readable_whole(
            dataset_at(h5, spec.offsets, path, "name it with Flat(offsets=...)")
        )
        self.offsets = read_offsets(offsets, int(self.frames.shape[0]), path)
