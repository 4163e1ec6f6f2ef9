"""Descriptions of the HDF5 layouts h5feed reads: which layout, and the names in it.

A layout description is a frozen dataclass of plain names, so it travels to the workers as a
msgpack map in the JOB's ``layout``, beside the clip spec (``to_wire``/``from_wire``, strict:
an unknown kind or field, or a name that is not a string, raises ``ValueError``). The readers
themselves live in ``h5feed.producer.layouts`` (this module imports no h5py).

Layouts (names are each class's fields, defaults shown):

* :class:`Groups` (``"groups"``, the default layout): one top-level group per video, holding a
  1-D dataset ``frames`` of variable-length uint8 (one encoded JPEG per element) and an integer
  attribute ``label`` on the group.
* :class:`FrameDatasets` (``"frame_datasets"``): one top-level group per video, holding one
  1-D uint8 dataset per frame (the JPEG's bytes); frames are ordered by *natural* sort of their
  names (``frame_2`` before ``frame_10``); the integer attribute ``label`` on the group.
* :class:`Raw` (``"raw"``): decoded pixels, ``images`` uint8 [N, H, W, C] (C = 3, or
  C = 1, grayscale) and ``labels`` [N] integer. Without ``offsets`` (or when the file has no
  such dataset), each row is a one-frame video; with it, ``offsets`` int [V+1] groups rows
  into videos as in :class:`Flat` and ``labels`` is [V]. Float images (float16/32/64) need
  a declared ``scale`` (pixel = value x scale, e.g. 255.0 for values in [0, 1]; never
  guessed); ``channels`` is the stored order, ``"rgb"`` or ``"bgr"``.
* :class:`Video` (``"video"``): one video per file, the root dataset ``frames`` (default
  ``video``): variable-length uint8 [T] (one encoded JPEG per element), or pixels [T, H, W, C]
  (uint8, or float with ``scale``; ``channels`` as in :class:`Raw`). Its label: ``label=
  "directory"`` (default) the file's parent directory, numbered by its place in ``classes``
  (given, or the sorted directory names of the dataset's files: :func:`classes_of`),
  decided by the trainer from the file list before any worker starts; a mapping of file
  names (without suffix) to labels (ints, or class names numbered by ``classes``), decided
  the same way; another name: an integer attribute of the dataset (or else of the file);
  None: -1.
* :class:`Blobs` (``"blobs"``): fixed-length rows of encoded frames, ``frames`` [V, T] of
  opaque blobs (``|V<n>``: each a JPEG padded with zero bytes to n), ``labels`` [V]; a
  video's frame count is ``lengths[v]`` when the file has a ``lengths`` dataset, else its
  leading non-empty (not all-zero) blobs.
* :class:`Flat` (``"flat"``): ``jpeg`` variable-length uint8 [F] holding every frame of every
  video, ``offsets`` int [V+1]: video v is frames ``offsets[v] .. offsets[v+1] - 1``;
  ``labels`` [V] integer.

In :class:`Raw`, :class:`Flat` and :class:`Blobs`, video names are the video's number,
zero-padded to at least 6 digits (``"000012"``). A label name of ``None`` means the data has no
labels: every label is -1. In :class:`Video` the video's name is the file's name without its suffix.
:class:`Auto` (``"auto"``, the default of ``h5feed.dataset``) recognises each file's layout
with the default names (``frames``/``label`` of the groups layouts come from ``frames_key`` /
``label_key``); it never picks :class:`Video` or :class:`Blobs` (their labels and padding are
the user's to state), nor float images (their scale): its error suggests the layout= to pass.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

LAYOUT_NAMES: tuple[str, ...] = (
    "auto", "groups", "frame_datasets", "raw", "flat", "video", "blobs"
)  # fmt: skip
#: The stored channel orders of pixel layouts (``channels=``): frames come out RGB either way.
CHANNEL_ORDERS: tuple[str, ...] = ("rgb", "bgr")
#: :class:`Video`'s ``label`` that means "the file's parent directory".
DIRECTORY = "directory"


def _check_name(layout: str, field: str, value: Any, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or not value:
        kind = "a non-empty name or None" if optional else "a non-empty name"
        raise ValueError(f"layout {layout!r}: {field} must be {kind}, got {value!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class LayoutSpec:
    """Base of every layout description (see the module docstring)."""

    kind: ClassVar[str] = ""
    _optional: ClassVar[frozenset[str]] = frozenset()
    #: Fields that are not dataset names (checked by :meth:`_check_values`).
    _values: ClassVar[frozenset[str]] = frozenset()

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if field.name in self._values:
                continue
            optional = field.name in self._optional
            _check_name(self.kind, field.name, getattr(self, field.name), optional)
        self._check_values()

    def _check_values(self) -> None:
        """ValueError for a bad value of a field in ``_values`` (none here)."""

    def to_wire(self) -> dict[str, Any]:
        """A msgpack-able map: ``{"kind": ..., <name>: <value>, ...}``."""
        return {"kind": self.kind, **dataclasses.asdict(self)}

    def describe(self) -> str:
        """How to write this layout in Python, e.g. ``Flat(jpeg='jpeg', ...)``."""
        args = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))
        return f"h5feed.layouts.{type(self).__name__}({args})"


@dataclasses.dataclass(frozen=True, slots=True)
class Groups(LayoutSpec):
    """One group per video with a vlen-uint8 ``frames`` dataset and a ``label`` attribute."""

    kind: ClassVar[str] = "groups"
    _optional: ClassVar[frozenset[str]] = frozenset({"label"})
    frames: str = "frames"
    label: str | None = "label"


#: The root attribute giving the version of the format ``h5feed pack`` writes (docs/data/pack.md,
#: "From video files: h5feed pack"). Version 2 adds :data:`CRC_DATASET` beside every video's frames.
PACK_VERSION_ATTR = "h5feed_pack_version"
PACK_VERSION = 2
#: A dataset beside a video's ``frames`` in the groups layout: uint32 [frames], the
#: ``zlib.crc32`` of each frame's stored (encoded) bytes. Readers verify it when present.
CRC_DATASET = "crc32"


@dataclasses.dataclass(frozen=True, slots=True)
class FrameDatasets(LayoutSpec):
    """One group per video, one 1-D uint8 JPEG dataset per frame (natural name order)."""

    kind: ClassVar[str] = "frame_datasets"
    _optional: ClassVar[frozenset[str]] = frozenset({"label"})
    label: str | None = "label"


def _check_pixels(layout: str, scale: Any, channels: Any) -> None:
    """``scale``: None or a finite number > 0; ``channels``: one of :data:`CHANNEL_ORDERS`."""
    if scale is not None and (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not math.isfinite(scale)
        or scale <= 0
    ):
        raise ValueError(
            f"layout {layout!r}: scale must be None or a number > 0 (pixel = stored value x "
            f"scale: 255.0 for values in [0, 1], 1.0 for [0, 255]), got {scale!r}"
        )
    if channels not in CHANNEL_ORDERS:
        raise ValueError(
            f"layout {layout!r}: channels must be one of {CHANNEL_ORDERS} (the stored order), "
            f"got {channels!r}"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Raw(LayoutSpec):
    """Decoded pixels ``images`` [N, H, W, C], ``labels``, optional video ``offsets``; float
    pixels times ``scale``; stored in ``channels`` order."""

    kind: ClassVar[str] = "raw"
    _optional: ClassVar[frozenset[str]] = frozenset({"labels", "offsets"})
    _values: ClassVar[frozenset[str]] = frozenset({"scale", "channels"})
    images: str = "images"
    labels: str | None = "labels"
    offsets: str | None = "video_offsets"
    scale: float | None = None
    channels: str = "rgb"

    def _check_values(self) -> None:
        _check_pixels(self.kind, self.scale, self.channels)


@dataclasses.dataclass(frozen=True, slots=True)
class Video(LayoutSpec):
    """One video per file: the root dataset ``frames`` (encoded JPEGs or pixels), labelled
    by its parent directory among ``classes``, by an attribute, by a mapping of file names
    to labels, or not at all (None)."""

    kind: ClassVar[str] = "video"
    _values: ClassVar[frozenset[str]] = frozenset({"label", "classes", "scale", "channels"})
    frames: str = "video"
    #: "directory", an attribute's name, a mapping {file name without suffix: label (an int,
    #: or a class name among ``classes``)}, or None.
    label: str | Mapping[str, int | str] | None = DIRECTORY
    classes: tuple[str, ...] | None = None
    scale: float | None = None
    channels: str = "rgb"

    def _check_values(self) -> None:
        _check_pixels(self.kind, self.scale, self.channels)
        label = self.label
        if isinstance(label, Mapping):
            if not all(
                isinstance(k, str)
                and ((isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, str))
                for k, v in label.items()
            ):
                raise ValueError(
                    "layout 'video': a label mapping maps file names (without suffix) to an "
                    "int or a class name"
                )
        elif label is not None and (not isinstance(label, str) or not label):
            raise ValueError(
                f"layout 'video': label must be {DIRECTORY!r}, an attribute's name, a mapping "
                f"of file names to labels, or None, got {label!r:.200}"
            )
        if self.classes is None:
            return
        if isinstance(self.classes, list):  # from the wire (msgpack arrays are lists)
            object.__setattr__(self, "classes", tuple(self.classes))
        classes = self.classes
        if (
            not isinstance(classes, tuple)
            or not classes
            or not all(isinstance(c, str) and c for c in classes)
            or len(set(classes)) != len(classes)
        ):
            raise ValueError(
                f"layout 'video': classes must be distinct non-empty names (label i is "
                f"classes[i]), got {classes!r:.200}"
            )
        if label != DIRECTORY and not isinstance(label, Mapping):
            raise ValueError(
                f"layout 'video': classes number the parent directories (label="
                f"{DIRECTORY!r}) or a mapping's class names; with label={label!r} leave "
                "classes None"
            )

    def class_of(self, path: str) -> str:
        """The class of the file at ``path``: its parent directory's name."""
        return os.path.basename(os.path.dirname(os.path.normpath(path)))


