"""The seeded epoch plan: which samples, in which batches, with which clip and augmentation.

A *sample* is one clip of one video: sample ``s`` is clip ``s % clips_per_video`` of global video
``s // clips_per_video``, videos numbered in file order, then in sorted group-name order within
a file. Guarantees (all independent of the number of workers, which never see the plan):

1. Each epoch covers every sample of this shard exactly once; batches never straddle epochs;
   the last batch of an epoch is partial unless ``drop_remainder`` (then it is left out).
2. ``shuffle=True``: one permutation of all samples per epoch, drawn from ``(seed, epoch)``;
   ``shuffle=False``: file order, then video order, then clip order.
3. ``shard=(i, n)``: the n shards are disjoint and of equal size, so each yields the same
   number of batches of the same sizes (a data-parallel step that all-reduces hangs if one
   shard has a batch more). What happens to the last ``total % n`` samples of the epoch's
   order is the remainder rule, ``shard_remainder``:

   * ``"drop"`` (the default; for training): shard i takes every n-th sample of the epoch's
     order, starting at i, of its first ``n * (total // n)`` samples; the last ``total % n``
     (fewer than n; other ones each epoch with ``shuffle``) are left out of that epoch, as
     PyTorch's ``DistributedSampler(drop_last=True)``; with ``n = 1`` nothing is.
   * ``"pad"`` (for exact evaluation): shard i takes every n-th sample of the whole order,
     starting at i, then as many padded rows (sample id :data:`PAD_SAMPLE`) as bring it to
     ``ceil(total / n)`` rows: every sample of the epoch is in exactly one shard, and a shard
     has at most one padded row per epoch, at its end. A padded row is never sent to a
     worker: its frames are zeros, ``valid`` is False (see ``core/assembly.py``). It cannot
     go with ``drop_remainder`` (which would leave real samples out after all).
4. A sample's clip start, crop offsets, flip and transform seed are drawn from
   ``(seed, epoch)`` and indexed by the sample id: they depend only on (seed, epoch, sample).
5. An epoch resumed on another number of shards (:mod:`h5feed.consumer.plan.rest`) deals the
   samples the old shards did not take to the new ones by the rule of guarantee 3; its
   batches are the last ones of the epoch's positions, so a cursor inside it means what it
   means in any epoch (each sample keeps its clip start, crop, flip and seed: 4.).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from h5feed.common.config import ClipSpec, clip_start

if TYPE_CHECKING:
    from h5feed.consumer.plan.rest import Rest

_PERMUTATION_STREAM = 0
_AUGMENTATION_STREAM = 1

#: The remainder rules of ``shard=(i, n)`` (guarantee 3), the default first.
SHARD_REMAINDERS = ("drop", "pad")
#: The sample id of a padded row (``shard_remainder="pad"``): no sample, zeros, not valid.
PAD_SAMPLE = -1


@dataclasses.dataclass(frozen=True, slots=True)
class FileColumns:
    """One file's videos as columns: names (UTF-8 bytes), frame counts, labels (int64)."""

    names: Sequence[bytes]
    frames: np.ndarray
    labels: np.ndarray


