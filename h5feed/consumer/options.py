"""Everything ``h5feed.dataset()`` / ``h5feed.batches()`` is configured with, validated once.

A feed's configuration is a :data:`FeedConfig`: an :class:`HdfConfig` (``files``, ``clip``,
``layout``, ``options``) or a :class:`~h5feed.consumer.sources.options.SourceConfig` (the
user's code, its batching, ``options``). Both are frozen and never change once made.

Defaults are written once, as the field defaults of the dataclasses: :class:`ClipSpec`,
:class:`LayoutArgs` (resolved into a :class:`~h5feed.common.layouts.LayoutSpec`), the groups
of :class:`~h5feed.consumer.config.groups.FeedOptions` (``plan``:
:class:`~h5feed.consumer.plan.epoch_plan.PlanOptions`, the epoch plan's own; ``processes``;
``network``; ``record``: :mod:`h5feed.consumer.config.groups`, what the loop core may import),
an HDF5 feed's :class:`DataOptions` (a source feed has none: those arguments do not apply to
it) and :class:`SourceConfig`. The keyword arguments themselves, and their defaults as the
docs show them, are :mod:`h5feed.consumer.parameters`' (derived from these dataclasses). An
HDF5 feed's configuration is made from them by :func:`h5feed.consumer.hdf5.config.hdf_config`,
a source feed's by :func:`h5feed.consumer.sources.api.make_source_config`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from h5feed.common import layouts
from h5feed.common.config import CLIP_STARTS, ClipSpec
from h5feed.common.elements.batch_keys import VALID_KEY
from h5feed.common.layouts import LayoutSpec
from h5feed.common.protocol.messages import ON_ERROR_CHOICES
from h5feed.common.system.cache_dir import default_cache_dir
from h5feed.consumer.config.groups import FeedOptions
from h5feed.consumer.plan.epoch_plan import EpochPlan, Index, epoch_length_of
from h5feed.consumer.plan.rest import Rest
from h5feed.consumer.sources.options import SourceConfig


@dataclasses.dataclass(frozen=True, slots=True)
class DataOptions:
    """The data group of an HDF5 feed (:attr:`HdfConfig.data`): where its clips sit in the
    videos, where the files and their index cache are, what a bad frame does. A source feed
    has none, so these arguments are refused for ``source=`` by construction."""

    clips_per_video: int = 1
    clip_start: str = "random"
    index_cache: str | None = dataclasses.field(default_factory=default_cache_dir)
    data_root: str | None = None
    #: A bad frame (undecodable, failing its CRC32): "raise" ends the iteration naming file,
    #: video and frame; "skip" zero-fills that sample, marks it ``valid=False`` and counts it
    #: (see h5feed/consumer/hdf5/bad_data.py). Errors of whole files end it either way.
    on_error: str = "raise"
    #: With on_error="skip": the most samples one epoch may skip before the iteration ends
    #: (TooManySkippedError); None: 0.1% of the epoch's samples, rounded up.
    max_skipped: int | None = None
    #: fsspec options for files given as URLs (``{"endpoint_url": ..., "anon": True}``), used
    #: by this process only (to list, size and key them): never sent to a worker; None: the
    #: environment's (h5feed/common/storage_config.py). Kept out of repr, equality and hash
    #: (it may hold a secret).
    storage_options: Mapping[str, Any] | None = dataclasses.field(
        default=None, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if self.clips_per_video < 1:
            raise ValueError(f"clips_per_video must be >= 1, got {self.clips_per_video}")
        if self.clip_start not in CLIP_STARTS:
            raise ValueError(f"clip_start must be one of {CLIP_STARTS}, got {self.clip_start!r}")
        if self.on_error not in ON_ERROR_CHOICES:
            raise ValueError(f"on_error must be one of {ON_ERROR_CHOICES}, got {self.on_error!r}")
        if self.storage_options is not None and not isinstance(self.storage_options, Mapping):
            raise ValueError("storage_options must be a dict of fsspec options or None")
        if self.max_skipped is not None and (
            isinstance(self.max_skipped, bool)
            or not isinstance(self.max_skipped, int)
            or self.max_skipped < 0
        ):
            raise ValueError(f"max_skipped must be an int >= 0 or None, got {self.max_skipped!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class LayoutArgs:
    """``layout``, ``frames_key`` and ``label_key`` as ``dataset()`` takes them; :meth:`resolve`
    makes them one :class:`~h5feed.common.layouts.LayoutSpec` (see
    :func:`h5feed.common.layouts.resolve` for how the keys combine with a layout)."""

    layout: layouts.LayoutLike = "auto"
    frames_key: str = "frames"
    label_key: str | None = "label"

    def __post_init__(self) -> None:
        if not isinstance(self.frames_key, str) or not self.frames_key:
            raise ValueError("frames_key must be a non-empty dataset name")

    def resolve(self) -> LayoutSpec:
        """The layout the files are read with; ValueError for a layout or names that do not
        fit together."""
        return layouts.resolve(self.layout, self.frames_key, self.label_key)


@dataclasses.dataclass(frozen=True, slots=True)
class HdfConfig:
    """An HDF5 feed's whole configuration: the ``files`` (in plan order, as given or as a
    glob/directory resolved), how clips are cut (``clip``), how the files store videos
    (``layout``, resolved), the plan/process/network ``options`` and the ``data`` group.
    Frozen: an iteration never
    changes it."""

    files: tuple[str, ...]
    clip: ClipSpec
    layout: LayoutSpec
    options: FeedOptions
    data: DataOptions = dataclasses.field(default_factory=DataOptions)
    #: Each file's label, decided here rather than read by the workers (one-video files
    #: labelled by their directory: :func:`h5feed.common.file_labels.directory_labels`);
    #: None: the workers' index says.
    file_labels: tuple[int, ...] | None = None

    def epoch_plan(self, index: Index, epoch: int, rest: Rest | None = None) -> EpochPlan:
        """``epoch``'s plan: the plan group's, clips placed as the data group says; ``rest``:
        the rest of this epoch after a change of topology (:mod:`h5feed.consumer.plan.rest`)."""
        data, plan = self.data, self.options.plan
        return EpochPlan(index, self.clip, plan, epoch, data.clips_per_video, data.clip_start, rest)

    @property
    def marks_valid(self) -> bool:
        """Whether rows must be told apart by ``valid`` (``on_error="skip"`` zero-fills bad
        rows, ``shard_remainder="pad"`` adds padded ones): tf.data elements and lineage
        records then carry it."""
        return self.data.on_error == "skip" or self.options.plan.pads

    def element_keys(self, keys: tuple[str, ...]) -> tuple[str, ...]:
        """The keys of ``dataset(keys=keys)``'s elements: ``valid`` added where rows must be
        told apart (:attr:`marks_valid`, for ``sample_weight``)."""
        return (*keys, VALID_KEY) if self.marks_valid and VALID_KEY not in keys else keys

    def epoch_length(self, index: Index) -> int:
        """Batches per epoch of this shard of ``index``'s clips (:func:`epoch_length_of`)."""
        return epoch_length_of(index, self.options.plan, self.data.clips_per_video)

    def fingerprint_parts(self, digest: Callable[[Any], str]) -> dict[str, Any]:
        """The parts of the feed's fingerprint this configuration decides beyond the plan's
        (:func:`h5feed.consumer.position.fingerprint.fingerprint`; ``digest``: how a value
        too large to keep is hashed): the files by base name, the clips, the layout and the
        labels the trainer decided (one video per file)."""
        parts: dict[str, Any] = {
            "files": digest([os.path.basename(f) for f in self.files]),
            "file_count": len(self.files),
            "clips_per_video": self.data.clips_per_video,
            "clip_start": self.data.clip_start,
            "clip": digest(self.clip.to_wire()),
            "layout": digest(self.layout.to_wire()),
        }
        if self.file_labels is not None:
            parts["labels"] = digest(list(self.file_labels))
        return parts

    def lineage_header(self) -> dict[str, Any]:
        """What a lineage record's header says of this input beyond the plan's options: what
        ``h5feed lineage --show`` needs to make a row's clip again."""
        return {
            "kind": "hdf5",
            "files": list(self.files),
            "data_root": self.data.data_root,
            "clips_per_video": self.data.clips_per_video,
            "clip_start": self.data.clip_start,
            "clip": self.clip.to_wire(),
            "layout": self.layout.to_wire(),
        }


#: A feed's configuration: HDF5 files, or the user's code in the workers (``source=``).
FeedConfig: TypeAlias = HdfConfig | SourceConfig