def classes_of(files: Iterable[str]) -> tuple[str, ...]:
    """The classes ``Video(label="directory")`` numbers when ``classes`` is not given: the
    sorted distinct parent-directory names of ``files`` (paths as ``h5feed.dataset`` lists
    them; ``h5feed.layouts.directory_classes`` takes what ``dataset()`` takes)."""
    return tuple(sorted({Video().class_of(os.fspath(f)) for f in files}))


@dataclasses.dataclass(frozen=True, slots=True)
class Blobs(LayoutSpec):
    """Fixed-length rows of opaque encoded frames ``frames`` [V, T] (``|V<n>``, zero-padded),
    ``labels`` [V], optional per-video frame counts ``lengths`` [V]."""

    kind: ClassVar[str] = "blobs"
    _optional: ClassVar[frozenset[str]] = frozenset({"labels", "lengths"})
    frames: str = "frames"
    labels: str | None = "labels"
    lengths: str | None = "lengths"


@dataclasses.dataclass(frozen=True, slots=True)
class Flat(LayoutSpec):
    """All frames in one vlen-uint8 ``jpeg`` dataset, videos cut by ``offsets``."""

    kind: ClassVar[str] = "flat"
    _optional: ClassVar[frozenset[str]] = frozenset({"labels"})
    jpeg: str = "jpeg"
    offsets: str = "video_offsets"
    labels: str | None = "labels"


