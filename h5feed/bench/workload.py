"""The benchmark's workload, shared by every contender: data, clip plan and per-clip work.

Workload: 16-frame clips of 320x240 JPEG videos stored in HDF5 (h5feed's sample dataset),
resized to (128, 171) with ``cv2.INTER_LINEAR``, randomly cropped to (112, 112), randomly
flipped, RGB, batches of 8, one clip per video per epoch, shuffled.

Every contender that decodes with OpenCV calls :func:`produce_direct` for each clip, so they
all do the same per-clip work (h5py slice read, ``cv2.imdecode``, ``cv2.resize``, crop,
``cv2.cvtColor``, ``cv2.flip``); only the way clips travel to the trainer differs.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pathlib
import threading
from collections.abc import Sequence
from typing import Any

import cv2
import h5py
import numpy as np

from h5feed.common.config import clip_frame_indices
from h5feed.producer.reader import VideoFile
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset
from h5feed.producer.worker.decode import crop_offset

CLIP_LEN = 16
RESIZE = (128, 171)  # (height, width)
CROP = (112, 112)  # (height, width)
BATCH_SIZE = 8
CLIP_SHAPE = (CLIP_LEN, *CROP, 3)
BATCH_BYTES = BATCH_SIZE * CLIP_LEN * CROP[0] * CROP[1] * 3

#: The benchmark dataset: 384 videos (48 batches per epoch) in 32 files, so up to 32 h5feed
#: workers each own a file. ``--quick`` uses a tiny one.
FULL_SPEC = SampleSpec(files=32, videos_per_file=12)
QUICK_SPEC = SampleSpec(files=2, videos_per_file=4)

cv2.setNumThreads(1)  # parallelism comes from each contender's own workers or threads


@dataclasses.dataclass(frozen=True, slots=True)
class VideoRef:
    """One video of the dataset: which file, its group name and frame count."""

    file_index: int
    name: str
    frames: int


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedClip:
    """One random clip: where it is, and its crop and flip (as h5feed's plan would draw them)."""

    file_index: int
    video: str
    indices: list[int]
    crop_uniforms: tuple[float, float]
    top: int
    left: int
    flip: bool


def dataset_dir(data_dir: pathlib.Path, spec: SampleSpec) -> pathlib.Path:
    """Where the dataset of ``spec`` lives under ``data_dir``: one sub-directory per spec, so a
    quick run's tiny dataset never stands in for the full one."""
    name = f"{spec.files}x{spec.videos_per_file}_{spec.width}x{spec.height}_q{spec.quality}"
    return data_dir / f"{name}_seed{spec.seed}"


def prepare_dataset(data_dir: pathlib.Path, spec: SampleSpec) -> list[str]:
    """Make the dataset if missing (complete files are kept) and return its file paths."""
    return [str(p) for p in make_sample_dataset(dataset_dir(data_dir, spec), spec)]


def index_videos(paths: Sequence[str]) -> list[VideoRef]:
    """Every video of ``paths``, file by file, in h5feed's index order."""
    videos = []
    for file_index, path in enumerate(paths):
        handle = VideoFile(path)
        try:
            videos += [VideoRef(file_index, name, n) for name, n, _label in handle.index()]
        finally:
            handle.close()
    return videos


def draw_clip(rng: np.random.Generator, video: VideoRef) -> PlannedClip:
    """A random clip of ``video``: uniform start, crop offsets and a fair flip, placed with
    h5feed's own :func:`crop_offset`, so a clip is cropped exactly where a worker would."""
    start = int(rng.integers(max(video.frames - CLIP_LEN, 0) + 1))
    uy, ux = float(rng.random()), float(rng.random())
    return PlannedClip(
        file_index=video.file_index,
        video=video.name,
        indices=clip_frame_indices(start, video.frames, CLIP_LEN, 1, "loop"),
        crop_uniforms=(uy, ux),
        top=crop_offset(RESIZE[0], CROP[0], uy, "random"),
        left=crop_offset(RESIZE[1], CROP[1], ux, "random"),
        flip=bool(rng.integers(2)),
    )


def epoch_plan(videos: Sequence[VideoRef], seed: int, epoch: int) -> list[PlannedClip]:
    """One epoch: every video once, in an order and with clips drawn from ``(seed, epoch)``."""
    rng = np.random.default_rng([seed, epoch])
    return [draw_clip(rng, videos[int(i)]) for i in rng.permutation(len(videos))]


def is_contiguous(indices: Sequence[int]) -> bool:
    """Whether ``indices`` are consecutive increasing frame numbers (one slice read)."""
    return all(b - a == 1 for a, b in itertools.pairwise(indices))


def read_encoded(dataset: h5py.Dataset, indices: Sequence[int]) -> Sequence[np.ndarray]:
    """The encoded frames at ``indices``: one slice read when they are consecutive."""
    if is_contiguous(indices):
        encoded: Sequence[np.ndarray] = dataset[indices[0] : indices[-1] + 1]
        return encoded
    return [dataset[i] for i in indices]


def produce_direct(dataset: h5py.Dataset, clip: PlannedClip, out: np.ndarray) -> None:
    """Read, decode and preprocess ``clip`` into ``out`` [clip_len, 112, 112, 3] uint8 RGB with
    plain h5py and cv2 calls: the cheapest spelling of the per-clip work."""
    top, left, flip = clip.top, clip.left, clip.flip
    bottom, right = top + CROP[0], left + CROP[1]
    resize_wh = (RESIZE[1], RESIZE[0])
    for t, data in enumerate(read_encoded(dataset, clip.indices)):
        image = cv2.imdecode(data, cv2.IMREAD_COLOR)
        if image is None:
            raise ValueError(f"undecodable frame {clip.indices[t]} of {clip.video}")
        small = cv2.resize(image, resize_wh, interpolation=cv2.INTER_LINEAR)
        frame = out[t]
        cv2.cvtColor(small[top:bottom, left:right], cv2.COLOR_BGR2RGB, dst=frame)
        if flip:
            cv2.flip(frame, 1, dst=frame)


class ClipReader:
    """The dataset's files, opened lazily in the process that reads them.

    Guarantees: h5py handles are never used across ``fork`` (a reader copied into a forked
    or spawned process opens its own files on first use) and never pickled (pickling drops
    them), so one reader can be handed to any loader's worker processes. Calls from several
    threads are safe (h5py serialises its calls; a race at worst opens a dataset twice).
    """

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)
        self._lock = threading.Lock()
        self._pid = -1
        self._files: list[h5py.File] = []
        self._datasets: dict[tuple[int, str], h5py.Dataset] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"paths": self.paths}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["paths"])  # type: ignore[misc]

    def dataset(self, file_index: int, video: str) -> h5py.Dataset:
        """The frames dataset of ``video`` in file ``file_index``."""
        key = (file_index, video)
        if self._pid == os.getpid():
            found = self._datasets.get(key)
            if found is not None:
                return found
        with self._lock:
            if self._pid != os.getpid():  # first use in this process: drop inherited handles
                self._files = [h5py.File(path, "r") for path in self.paths]
                self._datasets = {}
                self._pid = os.getpid()
            found = self._datasets.get(key)
            if found is None:
                found = self._datasets[key] = self._files[file_index][video]["frames"]
            return found

    def clip(self, clip: PlannedClip, out: np.ndarray | None = None) -> np.ndarray:
        """``clip`` decoded and preprocessed, into ``out`` or a new array."""
        if out is None:
            out = np.empty(CLIP_SHAPE, np.uint8)
        produce_direct(self.dataset(clip.file_index, clip.video), clip, out)
        return out

    def encoded(self, clip: PlannedClip) -> list[bytes]:
        """The JPEG bytes of ``clip``'s frames."""
        dataset = self.dataset(clip.file_index, clip.video)
        return [bytes(frame) for frame in read_encoded(dataset, clip.indices)]

    def close(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                for handle in self._files:
                    handle.close()
            self._pid, self._files, self._datasets = -1, [], {}
