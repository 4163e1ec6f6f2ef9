"""The per-core limit: the workload's per-clip work in one process, with no IPC.

:class:`PerCoreLimit` (a contender of ``h5feed bench``) produces whole batches of an epoch
plan into one preallocated array with the cheapest spelling of the per-clip work
(:func:`~h5feed.bench.workload.produce_direct`). Before it runs, :func:`check_same_pixels`
checks that this spelling gives the pixels h5feed's own worker code gives (reader,
``ClipWriter.write_encoded``): the limit does the same work, not less.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import time
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
from h5feed.producer.reader import VideoFile
from h5feed.producer.worker.decode import ClipWriter

_POLL_S = 0.01  # the parallel limit's timing process wakes this often to count (~0.1 % CPU)
_FIRST_BATCH_TIMEOUT_S = 300.0  # a spawned interpreter importing cv2 and h5py, busy machine


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
    """``setup.workers`` copies of the per-core limit at once, each a child process on plans
    of its own seed (``seed + copy``), sharing nothing but the machine; this process only
    counts their clips.

    What this machine gives N processes that never talk to each other: the ceiling of any
    loader with N workers, a shade under N x the per-core limit (other processes, interrupts,
    shared caches).

    Accounting (what the report's columns mean for this row):

    1. Every copy is a child: the row's "worker CPU" (the timing process's descendants) is
       the CPU of all N copies, and its "trainer CPU" is this process's counting alone, near
       zero. The N copies are alike: none shares its process with the timing loop and the
       ``/proc`` reads of :func:`~h5feed.bench.measure.measure_window`, so the row keeps its
       meaning, N x one core's bare loop, and ``measure.py`` needs no rule for one
       contender. (Until 2026-11-26 one copy ran in this process, so its CPU was counted as
       trainer CPU and the worker column left it out.)
    2. :meth:`next_frames` sleeps ``_POLL_S`` and returns an empty batch; a window's clips
       are what the copies' counters in shared memory grew by between its ends
       (:meth:`clips_elsewhere`). Its first call returns only once every copy has made a
       batch, so the copies' start-up (a spawned interpreter) is not timed.
    3. A copy that exits, or makes no first batch within ``_FIRST_BATCH_TIMEOUT_S``, is a
       RuntimeError naming it: a row never reports the clips of fewer copies than it says.
    4. A one-epoch instance (the runner's check) runs no children: it is the per-core
       limit's own check, in this process.
    """

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self._counts: Any = None
        self._children: list[multiprocessing.process.BaseProcess] = []
        self._started = False
        self._nothing = np.empty((0, *CLIP_SHAPE), np.uint8)

    def start(self) -> None:
        super().start()
        if self.setup.epochs is not None:
            return
        context = multiprocessing.get_context("spawn")
        self._counts = context.Array("q", self.setup.workers, lock=False)
        for copy in range(self.setup.workers):
            child = context.Process(
                target=_run_copy,
                args=(self.setup, copy, self._counts, os.getpid()),
                name=f"per-core-copy-{copy}",
                daemon=True,
            )
            child.start()
            self._children.append(child)

    def next_frames(self) -> np.ndarray:
        if self._counts is None:  # the one-epoch check: the per-core limit itself
            return super().next_frames()
        if not self._started:
            self._wait_for_every_copy()
            self._started = True
        time.sleep(_POLL_S)
        self._check_copies()
        return self._nothing

    def _wait_for_every_copy(self) -> None:
        deadline = time.monotonic() + _FIRST_BATCH_TIMEOUT_S
        while min(self._counts) == 0:
            self._check_copies()
            if time.monotonic() > deadline:
                idle = [copy for copy, count in enumerate(self._counts) if count == 0]
                raise RuntimeError(
                    f"copies {idle} of the per-core limit made no batch in "
                    f"{_FIRST_BATCH_TIMEOUT_S:.0f} s"
                )
            time.sleep(_POLL_S)

    def _check_copies(self) -> None:
        for copy, child in enumerate(self._children):
            if child.exitcode is not None:
                raise RuntimeError(
                    f"copy {copy} of the per-core limit (pid {child.pid}) exited with code "
                    f"{child.exitcode}"
                )

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
        counts[copy] += len(limit.next_frames())


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
            writer.write_encoded(
                ours, encoded, clip.indices, clip.crop_uniforms, clip.flip, handle.path, clip.video
            )
            if not np.array_equal(direct, ours):
                raise AssertionError(f"the per-core limit's pixels differ on {clip.video}")
    finally:
        reader.close()
        for handle in files:
            handle.close()