@dataclasses.dataclass(frozen=True, slots=True)
class Auto(LayoutSpec):
    """Recognise each file's layout; ``frames``/``label`` are the group layouts' names."""

    kind: ClassVar[str] = "auto"
    _optional: ClassVar[frozenset[str]] = frozenset({"label"})
    frames: str = "frames"
    label: str | None = "label"


_CLASSES: dict[str, type[LayoutSpec]] = {
    cls.kind: cls for cls in (Auto, Groups, FrameDatasets, Raw, Flat, Video, Blobs)
}


def from_wire(fields: Mapping[str, Any]) -> LayoutSpec:
    """The layout a ``to_wire`` map describes; ``ValueError`` for anything else."""
    if not isinstance(fields, Mapping):
        raise ValueError(f"a layout must be a map with a 'kind', got {fields!r}")
    values = dict(fields)
    kind = values.pop("kind", None)
    cls = _CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"layout kind must be one of {LAYOUT_NAMES}, got {kind!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - names
    if unknown:
        raise ValueError(
            f"layout {kind!r} has no names {sorted(unknown, key=repr)}; it has {sorted(names)}"
        )
    return cls(**values)


LayoutLike = str | Mapping[str, Any] | LayoutSpec


def resolve(layout: LayoutLike, frames_key: str, label_key: str | None) -> LayoutSpec:
    """The layout that ``h5feed.dataset(layout=..., frames_key=..., label_key=...)`` means.

    ``frames_key``/``label_key`` are the names of the group layouts: with ``"auto"`` or
    ``"groups"`` they name the frames dataset and label attribute, with ``"frame_datasets"``
    ``label_key`` names the label attribute. Non-default values that a layout cannot use, or
    that contradict the names of a layout object, raise ``ValueError`` rather than being
    silently ignored.
    """
    default_frames = frames_key == "frames"
    default_label = label_key == "label"
    if isinstance(layout, str):
        if layout in ("auto", "groups"):
            return (Auto if layout == "auto" else Groups)(frames=frames_key, label=label_key)
        if layout == "frame_datasets":
            spec: LayoutSpec = FrameDatasets(label=label_key)
        elif layout in _CLASSES:
            spec = _CLASSES[layout]()
        else:
            raise ValueError(f"layout must be one of {LAYOUT_NAMES} or a layout, got {layout!r}")
    elif isinstance(layout, LayoutSpec):
        spec = layout
    elif isinstance(layout, Mapping):
        spec = from_wire(layout)
    else:
        raise ValueError(f"layout must be one of {LAYOUT_NAMES} or a layout, got {layout!r}")
    frames_ok = default_frames or (isinstance(spec, (Auto, Groups)) and spec.frames == frames_key)
    label_ok = default_label or (
        isinstance(spec, (Auto, Groups, FrameDatasets)) and spec.label == label_key
    )
    if not (frames_ok and label_ok):
        raise ValueError(
            f"frames_key={frames_key!r}, label_key={label_key!r} name the groups layout's "
            f"dataset and attribute; with layout {spec.describe()} give its names in the "
            "layout itself"
        )
    return spec