@dataclasses.dataclass(frozen=True)
class Index:
    """Every video of the dataset, in sample order. Arrays are indexed by global video id."""

    files: tuple[str, ...]
    file_of_video: np.ndarray  # int64 [V]
    video_in_file: np.ndarray  # int64 [V]: position of the video in its file's index
    frames: np.ndarray  # int64 [V]
    labels: np.ndarray  # int64 [V]
    names: np.ndarray  # object [V] of bytes
    file_names: np.ndarray  # object [V] of bytes: the video's file path

    @classmethod
    def build(cls, files: Sequence[str], videos: Sequence[Sequence[Sequence[object]]]) -> Index:
        """From each file's list of (name, frame count, label), files in plan order."""
        columns = [
            FileColumns(
                tuple(str(v[0]).encode() for v in entries),
                np.fromiter((int(v[1]) for v in entries), np.int64, len(entries)),  # type: ignore[call-overload]
                np.fromiter((int(v[2]) for v in entries), np.int64, len(entries)),  # type: ignore[call-overload]
            )
            for entries in videos
        ]
        return cls.from_columns(files, columns)

    @classmethod
    def from_columns(cls, files: Sequence[str], columns: Sequence[FileColumns]) -> Index:
        """From each file's columns, files in plan order: array operations only; the names
        are kept as they came (the 10,000-file handshake's last step)."""
        if len(files) != len(columns):
            raise ValueError(f"{len(files)} files but {len(columns)} indexes")
        counts = np.fromiter((len(c.frames) for c in columns), np.int64, len(columns))
        total = int(counts.sum())
        starts = np.cumsum(counts) - counts
        names = np.empty(total, dtype=object)
        names[:] = list(itertools.chain.from_iterable(c.names for c in columns))
        paths = np.empty(len(files), dtype=object)
        paths[:] = [path.encode() for path in files]
        empty = np.zeros(0, np.int64)
        return cls(
            files=tuple(files),
            file_of_video=np.repeat(np.arange(len(files), dtype=np.int64), counts),
            video_in_file=np.arange(total, dtype=np.int64) - np.repeat(starts, counts),
            frames=np.concatenate([c.frames for c in columns] or [empty]).astype(np.int64),
            labels=np.concatenate([c.labels for c in columns] or [empty]).astype(np.int64),
            names=names,
            file_names=np.repeat(paths, counts),  # one bytes object per file, shared
        )

    @property
    def num_videos(self) -> int:
        return len(self.frames)


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Cursor:
    """A position in the plan: batch ``batch`` of epoch ``epoch`` (the next one to take).

    The stream advances it as the trainer takes batches; an iteration can start at one
    (batch k of an epoch is :meth:`EpochPlan.batch` ``(k)``, planned at random access).
    ``Cursor(e, len(plan of e))`` and ``Cursor(e + 1, 0)`` name the same place.
    """

    epoch: int = 0
    batch: int = 0

    def __post_init__(self) -> None:
        if self.epoch < 0 or self.batch < 0:
            raise ValueError(f"a cursor is (epoch >= 0, batch >= 0), got {self}")


@dataclasses.dataclass(frozen=True, slots=True)
class PlanOptions:
    """The plan group of a feed's options (``FeedOptions.plan``), HDF5 files and user sources
    alike: which samples go in which batch of which epoch, and in which order they are released.
    Its defaults are ``dataset()``'s. Where an HDF5 feed's clips sit in its videos
    (``clips_per_video``, ``clip_start``) is its data group's (``DataOptions``), given to
    :class:`EpochPlan` beside this."""

    batch_size: int = 8
    shuffle: bool = True
    seed: int = 0
    drop_remainder: bool = False
    shard: tuple[int, int] = (0, 1)
    #: What the last ``total % n`` samples of an epoch do under ``shard=(i, n)``: "drop"
    #: (left out: equal shards of real samples, for training) or "pad" (every sample once,
    #: shards made equal with padded rows, ``valid=False``: for evaluation). Guarantee 3.
    shard_remainder: str = "drop"
    epochs: int | None = 1
    deterministic: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.epochs is not None and self.epochs < 1:
            raise ValueError(f"epochs must be >= 1 or None (forever), got {self.epochs}")
        index, count = self.shard
        if not (count >= 1 and 0 <= index < count):
            raise ValueError(
                f"shard must be (index, count) with 0 <= index < count, got {self.shard}"
            )
        if self.shard_remainder not in SHARD_REMAINDERS:
            raise ValueError(
                f"shard_remainder must be one of {SHARD_REMAINDERS}, got {self.shard_remainder!r}"
            )
        if self.pads and self.drop_remainder:
            raise ValueError(
                "shard_remainder='pad' cannot go with drop_remainder=True: pad keeps every "
                "sample of the epoch (for evaluation), drop_remainder would leave the last "
                "partial batch out after all; use drop_remainder=False, or "
                "shard_remainder='drop' for training"
            )

    @property
    def pads(self) -> bool:
        """Whether shards are padded (``shard_remainder="pad"``): batches carry ``valid``."""
        return self.shard_remainder == "pad"


