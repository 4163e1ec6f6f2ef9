"""The rest of an epoch after a change of topology: which of its samples the old shards
took, and how the others are dealt to the new shards.

n trainers each saved a position inside epoch ``e`` (``stream.state()`` or an
``h5feed.BackupAndRestore`` directory); :func:`h5feed.merge_states` keeps each old shard's
cursor (a :class:`Layer`: its next batch and the batches it took above it), never a list of
samples. Resumed on m shards, the samples of epoch ``e`` that no old shard took, in the
epoch's order, are the *rest*; shard ``(j, m)`` takes its part of the rest by the plan's
rule (:func:`~h5feed.consumer.plan.epoch_plan.deal`, ``shard_remainder``: *drop*, every m-th from j
of the first ``m * (len(rest) // m)``; *pad*, every m-th from j of all of it, padded to
``ceil(len(rest) / m)`` rows), as batches of ``batch_size`` (the last one partial unless
``drop_remainder``). Then epochs go on as usual, on m shards.

Guarantees:

1. Exactly once: over the old shards' batches taken in epoch ``e`` and the new shards'
   batches of the rest, each sample of the epoch is trained once, except the remainder:
   under *drop*, the last ``len(rest) % m`` samples of the rest (never more than m - 1),
   and with ``drop_remainder`` the samples of each new shard's short last batch; under
   *pad*, none. Samples the old shards left out (their own remainder) are part of the
   rest; padded rows take no sample.
2. Positions: shard j's batches of the rest are the *last* ``P`` positions of an epoch of
   m shards (``L - P`` to ``L - 1``, ``L`` its usual batch count), so a cursor inside the
   rest, the stream's roll-over to the next epoch at ``L``, Keras's steps per epoch and
   ``h5feed.BackupAndRestore``'s offsets mean what they mean in any epoch resumed midway.
   The resumed epoch starts at batch ``L - P`` (:meth:`Rest.first_batch`), the same for
   every new shard (they have equal shares: a data-parallel step never waits for a rank
   that has no batch).
3. Layers: a state saved inside the rest keeps the layers before it (format 2 of
   :mod:`h5feed.consumer.position.resume`), so resuming it again is exact; merging such states adds
   a layer (the rest of the rest).
4. Sizes follow from the counts alone (:meth:`Rest.first_batch`): the resumed epoch's first
   batch and the epoch's length are known before any worker indexed the files.
5. A rest from a file is checked before it costs anything (:meth:`Rest.check`, bounded
   layer, shard and batch counts): a malformed one is a ResumeError.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from h5feed.common.errors import ResumeError
from h5feed.consumer.plan.epoch_plan import PlanOptions, batch_count, deal, epoch_length, shard_size

#: Layers a rest may have (a topology change each), shards a layer may have, and batches
#: taken above the cursors of a layer (deterministic=False; bounded by the credit budget).
MAX_LAYERS = 64
MAX_SHARDS = 1 << 16
MAX_TAKEN = 1 << 16


@dataclasses.dataclass(frozen=True, slots=True)
class Layer:
    """One topology's progress in the epoch: per shard ``i`` (of ``len(cursors)``), the
    next batch it would have taken and the batches it took above that one, as positions
    of the epoch (guarantee 2)."""

    cursors: tuple[tuple[int, tuple[int, ...]], ...]

    @property
    def shards(self) -> int:
        return len(self.cursors)


@dataclasses.dataclass(frozen=True, slots=True)
class _Dealt:
    """``size`` samples dealt to ``shards`` shards of an epoch of ``samples`` by the
    remainder rule: each one's rows (``share``, padded rows included), its batches (``P``)
    and the position of the first (``L - P``)."""

    size: int
    shards: int
    share: int
    batches: int
    first: int
    pads: bool

    @classmethod
    def of(cls, size: int, shards: int, samples: int, options: PlanOptions) -> _Dealt:
        dealt = dataclasses.replace(options, shard=(0, shards))
        share = shard_size(size, dealt)
        batches = batch_count(share, options.batch_size, options.drop_remainder)
        first = epoch_length(samples, dealt) - batches
        return cls(size, shards, share, batches, first, options.pads)

    def real(self, shard: int) -> int:
        """Shard ``shard``'s samples (its first rows; padded rows follow: plan.deal)."""
        return len(range(shard, self.size, self.shards)) if self.pads else self.share

    def done(self, shard: int, cursor: int, batch_size: int) -> int:
        """The samples of shard ``shard``'s batches before position ``cursor``."""
        return min(max(cursor - self.first, 0) * batch_size, self.real(shard))

    def span(self, shard: int, position: int, batch_size: int) -> tuple[int, int]:
        """Shard ``shard``'s samples ``[a, b)`` in batch ``position`` (no padded row)."""
        at, real = position - self.first, self.real(shard)
        return min(at * batch_size, real), min((at + 1) * batch_size, real)


