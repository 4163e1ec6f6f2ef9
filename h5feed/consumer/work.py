"""The consumer's bookkeeping of workers and units: who owns which file, what each holds.

Kept apart from the coordinator's event loop so that the rules are plain functions:
file ownership (:func:`assign_files`) and the rows a worker receives (:func:`unit_rows`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from h5feed.consumer.plan import Index, PlannedBatch
from h5feed.consumer.stats import RateMeter


@dataclasses.dataclass
class Peer:
    """A connected worker."""

    identity: bytes
    name: str
    pid: int
    host: str
    files: list[int] = dataclasses.field(default_factory=list)
    outstanding: dict[int, float] = dataclasses.field(default_factory=dict)  # unit -> sent at
    last_progress: float = 0.0
    received: RateMeter = dataclasses.field(default_factory=RateMeter)  # its DATA parts
    unit_latency_s: float | None = None  # moving average, from UNIT sent to its DATA received

    def unit_done(self, unit_id: int, now: float) -> None:
        """Unit ``unit_id`` came back: it is no longer held, and its latency is averaged in."""
        sent = self.outstanding.pop(unit_id, now)
        latency = now - sent
        previous = self.unit_latency_s
        self.unit_latency_s = latency if previous is None else 0.8 * previous + 0.2 * latency
        self.last_progress = now


@dataclasses.dataclass
class Unit:
    """Rows of one batch handed to one worker."""

    id: int
    seq: int
    peer: bytes
    positions: np.ndarray  # rows of the batch this unit fills
    samples: list[int]
    in_slot: bool = False  # the worker writes the rows into the batch's shared-memory slot


def assign_files(sizes: Sequence[int], workers: int) -> np.ndarray:
    """The worker slot owning each file: largest files first, each to the least loaded slot.

    Deterministic (ties go to the lower index). Every file has exactly one owner; with more
    workers than files, some workers own nothing.
    """
    load = [0] * workers
    owner = np.zeros(len(sizes), np.int64)
    for file_index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        slot = min(range(workers), key=lambda s: (load[s], s))
        owner[file_index] = slot
        load[slot] += max(sizes[file_index], 1)
    return owner


def hand_over_files(files: Sequence[int], heirs: Sequence[Peer]) -> dict[bytes, list[int]]:
    """Give each of ``files`` (a leaving worker's) to the heir owning the fewest files so far
    (ties: the lowest identity); the heirs' ``files`` grow. Returns the files each heir took."""
    adopted: dict[bytes, list[int]] = {}
    for file_index in files:
        heir = min(heirs, key=lambda p: (len(p.files), p.identity))
        heir.files.append(file_index)
        adopted.setdefault(heir.identity, []).append(file_index)
    return adopted


def unit_rows(index: Index, planned: PlannedBatch) -> list[list[Any]]:
    """One UNIT row per sample of ``planned``, in batch order:
    ``[sample, file, video in file, start, crop top, crop left, flip, seed]``."""
    rows = zip(
        planned.samples.tolist(),
        index.file_of_video[planned.videos].tolist(),
        index.video_in_file[planned.videos].tolist(),
        planned.starts.tolist(),
        planned.crop_uniforms[:, 0].tolist(),
        planned.crop_uniforms[:, 1].tolist(),
        planned.flips.tolist(),
        planned.seeds.tolist(),
        strict=True,
    )
    return [list(row) for row in rows]


def is_valid_index(videos: Any) -> bool:
    """Whether an INDEX message's ``videos`` is a list of [name, frames >= 1, label]."""
    return isinstance(videos, list) and all(
        isinstance(v, list)
        and len(v) == 3
        and isinstance(v[0], str)
        and type(v[1]) is int
        and type(v[2]) is int
        and v[1] > 0
        for v in videos
    )