@dataclasses.dataclass(frozen=True)
class PlannedBatch:
    """One batch of the plan: its samples and everything a worker needs to make each row."""

    epoch: int
    index: int  # position of the batch in its epoch
    samples: np.ndarray  # int64 [B] global sample ids
    videos: np.ndarray  # int64 [B] global video ids
    starts: np.ndarray  # int64 [B] first frame of each clip
    crop_uniforms: np.ndarray  # float64 [B, 2]: (top, left) in [0, 1)
    flips: np.ndarray  # bool [B]
    seeds: np.ndarray  # uint64 [B]: per-sample seed for user transforms

    @property
    def padded(self) -> np.ndarray:
        """bool [B]: the padded rows (``shard_remainder="pad"``), never sent to a worker."""
        padded: np.ndarray = self.samples == PAD_SAMPLE
        return padded

    @property
    def real_positions(self) -> np.ndarray:
        """int64: the positions of the rows that are samples (not padding), in order."""
        positions: np.ndarray = np.nonzero(self.samples != PAD_SAMPLE)[0]
        return positions


def epoch_order(total: int, options: PlanOptions, epoch: int) -> np.ndarray:
    """This shard's samples of one epoch, in order: :func:`full_order` dealt to the shards
    by :func:`deal` (guarantee 3). Also plans the items of user sources (``source=``)."""
    return deal(full_order(total, options, epoch), options)


def full_order(total: int, options: PlanOptions, epoch: int) -> np.ndarray:
    """All samples of one epoch, every shard's, in order: a permutation of ``range(total)``
    drawn from ``(seed, epoch)`` (``shuffle``) or ``range(total)``."""
    if options.shuffle:
        rng = np.random.default_rng([options.seed, epoch, _PERMUTATION_STREAM])
        order: np.ndarray = rng.permutation(total).astype(np.int64)
        return order
    return np.arange(total, dtype=np.int64)


def deal(order: np.ndarray, options: PlanOptions) -> np.ndarray:
    """Shard ``options.shard = (i, n)``'s part of ``order``: every n-th from i of its first
    ``n * (len(order) // n)`` (the drop rule), or of all of it followed by
    :data:`PAD_SAMPLE` up to :func:`shard_size` (the pad rule): guarantee 3. An epoch's
    order is dealt so; so is the rest of an epoch after a change of topology
    (:mod:`h5feed.consumer.plan.rest`)."""
    shard_index, shard_count = options.shard
    size = shard_size(len(order), options)
    if options.pads:
        taken = order[shard_index::shard_count]
        return np.concatenate([taken, np.full(size - len(taken), PAD_SAMPLE, np.int64)])
    return order[shard_index : size * shard_count : shard_count]


