"""``h5feed.merge_states``: the positions saved by the n trainers of a data-parallel job as
one position (the merge is :mod:`h5feed.consumer.position.merge`'s, guarantees 1-3 there),
and, with ``into=``, that position written as an ``h5feed.BackupAndRestore`` backup.

Guarantees (besides the merge's):

4. ``into=``: the merged position is written to that directory as an
   ``h5feed.BackupAndRestore`` backup, with the weights the first state's directory names
   (the ranks of a data-parallel job hold the same weights): the weights first, then the
   position, atomically, so a kill leaves no position naming missing weights. Nothing is
   written unless the merge succeeded.

Imports no Keras (``h5feed.merge_states`` runs where no trainer is): the backup's layout
(its weights files) is :mod:`h5feed.consumer.trainers.backup`'s, which loads Keras only
when a callback is made.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from typing import Any

from h5feed.common.errors import ResumeError
from h5feed.common.system.atomic import atomic_file
from h5feed.consumer.position import merge, resume
from h5feed.consumer.position.merge import StateLike
from h5feed.consumer.trainers.backup import WEIGHTS_FILES


def merge_states(
    states: Sequence[StateLike], into: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """One position from the states of every shard of a data-parallel job (each a
    ``stream.state()`` dict or an ``h5feed.BackupAndRestore`` directory), for ``resume=``
    with any ``shard=(j, m)``: the samples of the current epoch that no old shard took are
    dealt to the m new shards, then epochs go on with m shards. See
    :mod:`h5feed.consumer.position.merge`; ``into``: a directory to write it to as a backup
    (guarantee 4). Returns the merged state (with ``"weights"`` when written ``into`` a
    directory)."""
    loaded = merge.load_states(states)
    merged = merge.merge_loaded(loaded)
    if into is not None:
        merged = _write_backup(os.fspath(into), states[0], loaded[0][1], merged)
    return merged


def _write_backup(
    into: str, source: StateLike, saved: Mapping[str, Any], merged: dict[str, Any]
) -> dict[str, Any]:
    """Write ``merged`` into ``into`` as a backup with the weights ``source`` names."""
    if isinstance(source, Mapping):
        raise ResumeError(
            "merge_states(into=...): the first state must be a backup directory (its weights "
            "are copied)"
        )
    weights = saved.get("weights")
    if weights not in WEIGHTS_FILES:
        raise ResumeError(f"merge_states: {os.fspath(source)}: the position names no weights file")
    os.makedirs(into, exist_ok=True)
    origin = os.path.join(os.fspath(source), weights)
    target = os.path.join(into, weights)
    if os.path.realpath(origin) != os.path.realpath(target):
        with atomic_file(target) as tmp:
            shutil.copyfile(origin, tmp)
    merged = {**merged, "weights": weights}
    resume.write_position(into, merged)
    return merged
