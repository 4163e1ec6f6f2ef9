"""The per-core limit: the workload's per-clip work in one process, with no IPC.

:class:`PerCoreLimit` (a contender of ``h5feed bench``) produces whole batches of an epoch
plan into one preallocated array with the cheapest spelling of the per-clip work
(:func:`~h5feed.bench.workload.produce_direct`). Before it runs, :func:`check_same_pixels`
checks that this spelling gives the pixels h5feed's own worker code gives (reader,
``decode_frame``, ``ClipWriter``): the limit does the same work, not less.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
from collections.abc import Sequence
from multiprocessing.sharedctypes import SynchronizedArray
from typing import Any

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
)
from h5feed.common.config import ClipSpec
from h5feed.producer.decode import ClipWriter, decode_frame
from h5feed.producer.reader import VideoFile


class PerCoreLimit(Contender):
    """Batches of the epoch plan, each clip written straight into its row of one array."""

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.reader = ClipReader(setup.paths)
        self.out = np.empty((BATCH_SIZE, *CLIP_SHAPE), np.uint8)
        self.epoch = 0
        self.plan: list[PlannedClip] = []
        self.next_clip = 0

    def start(self) -> None:
        check_same_pixels(self.setup.paths, self.setup.seed)

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


class ParallelPerCore(PerCoreLimit):
    """``setup.workers`` copies of the per-core limit at once: this process and
    ``workers - 1`` children, each on plans of its own seed, sharing nothing but the machine.

    What this machine gives N processes that never talk to each other: the ceiling of any
    loader with N workers, a shade under N x the per-core limit (other processes, interrupts,
    shared caches). The children count their clips in shared memory, added to this process's
    by :meth:`clips_elsewhere`; their CPU is the "worker CPU" of the row. A one-epoch instance
    (the runner's check) runs no children: it is the per-core limit's own check."""

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self._counts: Any = None
        self._children: list[multiprocessing.process.BaseProcess] = []

    def start(self) -> None:
        super().start()
        if self.setup.epochs is not None or self.setup.workers < 2:
            return
        context = multiprocessing.get_context("spawn")
        self._counts = context.Array("q", self.setup.workers - 1, lock=False)
        for copy in range(1, self.setup.workers):
            child = context.Process(
                target=_run_copy,
                args=(self.setup, copy, self._counts, os.getpid()),
                name=f"per-core-copy-{copy}",
                daemon=True,
            )
            child.start()
            self._children.append(child)

    def clips_elsewhere(self) -> int:
        return 0 if self._counts is None else int(sum(self._counts))

    def close(self) -> None:
        for child in self._children:
            child.terminate()
        for child in self._children:
            child.join(timeout=10)
        super().close()


def _run_copy(setup: Setup, copy: int, counts: SynchronizedArray[int], parent: int) -> None:
    """A child of :class:`ParallelPerCore`: the per-core limit forever, on seed + copy, until
    its parent is gone."""
    limit = PerCoreLimit(dataclasses.replace(setup, seed=setup.seed + copy))
    while os.getppid() == parent:
        counts[copy - 1] += len(limit.next_frames())


def check_same_pixels(paths: Sequence[str], seed: int, clips: int = 4) -> None:
    """The first ``clips`` clips of epoch 0 through :class:`ClipReader` and through h5feed's
    worker code must be equal. Raises AssertionError naming the video otherwise."""
    reader = ClipReader(paths)
    files = [VideoFile(path) for path in paths]
    writer = ClipWriter(ClipSpec(clip_len=CLIP_LEN, resize=RESIZE, crop=CROP, flip=True))
    try:
        for clip in epoch_plan(index_videos(paths), seed, 0)[:clips]:
            direct = reader.clip(clip)
            ours = np.empty_like(direct)
            handle = files[clip.file_index]
            encoded = handle.read_frames(clip.video, clip.indices)
            for t, (data, frame) in enumerate(zip(encoded, clip.indices, strict=True)):
                image = decode_frame(data, handle.path, clip.video, frame)
                where = (handle.path, clip.video, frame)
                writer.write(ours[t], image, clip.crop_uniforms, clip.flip, where)
            if not np.array_equal(direct, ours):
                raise AssertionError(f"the per-core limit's pixels differ on {clip.video}")
    finally:
        reader.close()
        for handle in files:
            handle.close()
