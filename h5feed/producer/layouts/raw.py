"""Decoded pixels: ``images`` [N, H, W, C] (uint8, or float with a declared scale),
``labels``, optional video ``offsets``."""

from __future__ import annotations

import h5py
import numpy as np

from h5feed.common.errors import DataError
from h5feed.common.layouts import Raw
from h5feed.producer.files.read_limits import DEFAULT_BOUNDS, DatasetBounds
from h5feed.producer.layouts import pixels
from h5feed.producer.layouts._common import (
    dataset_at,
    read_offsets,
)
from h5feed.producer.layouts.base import OffsetsReader


class RawReader(OffsetsReader):
    """Rows of ``images`` are frames, already decoded: no JPEG, no ``cv2.imdecode``.

    ``images`` is uint8 [N, H, W, 3] (stored in ``channels`` order, ``"rgb"``: as stored, no
    BGR swap; ``"bgr"``: reversed) or [N, H, W, 1] / [N, H, W] (grayscale: expanded to 3 equal
    channels, as a grayscale JPEG decodes, so every layout yields [..., 3] RGB). Float images
    need ``scale`` (see :mod:`~h5feed.producer.layouts.pixels`). Videos: with an ``offsets``
    dataset in the file, video v is rows ``offsets[v] .. offsets[v+1] - 1`` and ``labels`` is
    [V]; without one (``offsets=None``, or no such dataset), each row is its own one-frame
    video and ``labels`` is [N]. Video names: the number, zero-padded to 6 digits (``"000012"``).
    """

    encoded = False
    spec: Raw
    labels_hint = "Raw(labels=None)"

    def __init__(
        self,
        h5: h5py.File,
        path: str,
        spec: Raw,
        root: str | None = None,
        bounds: DatasetBounds = DEFAULT_BOUNDS,
    ) -> None:
        super().__init__(h5, path, spec, root, bounds)
        self.labels_name = spec.labels
        images = dataset_at(h5, spec.images, path, "name it with Raw(images=...)")
        self.frames = self.readable(images, whole=False)
        shape = self.frames.shape
        pixels.check_dataset(self.frames, 1, spec.scale, "h5feed.layouts.Raw", path)
        rows = int(shape[0])
        if spec.offsets is not None and spec.offsets in h5:
            offsets = dataset_at(h5, spec.offsets, path, "or Raw(offsets=None)")
            offsets = self.readable_whole(offsets)
            self.offsets = read_offsets(offsets, rows, path)
        else:
            self.offsets = np.arange(rows + 1, dtype=np.int64)
        if rows == 0:
            raise DataError(f"{spec.images!r} holds no image", file=path)

    def read_frames(self, video: str, indices: list[int]) -> list[np.ndarray]:
        stored = super().read_frames(video, indices)
        if self.spec.scale is None and self.spec.channels == "rgb":
            return stored  # uint8 RGB as stored: no copy
        return pixels.to_rgb(
            stored, self.spec.scale, self.spec.channels, (self.path, video, indices)
        )

    def pixel_size(self) -> tuple[int, int]:
        return int(self.frames.shape[1]), int(self.frames.shape[2])
