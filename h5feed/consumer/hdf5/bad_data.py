"""The trainer's side of ``on_error``: samples the workers skipped, counted, listed and bounded.

A worker that meets a bad frame (:class:`~h5feed.common.errors.FrameError`: it does not decode,
or fails its stored CRC32) under ``on_error="skip"`` zero-fills that sample's clip and lists it
in its DATA (``skipped``: position, frame, reason). :class:`SkipLog` turns those lists into
the batch's ``valid`` key and the stream's figures.

Guarantees:

1. Every skipped sample is counted once (a part is accepted once), per epoch and in total, and
   the first :data:`LISTED` are kept with file, video, frame, epoch, sample and reason for
   ``stats()``; memory stays bounded however many are skipped.
2. The first skipped sample of each file is logged (WARNING) with file, video, frame and
   reason; later ones of that file are only counted.
3. More than ``max_skipped`` skipped samples in one epoch end the iteration with
   :class:`~h5feed.common.errors.TooManySkippedError` listing the first ones. The default
   (``max_skipped=None``) is 0.1% of this shard's samples per epoch, rounded up: at least 1
   for any non-empty epoch (1,000 samples: 1; 1,001: 2; 100,000: 100); 0 allows none.
4. Under ``on_error="raise"`` a DATA that lists skipped rows (a worker of other code) ends the
   iteration with a :class:`~h5feed.common.errors.DataError` naming file, video and frame: the
   policy is the trainer's.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
from typing import Any

import numpy as np

from h5feed.common.errors import DataError, TooManySkippedError
from h5feed.common.protocol.messages import SkippedRow
from h5feed.consumer.plan.epoch_plan import Index, PlannedBatch

#: Skipped samples kept, with where they are, for ``stats()["skipped_samples"]``.
LISTED = 100
#: The default ``max_skipped``: this share of an epoch's samples, rounded up.
DEFAULT_SHARE = 0.001


def default_max_skipped(epoch_samples: int) -> int:
    """``max_skipped`` when not given: 0.1% of ``epoch_samples``, rounded up."""
    return math.ceil(epoch_samples * DEFAULT_SHARE)


class SkipLog:
    """Skipped samples of one iteration (see the module docstring)."""

    def __init__(
        self,
        on_error: str,
        max_skipped: int | None,
        shard: tuple[int, int],
        clips_per_video: int,
        log: logging.LoggerAdapter[logging.Logger] | logging.Logger,
    ) -> None:
        self.on_error = on_error
        self._max = max_skipped
        self._shard = shard
        self._clips_per_video = clips_per_video
        self._log = log
        self._lock = threading.Lock()  # stats() reads from the trainer's thread
        self.total = 0
        self._per_epoch: collections.Counter[int] = collections.Counter()
        self._listed: list[dict[str, Any]] = []
        self._files_logged: set[str] = set()

    def limit(self, index: Index) -> int:
        """The most samples one epoch may skip."""
        if self._max is not None:
            return self._max
        first, count = self._shard
        samples = len(range(first, index.num_videos * self._clips_per_video, count))
        return default_max_skipped(samples)

    def record(
        self,
        index: Index,
        planned: PlannedBatch,
        positions: np.ndarray,
        skipped: tuple[SkippedRow, ...],
        worker: str,
    ) -> np.ndarray:
        """Account a part's ``skipped`` rows (``positions``: the part's rows in the batch);
        returns their positions in the batch. Raises as the module docstring says."""
        where = positions[[row.position for row in skipped]]
        entries = []
        for row, place in zip(skipped, where.tolist(), strict=True):
            video = int(planned.videos[place])
            entries.append(
                {
                    "file": index.file_names[video].decode(),
                    "video": index.names[video].decode(),
                    "frame": row.frame,
                    "epoch": planned.epoch,
                    "sample": int(planned.samples[place]),
                    "worker": worker,
                    "reason": row.reason,
                }
            )
        if self.on_error != "skip":
            first = entries[0]
            raise DataError(
                f"worker {worker} skipped a sample under on_error='raise': {first['reason']}",
                file=first["file"],
                video=first["video"],
                frame=first["frame"],
            )
        with self._lock:
            self.total += len(entries)
            self._per_epoch[planned.epoch] += len(entries)
            room = LISTED - len(self._listed)
            self._listed.extend(entries[:room])
            in_epoch = self._per_epoch[planned.epoch]
        for entry in entries:
            if entry["file"] not in self._files_logged:
                self._files_logged.add(entry["file"])
                self._log.warning(
                    "skipped a sample (on_error='skip'; later ones of this file are counted "
                    "in stats()['skipped']): %s",
                    entry["reason"],
                )
        limit = self.limit(index)
        if in_epoch > limit:
            listed = "; ".join(
                f"{e['file']} video {e['video']!r} frame {e['frame']}" for e in self._listed[:5]
            )
            raise TooManySkippedError(
                f"{in_epoch} samples of epoch {planned.epoch} skipped for bad frames, more "
                f"than max_skipped={limit} (on_error='skip'; default 0.1% of an epoch's "
                f"samples, rounded up); the first: {listed}"
            )
        return where

    def snapshot(self) -> dict[str, Any]:
        """``skipped`` (total), ``skipped_per_epoch`` and ``skipped_samples`` (the first
        :data:`LISTED`, each a dict: file, video, frame, epoch, sample, worker, reason)."""
        with self._lock:
            return {
                "skipped": self.total,
                "skipped_per_epoch": {str(e): n for e, n in sorted(self._per_epoch.items())},
                "skipped_samples": [dict(entry) for entry in self._listed],
            }
