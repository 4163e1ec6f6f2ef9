"""Stored pixels as the clips take them: uint8 RGB [H, W, 3] (or one gray channel).

Shared by the layouts that store decoded frames (raw, video): the dataset's dtype and shape
are checked once, when the file is opened; each frame read is converted on its own.

Guarantees: uint8 pixels are passed through as stored (``channels="bgr"`` reversed to RGB);
float pixels (float16/32/64) need a declared ``scale`` and become ``rint(value x scale)``:
never guessed from the values. A scaled value outside 0..255 (beyond rounding) or not finite
raises DataError naming the file, video and frame, saying the declared scale may be wrong:
such a frame is never clipped silently. ``scale`` on uint8 pixels is refused (it would be
ignored).
"""

from __future__ import annotations

import h5py
import numpy as np

from h5feed.common.errors import DataError

#: Float dtypes whose pixels a declared scale converts.
_FLOAT_KINDS = "f"


def check_dataset(
    dataset: h5py.Dataset, first_dims: int, scale: float | None, hint: str, path: str
) -> None:
    """``dataset`` holds pixels: ``first_dims`` leading axes (frames), then [H, W] or
    [H, W, C] with C = 1 or 3, of uint8 (``scale`` None) or float (``scale`` given).
    DataError naming the file and what to pass (``hint``, e.g. ``Raw(scale=...)``) else."""
    shape, dtype = dataset.shape, dataset.dtype
    ndim = len(shape) - first_dims
    if ndim not in (2, 3) or (ndim == 3 and shape[-1] not in (1, 3)):
        raise DataError(
            f"{dataset.name!r} must be pixels [{'N, ' * first_dims}H, W, C] with C = 1 or 3 "
            f"(or [{'N, ' * first_dims}H, W]), got {dtype} {shape}",
            file=path,
        )
    if dtype == np.uint8:
        if scale is not None:
            raise DataError(
                f"{dataset.name!r} is uint8: its pixels are taken as stored; scale={scale!r} "
                f"applies to float images only (leave it None)",
                file=path,
            )
        return
    if dtype.kind not in _FLOAT_KINDS:
        raise DataError(
            f"{dataset.name!r} must be uint8 or float pixels, got {dtype} {shape}", file=path
        )
    if scale is None:
        raise DataError(
            f"{dataset.name!r} holds {dtype} pixels: declare their scale (pixel = value x "
            f"scale), e.g. {hint}(scale=255.0) for values in [0, 1] or scale=1.0 for [0, 255]; "
            "h5feed never guesses it",
            file=path,
        )


def to_rgb(
    frames: list[np.ndarray],
    scale: float | None,
    channels: str,
    where: tuple[str, str, list[int]],
) -> list[np.ndarray]:
    """``frames`` (as read) as uint8, in RGB order; ``where`` = (file, video, frame
    indices) for the error of a value the scale does not bring into 0..255."""
    out = []
    for position, frame in enumerate(frames):
        if scale is not None:
            scaled = np.rint(np.asarray(frame, np.float64) * scale)
            low, high = (float(scaled.min()), float(scaled.max())) if scaled.size else (0, 0)
            if not (np.isfinite(low) and np.isfinite(high) and low >= 0 and high <= 255):
                path, video, indices = where
                raise DataError(
                    f"float pixels times scale={scale} run from {low} to {high}, outside "
                    "0..255 (or not finite): is the declared scale right?",
                    file=path,
                    video=video,
                    frame=indices[position],
                )
            frame = scaled.astype(np.uint8)
        if channels == "bgr" and frame.ndim == 3 and frame.shape[2] == 3:
            frame = np.ascontiguousarray(frame[:, :, ::-1])
        out.append(frame)
    return out