@dataclasses.dataclass(frozen=True, slots=True)
class Rest:
    """Epoch ``epoch`` (of ``samples`` samples, all shards) as earlier topologies left it:
    their :class:`Layer` s, oldest first (see the module docstring)."""

    epoch: int
    samples: int
    layers: tuple[Layer, ...]

    def check(self, options: PlanOptions) -> None:
        """ResumeError unless every cursor lies in its layer's part of the epoch and each
        batch taken above it is a batch of that part (guarantee 5)."""
        size = self.samples
        for number, layer in enumerate(self.layers):
            dealt = _Dealt.of(size, layer.shards, self.samples, options)
            end = dealt.first + dealt.batches
            for shard, (cursor, above) in enumerate(layer.cursors):
                bad = [t for t in above if not cursor < t < end]
                if not dealt.first <= cursor <= end or bad or len(set(above)) != len(above):
                    raise ResumeError(
                        f"resume state: rest layer {number}, shard {shard} of {layer.shards}: "
                        f"next batch {cursor}, taken {list(above)} lie outside its batches "
                        f"{dealt.first} to {end - 1}"
                    )
            size -= sum(self._taken_counts(layer, dealt, options))

    @staticmethod
    def _taken_counts(layer: Layer, dealt: _Dealt, options: PlanOptions) -> list[int]:
        """Samples each shard of ``layer`` took (its batches before its cursor and above)."""
        batch = options.batch_size
        counts = []
        for shard, (cursor, above) in enumerate(layer.cursors):
            spans = (dealt.span(shard, t, batch) for t in above)
            counts.append(dealt.done(shard, cursor, batch) + sum(b - a for a, b in spans))
        return counts

    def first_batch(self, options: PlanOptions) -> int:
        """The position of shard ``options.shard``'s first batch of the rest (``L - P``)."""
        size = self.samples
        for layer in self.layers:
            dealt = _Dealt.of(size, layer.shards, self.samples, options)
            size -= sum(self._taken_counts(layer, dealt, options))
        return _Dealt.of(size, options.shard[1], self.samples, options).first

    def remaining(self, full: np.ndarray, options: PlanOptions) -> np.ndarray:
        """The samples of the epoch's order ``full`` that no layer's shard took, in order."""
        if len(full) != self.samples:
            raise ResumeError(
                f"the resume state's rest counts {self.samples} samples per epoch, the "
                f"dataset has {len(full)}: it was saved over other data"
            )
        rest, batch = full, options.batch_size
        for layer in self.layers:
            n = layer.shards
            dealt = _Dealt.of(len(rest), n, self.samples, options)
            taken = np.zeros(len(rest), dtype=bool)
            for shard, (cursor, above) in enumerate(layer.cursors):
                # Sample k of shard i's part is sample i + k * n of the rest (plan.deal).
                done = dealt.done(shard, cursor, batch)
                taken[shard : shard + done * n : n] = True
                for position in above:
                    a, b = dealt.span(shard, position, batch)
                    taken[shard + a * n : shard + b * n : n] = True
            rest = rest[~taken]
        return rest

    def deal(self, full: np.ndarray, options: PlanOptions) -> tuple[np.ndarray, int]:
        """Shard ``options.shard``'s part of the rest of ``full`` (the epoch's order), and
        the position of its first batch (guarantee 2)."""
        rest = self.remaining(full, options)
        first = _Dealt.of(len(rest), options.shard[1], self.samples, options).first
        return deal(rest, options), first

    def to_json(self) -> list[list[list[Any]]]:
        """Per layer, per shard: ``[next batch, [batches taken above it]]``."""
        return [[[c, list(a)] for c, a in layer.cursors] for layer in self.layers]

    @classmethod
    def from_json(cls, value: object, epoch: int, samples: int) -> Rest:
        """A rest from a state's ``"rest"``; ResumeError for anything malformed or over
        the bounds (layers, shards, taken batches)."""
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_LAYERS:
            raise ResumeError(f"resume state: 'rest' must be a list of 1 to {MAX_LAYERS} layers")
        layers = []
        for layer in value:
            if not isinstance(layer, list) or not 1 <= len(layer) <= MAX_SHARDS:
                raise ResumeError(
                    f"resume state: a rest layer is a list of 1 to {MAX_SHARDS} shards"
                )
            cursors = []
            taken = 0
            for entry in layer:
                if not (isinstance(entry, list) and len(entry) == 2 and _count(entry[0])):
                    raise ResumeError(f"resume state: a rest shard is [batch, [taken]]: {entry!r}")
                above = entry[1]
                taken += len(above) if isinstance(above, list) else 0
                if not isinstance(above, list) or taken > MAX_TAKEN:
                    raise ResumeError(
                        f"resume state: a rest layer lists at most {MAX_TAKEN} taken batches"
                    )
                if not all(_count(t) for t in above):
                    raise ResumeError(f"resume state: bad taken batches in the rest: {above!r}")
                cursors.append((int(entry[0]), tuple(int(t) for t in above)))
            layers.append(Layer(tuple(cursors)))
        return cls(epoch, samples, tuple(layers))


def layer_of(cursors: Sequence[tuple[int, Sequence[int]]]) -> Layer:
    """A layer from each old shard's (next batch, batches taken above it), shard order."""
    return Layer(tuple((int(c), tuple(sorted(int(t) for t in a))) for c, a in cursors))


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