def shard_size(total: int, options: PlanOptions) -> int:
    """Rows of one shard of an epoch of ``total`` samples, every shard as many (guarantee 3):
    ``total // n`` (drop), ``ceil(total / n)`` (pad: some of them padded)."""
    count = options.shard[1]
    return -(-total // count) if options.pads else total // count


def real_samples(total: int, options: PlanOptions) -> int:
    """Samples (not padded rows) of this shard of an epoch of ``total``: the same every
    epoch (which samples they are changes with ``shuffle``)."""
    if options.pads:
        return len(range(options.shard[0], total, options.shard[1]))
    return shard_size(total, options)


def epoch_length(samples: int, options: PlanOptions) -> int:
    """Batches in one epoch of one shard of ``samples`` samples (videos x clips per video, or
    a map source's items): the shard's share, by ``batch_size``, the last batch kept unless
    ``drop_remainder``. :class:`EpochPlan` and the HDF5 scheduler's ``epoch_length`` use it;
    a map source's kind counts its shard's items with :func:`batch_count` (a keras source's
    items are its batches)."""
    return batch_count(shard_size(samples, options), options.batch_size, options.drop_remainder)


def batch_count(size: int, batch_size: int, drop_remainder: bool) -> int:
    """Batches of ``batch_size`` in ``size`` samples: the last, shorter one kept unless
    ``drop_remainder`` (a map source's epoch too: ``map_kind``)."""
    return size // batch_size if drop_remainder else -(-size // batch_size)


def epoch_length_of(index: Index, options: PlanOptions, clips_per_video: int) -> int:
    """Batches in one epoch of one shard of the clips of ``index``'s videos."""
    return epoch_length(index.num_videos * clips_per_video, options)


class EpochPlan:
    """The batches of one epoch of one shard (see the module docstring for the guarantees).

    ``rest``: this epoch is the rest of an epoch begun on another number of shards
    (guarantee 5): its batches are positions :attr:`first` to ``len(self) - 1``; the
    positions before hold nothing (the old shards took their samples)."""

    def __init__(
        self,
        index: Index,
        spec: ClipSpec,
        options: PlanOptions,
        epoch: int,
        clips_per_video: int,
        clip_start: str,
        rest: Rest | None = None,
    ) -> None:
        self.index = index
        self.spec = spec
        self.options = options
        self.epoch = epoch
        self.clips_per_video, self.clip_start = clips_per_video, clip_start
        k = clips_per_video
        total = index.num_videos * k
        if rest is None:
            self.order, self.first = epoch_order(total, options, epoch), 0
        else:
            self.order, self.first = rest.deal(full_order(total, options, epoch), options)
        rng = np.random.default_rng([options.seed, epoch, _AUGMENTATION_STREAM])
        self._start_uniform = rng.random(total)
        self._crop_uniform = rng.random((total, 2))
        self._flip = (rng.random(total) < 0.5) & spec.flip
        self._seeds = rng.integers(0, 2**63, size=total, dtype=np.uint64)

    def __len__(self) -> int:
        return epoch_length_of(self.index, self.options, self.clips_per_video)

    def batch(self, position: int) -> PlannedBatch:
        """Batch ``position`` of the epoch; a padded row (guarantee 3) has sample and video
        :data:`PAD_SAMPLE` and zeros for the rest."""
        batch = self.options.batch_size
        row = (position - self.first) * batch  # its first row in this shard's order
        if row < 0:
            raise ValueError(f"batch {position} of epoch {self.epoch} is before the rest")
        samples = self.order[row : row + batch]
        k = self.clips_per_video
        real = samples != PAD_SAMPLE
        videos = np.where(real, samples // k, PAD_SAMPLE)
        starts = np.fromiter(
            (
                clip_start(
                    int(self.index.frames[v]),
                    self.spec.span,
                    self.clip_start,
                    int(s % k),
                    k,
                    float(self._start_uniform[s]),
                )
                if s != PAD_SAMPLE
                else 0
                for s, v in zip(samples.tolist(), videos.tolist(), strict=True)
            ),
            dtype=np.int64,
            count=len(samples),
        )
        at = np.where(real, samples, 0)  # padded rows read sample 0's draws, then zeroed
        return PlannedBatch(
            epoch=self.epoch,
            index=position,
            samples=samples,
            videos=videos,
            starts=starts,
            crop_uniforms=np.where(real[:, None], self._crop_uniform[at], 0.0),
            flips=self._flip[at] & real,
            seeds=np.where(real, self._seeds[at], np.uint64(0)),
        )

    def __iter__(self) -> Iterator[PlannedBatch]:
        return self.batches_from(0)

    def batches_from(self, first: int) -> Iterator[PlannedBatch]:
        """Batches ``first``, ``first + 1``, ... to the end of the epoch (from :attr:`first`
        on: the positions before it are empty)."""
        start = max(first, self.first)
        return (self.batch(position) for position in range(start, len(self)))
