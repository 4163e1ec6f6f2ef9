"""What reading a dataset may cost, checked from what the file declares before anything is
read; and the caps a producer's operator sets, which no consumer can raise.

A tiny file can declare anything: a 7,400-byte file held a frame dataset of 2 GiB never
written (read whole: 2,142 MiB), a raw file 89 frames of 4 MP in one gzip chunk (each frame
read inflated the whole 1.07 GB chunk). HDF5 allocates what the file declares, so the bounds
are checked from the declaration (shape, type, chunk shape), once per dataset when a reader
first takes it (:func:`h5feed.producer.files.dataset_checks.check_dataset`), never per frame.

:class:`DatasetBounds` (one job's, derived from its ``max_frame_pixels``):

1. **Chunks.** Reading any element of a chunked dataset inflates its whole chunk, so a chunk
   may hold at most ``max(max_chunk_bytes, one row)`` bytes uncompressed, where one row (the
   element along the first axis, e.g. one raw frame) counts only up to :attr:`max_read_bytes`:
   a chunk of several frames is refused unless it fits ``max_chunk_bytes`` (default
   :data:`DEFAULT_MAX_CHUNK_BYTES`, 64 MiB: 64 times h5py's own chunk target of 1 MiB, and
   two 4K RGB frames).
2. **Whole reads.** A dataset a reader reads whole (a frame of the frame-datasets layout,
   labels, offsets, the pack index) may declare at most :attr:`max_read_bytes`: one encoded
   frame of ``max_frame_pixels`` pixels at 4 bytes a pixel (more than a JPEG or PNG of any
   quality needs) plus 1 MiB of metadata, and never less than ``max_chunk_bytes``;
   ``max_frame_pixels=None`` lifts this bound (not the chunk bound).
3. Rows read one by one (raw frames, vlen frames, CRC32s) are bounded per frame where the
   layout checks them (``max_frame_pixels`` against the raw layout's shape; an encoded
   frame's header), so only their chunks are checked here.

:class:`ProducerLimits` (``h5feed produce --max-frame-pixels --max-clip-pixels
--max-chunk-bytes``): a producer service's own caps. A job's ``max_frame_pixels`` is lowered to
the producer's (a consumer asking for more, or for None, gets the producer's), and a job
whose ``resize`` passes it is refused (each frame is resized whole before its crop); a job whose
clips would hold more than ``max_clip_pixels`` output pixels (``clip_len`` x height x width,
from ``resize``/``crop``, or from the first decoded frame without them) is refused with
:class:`LimitRefused` before a clip is allocated. Local workers of a trainer have none: the
trainer's own options apply.
"""

from __future__ import annotations

import dataclasses
import math

import h5py

from h5feed.common.config import ClipSpec
from h5feed.common.errors import DataError, H5FeedError
from h5feed.common.worker_settings import (
    DEFAULT_MAX_CHUNK_BYTES,
    PRODUCER_MAX_CLIP_PIXELS,
    PRODUCER_MAX_FRAME_PIXELS,
    Data,
)

__all__ = [
    "DEFAULT_BOUNDS",
    "DEFAULT_MAX_CHUNK_BYTES",
    "NO_LIMITS",
    "PRODUCER_MAX_CLIP_PIXELS",
    "PRODUCER_MAX_FRAME_PIXELS",
    "DatasetBounds",
    "LimitRefused",
    "ProducerLimits",
]

# ``h5feed produce``'s defaults (kept in common.config, which its cheap command line reads):
# the consumer's default frame cap (so a consumer asking for ``max_frame_pixels=None`` cannot
# lift it), and 16 frames of 4K UHD per clip (398 MB of RGB output per clip; a consumer asking
# resize=(5000, 5000), clip 16, would need 1.2 GB).
#: Bytes an encoded frame may take per pixel, and room for its metadata (see 2. above).
_ENCODED_BYTES_PER_PIXEL = 4
_METADATA_BYTES = 1 << 20


