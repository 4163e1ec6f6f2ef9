"""Where an iteration resumes: the state format and the position file.

A *state* is a small JSON-able dict saying how far a trainer got::

    {"format": 1, "epoch": e, "batch": b, "taken": [[e2, b2], ...],
     "fingerprint": {"seed": 0, "batch_size": 8, ..., "index": "9f2c..."}}

``(epoch, batch)`` is the lowest batch of the plan not yet taken (``Cursor(e, b)``);
``taken`` lists the batches taken above it (only ``deterministic=False`` has any: batches
leave as they complete); ``fingerprint`` names what decides the stream. Resuming from it
continues with batch ``(e, b)`` and leaves out the ``taken`` ones: the union of what the
first run took and what the resumed one yields is exactly the uninterrupted stream.

Guarantees:

1. and 2. What the fingerprint covers and how a mismatch is named:
   :mod:`h5feed.consumer.position.fingerprint`.
3. An optional ``"length"`` (batches per epoch; ``h5feed.BackupAndRestore`` writes it) gives
   a resumed feed its length when the index is not remembered where it resumes, so Keras
   runs full epochs after the shorter resumed one (see :attr:`ResumePoint.length`).
4. ``{"epoch": e, "batch": b}`` alone (a custom loop's own step count) is accepted and
   checked against nothing.
5. A state of another ``format`` is refused (ResumeError), never guessed at.
6. ``"samples"`` (the epoch's samples, all shards) is written once the index is known:
   :func:`h5feed.merge_states` needs it to deal an epoch's rest to another number of shards.
7. Format 2 is a position inside the rest of an epoch after a change of topology
   (:mod:`h5feed.consumer.plan.rest`): format 1's fields and ``samples``, plus ``"rest"`` (per
   earlier topology, per shard: ``[next batch, [batches taken above it]]``). A merged state
   (``"merged": true``, :func:`h5feed.merge_states`) is the start of that rest for any
   shard of any count: its fingerprint has no ``shard`` (every other field is checked), its
   ``batch`` is 0 and its first batch is where the shard's part of the rest begins
   (:func:`first_cursor`). A state saved inside the rest is format 2 with its own shard; one
   saved once the rest is over is format 1 again. An h5feed that knows only format 1
   refuses format 2 (it would resume the rest's epoch from its start).
8. A state is a claim, checked whole before anything acts on it: every field is bounded
   (``epoch`` and ``batch`` at most :data:`MAX_POSITION`, ``length`` too, ``samples`` at most
   :data:`MAX_SAMPLES`, at most 65,536 ``taken``; the fingerprint a flat map of short names
   to scalars: :func:`h5feed.consumer.position.fingerprint.check_shape`), so no malformed
   state costs a loop per epoch, an allocation it names, an ``OverflowError`` or a
   ``RecursionError``: each is a ResumeError naming what is wrong. A position never walks
   epoch by epoch: an epoch's end rolls over by division (:class:`Progress`).
9. A backup directory's position file is read only if it is a regular file of at most 1 MiB
   (:func:`h5feed.common.trust.regular_files.read_regular`: a FIFO there never blocks the read).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Mapping
from typing import Any

from h5feed.common.errors import ResumeError
from h5feed.common.system.atomic import atomic_file
from h5feed.common.trust.regular_files import read_regular
from h5feed.consumer.plan.epoch_plan import Cursor, PlanOptions
from h5feed.consumer.plan.rest import Rest
from h5feed.consumer.position import fingerprint as fingerprints

FORMAT_VERSION = 1
#: The format of a state inside the rest of an epoch (guarantee 7).
REST_FORMAT = 2
#: The file in a backup directory (``h5feed.BackupAndRestore``) holding h5feed's position.
POSITION_FILE = "h5feed_position.json"
#: A state file larger than this is not a state (it is read before it is parsed).
_MAX_STATE_BYTES = 1 << 20
#: ``taken`` entries a state may list (deterministic=False: bounded by the credit budget).
_MAX_TAKEN = 1 << 16
#: The largest epoch, batch or epoch length a state may say (2**31 - 1: two billion epochs,
#: or batches in one; far past any run, and every count after a rollover fits an int64).
MAX_POSITION = (1 << 31) - 1
#: The most samples per epoch a state may say (a trillion).
MAX_SAMPLES = 1 << 40


def check_point(point: ResumePoint, current: Mapping[str, Any]) -> None:
    """:func:`~h5feed.consumer.position.fingerprint.check` of ``point``'s fingerprint, if it has
    one;
    a merged point's is checked in every field but ``shard`` (it resumes on any)."""
    if point.fingerprint:
        if point.merged:
            current = {key: value for key, value in current.items() if key != "shard"}
        fingerprints.check(point.fingerprint, current)


