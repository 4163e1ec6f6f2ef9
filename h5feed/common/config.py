"""The clip configuration shared by consumer and workers.

:class:`ClipSpec` is a frozen, slotted dataclass that validates on construction and never
changes a value it was given: a bad value raises ``ValueError`` naming the field, before any
process starts. Values that have several spellings (a size as ``n`` or ``[h, w]``) are
normalised by :meth:`ClipSpec.of` before the object is made. ``to_wire``/``from_wire`` turn it
into a plain msgpack-able map for the JOB message. How the files store videos is not part of
the clip: it is a :class:`~h5feed.common.layouts.LayoutSpec`, which travels beside it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final, Literal

import msgpack

from h5feed.common.user_code import import_paths

ClipStart = Literal["random", "center", "first"]
CropMode = Literal["random", "center"]
ShortVideo = Literal["loop", "repeat_last"]

CLIP_STARTS: tuple[str, ...] = ("random", "center", "first")
CROP_MODES: tuple[str, ...] = ("random", "center")
SHORT_VIDEO_POLICIES: tuple[str, ...] = ("loop", "repeat_last")
#: The fields whose value is a (height, width) size, normalised by :meth:`ClipSpec.of`.
_SIZES = ("resize", "crop")


def size_pair(name: str, value: Any) -> tuple[int, int] | None:
    """``value`` as a (height, width) tuple: ``n`` is ``(n, n)``, any pair of ints (a list off
    the wire) a tuple, None stays None. ValueError naming ``name`` for anything else."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    try:
        height, width = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be (height, width) or None, got {value!r}") from None
    return height, width


