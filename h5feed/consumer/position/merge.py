"""The merge of ``h5feed.merge_states``: the positions saved by the n trainers of a
data-parallel job as one position, which resumes on any number of trainers
(:mod:`h5feed.consumer.plan.rest`). Pure: it reads states (dicts, or the position file of a
backup directory) and writes nothing; writing the merged position as a backup (``into=``)
is :mod:`h5feed.consumer.trainers.merged_backup`'s, which owns the public function.

Guarantees:

1. The merged state is compact: per old shard its cursor (next batch, batches taken above
   it), never a list of samples; it is a resume state of format 2
   (:mod:`h5feed.consumer.position.resume`), accepted by ``resume=`` of ``h5feed.batches`` /
   ``h5feed.dataset`` with any ``shard=(j, m)`` and by ``h5feed.BackupAndRestore``.
2. Its fingerprint is the old shards' without ``shard``: resuming it with other files,
   data or plan options is refused as any state is.
3. Refused with ResumeError, naming what is wrong: no states; a state that is not one
   (malformed, a bare position without fingerprint, a merged state, a source's); an old
   shard missing or given twice, or states of different shard counts; fingerprints that
   differ in more than the shard; states saved at different steps (a rank whose position
   is behind the others' would train again samples that are in the weights already, one
   ahead would skip some); a state saved before its first batch (it does not know the
   epoch's sample count). Each state is checked whole first (h5feed.consumer.position.resume,
   guarantee 8), and a shard count is bounded (``rest.MAX_SHARDS``) before anything is built
   from it: a state saying shard [0, 10**9] costs what one of 2 does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from h5feed.common.errors import ResumeError
from h5feed.consumer.plan.epoch_plan import Cursor, PlanOptions, epoch_length
from h5feed.consumer.plan.rest import MAX_SHARDS, Layer, Rest, layer_of
from h5feed.consumer.position import fingerprint as fingerprints
from h5feed.consumer.position import resume
from h5feed.consumer.position.resume import ResumePoint

StateLike = Mapping[str, Any] | str | os.PathLike[str]


def load_states(states: Sequence[StateLike]) -> list[tuple[str, Mapping[str, Any]]]:
    """Each state (a ``stream.state()`` dict, or the position of an
    ``h5feed.BackupAndRestore`` directory) with how an error names it; TypeError for what is
    not a list of states, ResumeError for none or a directory holding no position."""
    if isinstance(states, str | bytes | os.PathLike | Mapping) or not isinstance(states, Sequence):
        raise TypeError("merge_states takes a list of states (dicts or backup directories)")
    if not states:
        raise ResumeError("merge_states needs the state of every old shard, got none")
    return [_load(number, state) for number, state in enumerate(states)]


def merge_loaded(loaded: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """One position from the states of every shard of a data-parallel job (as
    :func:`load_states` gives them), for ``resume=`` with any ``shard=(j, m)``: the samples
    of the current epoch that no old shard took are dealt to the m new shards, then epochs go
    on with m shards. See the module docstring."""
    points = [(label, _point(label, state)) for label, state in loaded]
    shards = _shards(points)
    first_label, first = points[0]
    fingerprint = dict(first.fingerprint or {})
    for label, point in points[1:]:
        others = fingerprints.differences(
            _unsharded(fingerprint), _unsharded(point.fingerprint or {})
        )
        if others:
            raise ResumeError(
                f"merge_states: the fingerprints differ in more than the shard (saved: "
                f"{first_label}, now: {label}): " + "; ".join(others)
            )
        fingerprint.update(point.fingerprint or {})  # the index, where the first lacks it
    samples = {point.samples or 0 for _, point in points}  # _point refused None
    if len(samples) != 1:
        raise ResumeError(f"merge_states: the states count different samples per epoch {samples}")
    total = samples.pop()
    options = _options(fingerprint, shards)
    layer, epoch = _layer(points, total, options)
    rests = {point.rest for _, point in points}
    if len(rests) != 1:
        raise ResumeError(
            "merge_states: the states disagree on their epoch's earlier topologies ('rest'): "
            "they were not saved by one job"
        )
    before = rests.pop()
    rest = Rest(epoch, total, (*(before.layers if before is not None else ()), layer))
    rest.check(options)
    return ResumePoint(
        Cursor(epoch, 0), frozenset(), _unsharded(fingerprint), rest=rest, samples=total,
        merged=True,
    ).to_state()  # fmt: skip


def _load(number: int, state: StateLike) -> tuple[str, Mapping[str, Any]]:
    """A state and how to name it in an error: ``state N`` or its directory."""
    if isinstance(state, Mapping):
        return f"state {number}", state
    if not isinstance(state, str | os.PathLike):
        raise TypeError(f"merge_states: state {number} is a {type(state).__name__}")
    path = os.fspath(state)
    found = resume.read_position(path)
    if found is None:
        raise ResumeError(
            f"merge_states: {path} holds no h5feed position (not an h5feed.BackupAndRestore "
            "directory, or it saved nothing yet)"
        )
    return path, found


def _point(label: str, state: Mapping[str, Any]) -> ResumePoint:
    try:
        point = ResumePoint.from_state(state)
    except ResumeError as exc:
        raise ResumeError(f"merge_states: {label}: {exc}") from None
    if not point.fingerprint:
        raise ResumeError(f"merge_states: {label} has no fingerprint (a bare position)")
    if point.merged:
        raise ResumeError(f"merge_states: {label} is a merged state: resume it, then save again")
    if "source" in point.fingerprint:
        raise ResumeError(f"merge_states: {label} is a source's (source=): only HDF5 datasets")
    if point.samples is None:
        raise ResumeError(
            f"merge_states: {label} does not know the epoch's sample count (saved before its "
            "first batch)"
        )
    return point


def _unsharded(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fingerprint.items() if key != "shard"}


def _shards(points: list[tuple[str, ResumePoint]]) -> int:
    """The old shard count; ResumeError for a shard missing, twice or of another count."""
    seen: dict[int, str] = {}
    counts: dict[int, str] = {}
    for label, point in points:
        shard = (point.fingerprint or {}).get("shard")
        if not (
            isinstance(shard, list)
            and len(shard) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in shard)
            and 0 <= shard[0] < shard[1]
        ):
            raise ResumeError(f"merge_states: {label}: its fingerprint's shard is {shard!r}")
        index, count = shard
        counts.setdefault(count, label)
        if index in seen:
            raise ResumeError(
                f"merge_states: shard {index} of {count} is given twice ({seen[index]} and {label})"
            )
        seen[index] = label
    if len(counts) != 1:
        raise ResumeError(
            "merge_states: states of different shard counts: "
            + ", ".join(f"{label} of {count}" for count, label in sorted(counts.items()))
        )
    (count,) = counts
    if count > MAX_SHARDS:  # before listing them: a state may say any count
        raise ResumeError(
            f"merge_states: the states are of {count} shards, more than the {MAX_SHARDS} a "
            f"rest may hold ({len(points)} given)"
        )
    missing = sorted(set(range(count)) - set(seen))
    if missing:
        raise ResumeError(
            f"merge_states: the state of shard{'s' * (len(missing) > 1)} "
            f"{', '.join(map(str, missing))} of {count} is missing (every old shard's "
            "position is needed: the samples it took are known from it alone)"
        )
    return count


def _options(fingerprint: Mapping[str, Any], shards: int) -> PlanOptions:
    """The plan options that decide the batches' sizes, from the fingerprint."""
    try:
        return PlanOptions(
            batch_size=int(fingerprint["batch_size"]),
            drop_remainder=bool(fingerprint["drop_remainder"]),
            shard=(0, shards),
            shard_remainder=str(fingerprint.get("shard_remainder", "drop")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ResumeError(f"merge_states: the fingerprint's plan options are bad: {exc}") from None


def _layer(
    points: list[tuple[str, ResumePoint]], total: int, options: PlanOptions
) -> tuple[Layer, int]:
    """The old shards' cursors, in shard order, and their epoch; ResumeError unless every
    state is at the same step (guarantee 3)."""
    length = epoch_length(total, options)
    found: dict[int, tuple[str, Cursor, list[int]]] = {}
    for label, point in points:
        cursor = point.cursor
        if length > 0 and cursor.batch >= length:  # (e, len) is (e + 1, 0)
            cursor = Cursor(cursor.epoch + cursor.batch // length, cursor.batch % length)
        outside = sorted(t for t in point.taken if t[0] != cursor.epoch)
        if outside:
            raise ResumeError(
                f"merge_states: {label} took batches {outside} of another epoch than its "
                f"cursor's ({cursor.epoch}): save where each rank's epoch is its cursor's"
            )
        shard = (point.fingerprint or {})["shard"][0]
        found[shard] = (label, cursor, sorted(batch for _, batch in point.taken))
    at = {(cursor.epoch, cursor.batch + len(taken)) for _, cursor, taken in found.values()}
    if len(at) != 1:
        raise ResumeError(
            "merge_states: the states were saved at different steps (a rank resumed behind "
            "the others would train again samples that are in the weights already): "
            + "; ".join(
                f"shard {shard} ({label}) at epoch {cursor.epoch}, batch {cursor.batch}"
                + (f" and {len(taken)} taken above" if taken else "")
                for shard, (label, cursor, taken) in sorted(found.items())
            )
        )
    cursors = [(found[shard][1].batch, found[shard][2]) for shard in sorted(found)]
    return layer_of(cursors), at.pop()[0]