class LimitRefused(H5FeedError):
    """A job asks for more than the producer's operator allows (``max_clip_pixels``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class DatasetBounds:
    """The bounds a reader checks every dataset against before reading it (module
    docstring, 1-3)."""

    max_frame_pixels: int | None = 64_000_000
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES

    def __post_init__(self) -> None:
        if self.max_chunk_bytes < 1:
            raise ValueError(f"max_chunk_bytes must be >= 1, got {self.max_chunk_bytes!r}")

    @property
    def max_read_bytes(self) -> int | None:
        """The most one whole-dataset read may declare; None: no bound."""
        if self.max_frame_pixels is None:
            return None
        encoded = _ENCODED_BYTES_PER_PIXEL * self.max_frame_pixels + _METADATA_BYTES
        return max(self.max_chunk_bytes, encoded)

    def check(
        self, dataset: h5py.Dataset, file: str, whole: bool, chunks: tuple[int, ...] | None
    ) -> None:
        """Raise DataError naming ``file`` and the dataset when reading it (``whole``: all
        of it; else rows) could cost more than these bounds allow; ``chunks``: its chunk
        shape (None: not chunked), read by the caller from its creation properties."""
        item = dataset.id.get_type().get_size()  # as HDF5 holds one element (vlen: 16 B)
        shape = dataset.id.shape or ()
        limit = self.max_read_bytes
        declared = math.prod(shape) * item
        if whole and limit is not None and declared > limit:
            raise DataError(
                f"dataset {dataset.name!r} declares {_size(declared)} "
                f"({_shape(shape)} x {item} B), more than the {_size(limit)} a dataset read "
                f"whole may hold (from max_frame_pixels={self.max_frame_pixels}): refused "
                "before reading it",
                file=file,
            )
        if chunks is None:
            return
        chunk = math.prod(chunks) * item
        row = math.prod(shape[1:]) * item
        allowed = max(self.max_chunk_bytes, row if limit is None else min(row, limit))
        if chunk > allowed:
            raise DataError(
                f"dataset {dataset.name!r} has chunks of {_size(chunk)} uncompressed "
                f"({_shape(chunks)} x {item} B), more than {_size(allowed)} (the larger of "
                f"max_chunk_bytes={self.max_chunk_bytes} and one row of {_size(row)}): any "
                "read inflates a whole chunk, refused before reading",
                file=file,
            )


#: The bounds of a job with the default ``max_frame_pixels`` and chunk cap.
DEFAULT_BOUNDS = DatasetBounds()


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerLimits:
    """A producer operator's caps (module docstring); None: no cap of the producer's own.
    Crosses to the workers as :class:`h5feed.common.worker_settings.Data`'s fields."""

    max_frame_pixels: int | None = None
    max_clip_pixels: int | None = None
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES

    def __post_init__(self) -> None:
        for name in ("max_frame_pixels", "max_clip_pixels", "max_chunk_bytes"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise ValueError(f"{name} must be an int >= 1 or None, got {value!r}")

    @classmethod
    def of(cls, data: Data) -> ProducerLimits:
        """The caps a worker was started with (its settings' data group)."""
        return cls(data.max_frame_pixels, data.max_clip_pixels, data.max_chunk_bytes)

    def clip_spec(self, spec: ClipSpec) -> ClipSpec:
        """``spec`` with its ``max_frame_pixels`` lowered to the producer's cap; LimitRefused
        when its clips' output size, known from ``resize``/``crop``, passes ``max_clip_pixels``."""
        height, width = spec.frame_shape
        if height is not None and width is not None:
            self.check_clip(spec.clip_len, height, width)
        cap, asked = self.max_frame_pixels, spec.max_frame_pixels
        if cap is not None and spec.resize is not None and math.prod(spec.resize) > cap:
            # Every frame is resized whole before the crop: a small crop of a huge resize
            # would allocate the huge frame (a header asking 40000x40000: 4.5 GB a frame).
            raise LimitRefused(
                f"resize {spec.resize} makes frames of {math.prod(spec.resize)} pixels, more "
                f"than this producer's max_frame_pixels={cap} (`h5feed produce "
                "--max-frame-pixels`): ask for a smaller resize"
            )
        if cap is None or (asked is not None and asked <= cap):
            return spec
        return dataclasses.replace(spec, max_frame_pixels=cap)

    def check_clip(self, clip_len: int, height: int, width: int) -> None:
        """LimitRefused when a clip of ``clip_len`` frames of height x width passes
        ``max_clip_pixels``."""
        pixels = clip_len * height * width
        if self.max_clip_pixels is not None and pixels > self.max_clip_pixels:
            raise LimitRefused(
                f"clips of {clip_len} frames of {width}x{height} hold {pixels} pixels, more "
                f"than this producer's max_clip_pixels={self.max_clip_pixels} (`h5feed produce "
                "--max-clip-pixels`): ask for smaller clips (resize, crop, clip_len)"
            )

    def bounds(self, spec: ClipSpec) -> DatasetBounds:
        """The dataset bounds of a job whose (capped) spec is ``spec``."""
        return DatasetBounds(spec.max_frame_pixels, self.max_chunk_bytes)


#: No cap of a producer's own (the trainer's local workers).
NO_LIMITS = ProducerLimits()


def _size(nbytes: int) -> str:
    return f"{nbytes} bytes ({nbytes / (1 << 20):.1f} MiB)"


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"