def first_cursor(point: ResumePoint, options: PlanOptions, length: int | None) -> Cursor:
    """Where an iteration resumed from ``point`` starts (for ``options.shard``): a merged
    point's at the shard's first batch of the rest, an epoch's end (known ``length``) at
    the next epoch's start. ResumeError for a rest that does not fit these options or a
    position before the shard's part of the rest."""
    cursor = point.cursor
    rest = point.rest
    if rest is not None:
        rest.check(options)
        first = rest.first_batch(options)
        if point.merged:
            cursor = Cursor(rest.epoch, first)
        elif cursor.batch < first:
            raise ResumeError(
                f"resume state: batch {cursor.batch} of epoch {cursor.epoch} is before shard "
                f"{list(options.shard)}'s part of the rest, which begins at batch {first}"
            )
    if length is not None and cursor.batch >= length:  # (e, len) is (e + 1, 0)
        cursor = Cursor(cursor.epoch + cursor.batch // length, cursor.batch % length)
    return cursor


@dataclasses.dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where an iteration resumes: ``cursor``, the batches above it already taken, and the
    fingerprint to check (None: a custom loop's bare position, checked against nothing)."""

    cursor: Cursor
    taken: frozenset[tuple[int, int]] = frozenset()
    fingerprint: Mapping[str, Any] | None = None
    #: Batches per epoch when the saver knew it (``h5feed.BackupAndRestore`` writes it): a
    #: resumed feed whose index is not remembered here (``index_cache=False``, another
    #: machine) still tells Keras the epoch's length. Keras would otherwise learn it from
    #: the shorter resumed epoch and silently cut every later epoch to that many steps.
    length: int | None = None
    #: The rest of an epoch after a change of topology this point lies in (guarantee 7).
    rest: Rest | None = None
    #: Samples per epoch, all shards (guarantee 6), once known.
    samples: int | None = None
    #: The start of ``rest`` for any shard (:func:`h5feed.merge_states`; guarantee 7).
    merged: bool = False

    def to_state(self) -> dict[str, Any]:
        """The JSON-able state (see the module docstring): format 2 while the cursor is in
        the rest's epoch, else format 1."""
        rest = self.rest if self.rest is not None and self.cursor.epoch == self.rest.epoch else None
        return {
            "format": FORMAT_VERSION if rest is None else REST_FORMAT,
            "epoch": self.cursor.epoch,
            "batch": self.cursor.batch,
            "taken": [list(t) for t in sorted(self.taken)],
            "fingerprint": dict(self.fingerprint or {}),
            **({"length": self.length} if self.length is not None else {}),
            **({"samples": self.samples} if self.samples is not None else {}),
            **({"rest": rest.to_json()} if rest is not None else {}),
            **({"merged": True} if self.merged else {}),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ResumePoint:
        """A point from a state dict or a bare ``{"epoch": e, "batch": b}``; ResumeError for
        anything else."""
        if not isinstance(state, Mapping):
            raise ResumeError(f"a resume state is a dict, got {type(state).__name__}")
        version = state.get("format", FORMAT_VERSION if "fingerprint" not in state else None)
        if version not in (FORMAT_VERSION, REST_FORMAT):
            raise ResumeError(
                f"resume state format {version!r} is not supported (this h5feed writes "
                f"{FORMAT_VERSION} and {REST_FORMAT})"
            )
        epoch, batch = state.get("epoch"), state.get("batch")
        if not (_count(epoch) and _count(batch)):
            raise ResumeError(
                f"a resume state needs epoch and batch, integers in [0, {MAX_POSITION}]; got "
                f"{fingerprints.said(epoch)}, {fingerprints.said(batch)}"
            )
        taken = state.get("taken", [])
        if not isinstance(taken, list) or len(taken) > _MAX_TAKEN:
            raise ResumeError(f"resume state: 'taken' must be a list of at most {_MAX_TAKEN}")
        pairs = set()
        for entry in taken:
            if not (isinstance(entry, list | tuple) and len(entry) == 2):
                raise ResumeError(f"resume state: taken holds [epoch, batch] pairs: {entry!r}")
            if not (_count(entry[0]) and _count(entry[1])):
                raise ResumeError(f"resume state: bad taken batch {fingerprints.said(entry)}")
            if (entry[0], entry[1]) <= (epoch, batch):
                raise ResumeError(f"resume state: taken batch {entry!r} is not above the cursor")
            pairs.add((int(entry[0]), int(entry[1])))
        found = state.get("fingerprint")
        if found is not None:
            fingerprints.check_shape(found)
        length = state.get("length")
        if length is not None and not (_count(length) and length > 0 and found is not None):
            raise ResumeError(
                f"resume state: length must be an integer in [1, {MAX_POSITION}]: "
                f"{fingerprints.said(length)}"
            )
        samples = state.get("samples")
        if samples is not None and not _count(samples, MAX_SAMPLES):
            raise ResumeError(
                f"resume state: samples must be an integer in [0, {MAX_SAMPLES}]: "
                f"{fingerprints.said(samples)}"
            )
        cursor = Cursor(int(epoch), int(batch))  # type: ignore[arg-type]
        rest, merged = _rest_of(state, version, cursor, samples, pairs, found)
        return cls(cursor, frozenset(pairs), found, length, rest, samples, merged)


def _rest_of(
    state: Mapping[str, Any],
    version: object,
    cursor: Cursor,
    samples: int | None,
    taken: set[tuple[int, int]],
    fingerprint: Mapping[str, Any] | None,
) -> tuple[Rest | None, bool]:
    """A state's rest and whether it is merged (guarantee 7); ResumeError for a format-2
    field where it does not belong."""
    merged = state.get("merged", False)
    if not isinstance(merged, bool):
        raise ResumeError(f"resume state: merged must be true or false: {merged!r}")
    if version == FORMAT_VERSION:
        if "rest" in state or merged:
            raise ResumeError("resume state: 'rest' and 'merged' belong to format 2")
        return None, False
    if samples is None or fingerprint is None or "rest" not in state:
        raise ResumeError("resume state: format 2 needs 'rest', 'samples' and 'fingerprint'")
    if merged and ("shard" in fingerprint or cursor.batch != 0 or taken):
        raise ResumeError(
            "resume state: a merged state has no shard in its fingerprint, batch 0 and "
            "nothing taken"
        )
    return Rest.from_json(state["rest"], cursor.epoch, samples), merged


def _count(value: object, most: int = MAX_POSITION) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most


def resume_point(resume: Any) -> ResumePoint:
    """``resume=`` of ``dataset()``/``batches()``: a state dict, a bare position, or a
    backup directory (``h5feed.BackupAndRestore``'s: its :data:`POSITION_FILE`; a directory
    without one starts from the beginning)."""
    if isinstance(resume, ResumePoint):
        return resume
    if isinstance(resume, str | os.PathLike):
        state = read_position(os.fspath(resume))
        return ResumePoint(Cursor()) if state is None else ResumePoint.from_state(state)
    return ResumePoint.from_state(resume)


def read_position(backup_dir: str) -> dict[str, Any] | None:
    """The state saved in ``backup_dir``, or None when there is none (a first run)."""
    path = pathlib.Path(backup_dir) / POSITION_FILE
    try:
        raw = read_regular(os.fspath(path), _MAX_STATE_BYTES)  # guarantee 9
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ResumeError(f"{exc}: not a resume state") from None
    try:
        state = json.loads(raw)
    except RecursionError:
        raise ResumeError(f"{path} is nested too deeply to be a resume state") from None
    except ValueError as exc:
        raise ResumeError(f"{path} is not a resume state: {exc}") from None
    if not isinstance(state, dict):
        raise ResumeError(f"{path} is not a resume state (not a JSON object)")
    return state


def write_position(backup_dir: str, state: Mapping[str, Any]) -> None:
    """Write ``state`` to ``backup_dir`` atomically (a reader sees the old or the new one)."""
    os.makedirs(backup_dir, exist_ok=True)
    final = os.path.join(backup_dir, POSITION_FILE)
    with atomic_file(final) as tmp, open(tmp, "w") as out:
        json.dump(state, out, sort_keys=True)


class Progress:
    """What the trainer has taken, as a resume point: the lowest untaken batch and the ones
    taken above it. ``length(epoch)`` gives an epoch's batch count once known (None before),
    so a cursor at an epoch's end rolls over to the next epoch's batch 0."""

    def __init__(self, start: ResumePoint, ordered: bool) -> None:
        self.cursor = start.cursor
        self._ordered = ordered  # batches come in plan order: each one is the cursor's
        self.taken: set[tuple[int, int]] = set(start.taken)
        self.length: int | None = None  # batches per epoch (the same for every epoch)

    def take(self, epoch: int, batch: int) -> None:
        if self._ordered:
            self.cursor = Cursor(epoch, batch + 1)
        else:
            self.taken.add((epoch, batch))
        self._advance()

    def set_length(self, length: int) -> None:
        self.length = length
        # (e, b) past an epoch's end is (e + b // L, b % L): taken ones too, so that the
        # walk below meets them
        if length:
            self.taken = {(e + b // length, b % length) for e, b in self.taken}
        self._advance()

    def _advance(self) -> None:
        """Move the cursor past the epoch's end and the batches taken above it. Each pass
        either rolls over once (by division: never a pass per epoch, whatever batch a state
        says) or drops one taken batch, so it ends within 2 * len(taken) + 2 passes."""
        cursor = self.cursor
        while True:
            if self.length and cursor.batch >= self.length:  # (an empty epoch: no rollover)
                epochs, batch = divmod(cursor.batch, self.length)
                cursor = Cursor(cursor.epoch + epochs, batch)
            elif (cursor.epoch, cursor.batch) in self.taken:
                self.taken.discard((cursor.epoch, cursor.batch))
                cursor = Cursor(cursor.epoch, cursor.batch + 1)
            else:
                break
        self.cursor = cursor

    def point(
        self, fingerprint: Mapping[str, Any], rest: Rest | None, samples: int | None
    ) -> ResumePoint:
        return ResumePoint(
            self.cursor, frozenset(self.taken), dict(fingerprint), rest=rest, samples=samples
        )