def _check_size(name: str, value: object) -> None:
    if value is None:
        return
    if not (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise ValueError(
            f"{name} must be a (height, width) tuple of ints or None, got {value!r} "
            "(ClipSpec.of accepts n or [h, w] too)"
        )
    if value[0] <= 0 or value[1] <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")


#: What a clip is, as a version: how frames are decoded, resized, cropped and flipped, and how
#: the plan's per-sample seeds are drawn. Bumped by any change that alters one pixel of a clip
#: cut from the same plan row, so a trainer refuses producers that would cut another clip
#: (a JOB carries it; a producer of protocol 5 cuts clips of semantics 1).
CLIP_SEMANTICS: Final = 1


@dataclasses.dataclass(frozen=True, slots=True)
class ClipSpec:
    """How a clip is cut from a video and preprocessed, identically in every worker.

    Frames are decoded to RGB, resized to ``resize`` (height, width) with bilinear interpolation
    (``cv2.INTER_LINEAR``), then cropped to ``crop`` at the offsets the plan chose, then flipped
    horizontally when the plan says so (only if ``flip`` is on).

    ``reduced_decode`` (off by default) decodes a JPEG straight to 1/2, 1/4 or 1/8 of its
    stored size (libjpeg's DCT scaling, ``cv2.IMREAD_REDUCED_COLOR_*``): the largest of those
    that is still at least ``resize`` in both dimensions; the resize then starts from there.
    Faster, and the pixels differ slightly from a full decode (measured in
    docs/performance/index.md). With
    no ``resize``, or a ``resize`` above half the stored size, it changes nothing.

    ``max_frame_pixels`` (default 64 megapixels: 8K UHD is 33; one decoded frame of 64 MP is
    192 MB) caps a stored frame's height x width. It is read from the frame's header (JPEG
    SOF, PNG IHDR) or, for the raw layout, from the dataset's shape, before anything is
    decoded or read; a frame over it, or an encoded frame of another format (whose size
    cannot be known before decoding), is a DataError naming file, video and frame. None: no
    cap, any format OpenCV decodes.

    ``transform`` is an import path ``"package.module:fn"`` applied per sample after the
    built-in steps, called with ``**transform_args`` (a msgpack-able dict); see
    :mod:`h5feed.producer.worker.transform`.

    Guarantees: the constructor validates and keeps every value as given (it never rewrites a
    field); the field defaults here are the defaults of ``h5feed.dataset()``. Build one from
    user or wire values with :meth:`of` (sizes as ``n`` or ``[h, w]``) or :meth:`from_wire`.
    """

    clip_len: int = 16
    stride: int = 1
    resize: tuple[int, int] | None = None
    crop: tuple[int, int] | None = None
    crop_mode: CropMode = "random"
    flip: bool = False
    short_video: ShortVideo = "loop"
    transform: str | None = None
    transform_args: dict[str, Any] | None = None
    reduced_decode: bool = False
    max_frame_pixels: int | None = 64_000_000

    def __post_init__(self) -> None:
        if not isinstance(self.clip_len, int) or self.clip_len < 1:
            raise ValueError(f"clip_len must be an int >= 1, got {self.clip_len!r}")
        if not isinstance(self.stride, int) or self.stride < 1:
            raise ValueError(f"stride must be an int >= 1, got {self.stride!r}")
        _check_size("resize", self.resize)
        _check_size("crop", self.crop)
        if self.crop_mode not in CROP_MODES:
            raise ValueError(f"crop_mode must be one of {CROP_MODES}, got {self.crop_mode!r}")
        if self.short_video not in SHORT_VIDEO_POLICIES:
            raise ValueError(
                f"short_video must be one of {SHORT_VIDEO_POLICIES}, got {self.short_video!r}"
            )
        if (
            self.resize is not None
            and self.crop is not None
            and (self.crop[0] > self.resize[0] or self.crop[1] > self.resize[1])
        ):
            raise ValueError(f"crop {self.crop} is larger than resize {self.resize}")
        if not isinstance(self.reduced_decode, bool):
            raise ValueError(f"reduced_decode must be True or False, got {self.reduced_decode!r}")
        if self.max_frame_pixels is not None and (
            not isinstance(self.max_frame_pixels, int)
            or isinstance(self.max_frame_pixels, bool)
            or self.max_frame_pixels < 1
        ):
            raise ValueError(
                f"max_frame_pixels must be an int >= 1 or None, got {self.max_frame_pixels!r}"
            )
        self._check_transform()

    @classmethod
    def of(cls, **values: Any) -> ClipSpec:
        """A spec from values as a user or the wire gives them: ``resize``/``crop`` may be
        ``n`` (square) or any pair (a list); they are made ``(height, width)`` tuples before
        the spec is constructed (and validated). TypeError for an unknown field."""
        sizes = {name: size_pair(name, values[name]) for name in _SIZES if name in values}
        return cls(**{**values, **sizes})

    def _check_transform(self) -> None:
        if self.transform is not None:
            import_paths.check_option("transform", self.transform, "function")
        if self.transform_args is None:
            return
        if self.transform is None:
            raise ValueError("transform_args given without a transform")
        if not isinstance(self.transform_args, dict) or not all(
            isinstance(k, str) for k in self.transform_args
        ):
            raise ValueError("transform_args must be a dict with str keys")
        try:  # it travels in the JOB message: plain msgpack values only, never pickled
            msgpack.packb(self.transform_args, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"transform_args must be msgpack-able values: {exc}") from exc

    @property
    def span(self) -> int:
        """Frames a clip covers in the video: ``(clip_len - 1) * stride + 1``."""
        return (self.clip_len - 1) * self.stride + 1

    @property
    def frame_shape(self) -> tuple[int | None, int | None]:
        """(height, width) of output frames; None where it depends on the stored frames."""
        if self.crop is not None:
            return self.crop
        if self.resize is not None:
            return self.resize
        return (None, None)

    def to_wire(self) -> dict[str, Any]:
        """A msgpack-able map of every field (sizes as lists); :meth:`from_wire` inverts it."""
        return {
            "clip_len": self.clip_len,
            "stride": self.stride,
            "resize": list(self.resize) if self.resize else None,
            "crop": list(self.crop) if self.crop else None,
            "crop_mode": self.crop_mode,
            "flip": self.flip,
            "short_video": self.short_video,
            "transform": self.transform,
            "transform_args": self.transform_args,
            "reduced_decode": self.reduced_decode,
            "max_frame_pixels": self.max_frame_pixels,
        }

    @classmethod
    def from_wire(cls, fields: dict[str, Any]) -> ClipSpec:
        """The spec a :meth:`to_wire` map describes; ValueError for an unknown field (a JOB
        of an older protocol, whose clip still held the layout, is refused here)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(fields) - names
        if unknown:
            raise ValueError(f"unknown clip fields {sorted(unknown)}")
        return cls.of(**fields)


def crop_offset(size: int, crop: int, uniform: float, mode: str) -> int:
    """Offset of a ``crop``-long window in ``size``: from ``uniform`` in [0, 1), or centred.
    The workers crop there; the lineage record names the same offset (one function)."""
    room = size - crop
    if mode == "center":
        return room // 2
    return min(int(uniform * (room + 1)), room)


def clip_frame_indices(
    start: int, n_frames: int, clip_len: int, stride: int, short_video: str
) -> list[int]:
    """Indices of the frames of the clip that starts at ``start`` in a video of ``n_frames``.

    A clip covers ``clip_len`` frames, ``stride`` apart. When the video is too short for that
    (fewer than ``(clip_len - 1) * stride + 1`` frames), ``short_video`` decides:

    * ``"loop"``: indices wrap around to the start of the video (``i % n_frames``);
    * ``"repeat_last"``: indices past the end repeat the last frame.

    Raises ``ValueError`` for an empty video or a start outside it.
    """
    if n_frames < 1:
        raise ValueError("a video with no frames has no clips")
    if not 0 <= start < n_frames:
        raise ValueError(f"clip start {start} outside a video of {n_frames} frames")
    raw = [start + j * stride for j in range(clip_len)]
    if raw[-1] < n_frames:
        return raw
    if short_video == "loop":
        return [i % n_frames for i in raw]
    return [min(i, n_frames - 1) for i in raw]


def clip_start(
    n_frames: int, span: int, mode: str, clip_index: int, clips_per_video: int, uniform: float
) -> int:
    """Where clip ``clip_index`` of ``clips_per_video`` starts in a video of ``n_frames``.

    ``room = n_frames - span`` is how far a full clip can move. With ``room < 0`` (a short
    video) every clip starts at frame 0 and ``short_video`` fills it. Otherwise:

    * ``"random"``: ``floor(uniform * (room + 1))`` — uniform over all valid starts;
    * ``"center"``: clips evenly spaced, clip k centred on ``(k + 0.5) / K`` of the room,
      so one clip per video sits exactly in the middle;
    * ``"first"``: clips evenly spaced from frame 0, clip k at ``k / K`` of the room.
    """
    room = n_frames - span
    if room <= 0:
        return 0
    if mode == "random":
        return min(int(uniform * (room + 1)), room)
    if mode == "center":
        return int((clip_index + 0.5) * room / clips_per_video + 0.5)
    if mode == "first":
        return int(clip_index * room / clips_per_video)
    raise ValueError(f"clip_start must be one of {CLIP_STARTS}, got {mode!r}")
