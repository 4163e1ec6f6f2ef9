"""The per-core limit: the workload's per-clip work in one process, with no IPC.

:class:`PerCoreLimit` (a contender of ``h5feed bench``) produces whole batches of an epoch
plan into one preallocated array. :class:`SingleProcess` (used by
``benchmarks/core_bench.py``) produces one clip per step in two spellings that give the same
pixels: ``direct`` (:func:`~h5feed.bench.workload.produce_direct`) and ``clipwriter``
(h5feed's reader, ``decode_frame`` and ``ClipWriter``, the worker's own per-frame code).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from h5feed.bench.contender import Contender, Setup
from h5feed.bench.workload import (
    BATCH_SIZE,
    CLIP_LEN,
    CLIP_SHAPE,
    CROP,
    RESIZE,
    ClipReader,
    PlannedClip,
    epoch_plan,
    index_videos,
    plan_clips,
)
from h5feed.common.config import ClipSpec
from h5feed.producer.decode import ClipWriter, decode_frame
from h5feed.producer.reader import VideoFile

PLANNED_CLIPS = 4096  # SingleProcess cycles through this many planned clips


class PerCoreLimit(Contender):
    """Batches of the epoch plan, each clip written straight into its row of one array."""

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.reader = ClipReader(setup.paths)
        self.out = np.empty((BATCH_SIZE, *CLIP_SHAPE), np.uint8)
        self.epoch = 0
        self.plan: list[PlannedClip] = []
        self.next_clip = 0

    def next_frames(self) -> np.ndarray:
        if self.next_clip >= len(self.plan):
            if self.setup.epochs is not None and self.epoch >= self.setup.epochs:
                raise StopIteration
            self.plan = epoch_plan(self.setup.videos, self.setup.seed, self.epoch)
            self.epoch += 1
            self.next_clip = 0
        clips = self.plan[self.next_clip : self.next_clip + BATCH_SIZE]
        self.next_clip += len(clips)
        for row, clip in enumerate(clips):
            self.reader.clip(clip, self.out[row])
        return self.out[: len(clips)]

    def close(self) -> None:
        self.reader.close()


class SingleProcess:
    """One clip per :meth:`take`, written round-robin into the rows of one preallocated
    [batch, clip_len, 112, 112, 3] array: ``variant="direct"`` or ``"clipwriter"``."""

    def __init__(self, paths: Sequence[str], variant: str, seed: int) -> None:
        if variant not in ("direct", "clipwriter"):
            raise ValueError(f"unknown variant {variant!r}")
        self.variant = variant
        self.paths = list(paths)
        self.seed = seed
        self.files: list[VideoFile] = []
        self.reader = ClipReader(paths)
        self.plan: list[PlannedClip] = []
        self.out = np.empty((BATCH_SIZE, *CLIP_SHAPE), np.uint8)
        self.writer = ClipWriter(ClipSpec(clip_len=CLIP_LEN, resize=RESIZE, crop=CROP, flip=True))
        self._next = 0

    def start(self) -> None:
        self.files = [VideoFile(path) for path in self.paths]
        self.plan = plan_clips(index_videos(self.paths), PLANNED_CLIPS, self.seed)

    def take(self) -> int:
        clip = self.plan[self._next % len(self.plan)]
        out = self.out[self._next % BATCH_SIZE]
        self._next += 1
        if self.variant == "direct":
            self.produce_direct(clip, out)
        else:
            self.produce_clipwriter(clip, out)
        return 1

    def worker_pids(self) -> list[int]:
        return []

    def produce_direct(self, clip: PlannedClip, out: np.ndarray) -> None:
        """``clip`` into ``out`` with plain h5py and cv2 calls (the cheapest spelling)."""
        self.reader.clip(clip, out)

    def produce_clipwriter(self, clip: PlannedClip, out: np.ndarray) -> None:
        """The same clip through h5feed's reader and decode code, as ``_Job.produce`` runs
        them per row (without the unit and the wire around it)."""
        handle = self.files[clip.file_index]
        encoded = handle.read_frames(clip.video, clip.indices)
        for t, (data, frame) in enumerate(zip(encoded, clip.indices, strict=True)):
            image = decode_frame(data, handle.path, clip.video, frame)
            where = (handle.path, clip.video, frame)
            self.writer.write(out[t], image, clip.crop_uniforms, clip.flip, where)

    def close(self) -> None:
        for handle in self.files:
            handle.close()
        self.files = []
        self.reader.close()


def check_variants_agree(paths: Sequence[str], seed: int, clips: int = 4) -> None:
    """Both :class:`SingleProcess` spellings must give the same pixels for the same planned
    clips (so the cheaper one does the same work, not less). Raises AssertionError otherwise."""
    contender = SingleProcess(paths, "direct", seed)
    contender.start()
    try:
        for clip in contender.plan[:clips]:
            a = np.empty(CLIP_SHAPE, np.uint8)
            b = np.empty_like(a)
            contender.produce_direct(clip, a)
            contender.produce_clipwriter(clip, b)
            if not np.array_equal(a, b):
                raise AssertionError(f"per-core variants disagree on a clip of {clip.video}")
    finally:
        contender.close()
