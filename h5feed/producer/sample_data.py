"""A small, realistic sample dataset in h5feed's default HDF5 layout, made in seconds.

Layout (``group_per_video``), the one h5feed reads by default:

* one HDF5 file holds many videos; the file attribute ``h5feed_layout`` is
  ``"group_per_video"``;
* each video is a top-level group ``video_000``, ``video_001``, ... (numbering restarts in
  every file) holding a dataset ``frames_key`` of dtype ``h5py.vlen_dtype(np.uint8)`` and shape
  ``(n_frames,)``, whose elements are the bytes of one JPEG each (BGR in, so ``cv2.imdecode``
  gives BGR back), and an integer attribute ``label_key``.

Content: moving, natural-looking scenes (see ``h5feed.producer.sample_scenes``), the label
learnable from one frame and from motion alike. Labels are balanced within a file (each class
``videos_per_file // num_classes`` or one more times), in a shuffled order.

Everything is deterministic: the same :class:`SampleSpec` and file index give the same frames,
byte for byte (with the same OpenCV build). File ``i`` depends only on the spec and ``i``, so
files can be made in any order or in parallel.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping, Sequence

import h5py
import numpy as np
from numpy.typing import NDArray

from h5feed.common.system.atomic import atomic_file
from h5feed.producer.sample_scenes import video_frames

__all__ = [
    "LAYOUT",
    "LAYOUT_ATTR",
    "SampleSpec",
    "make_sample_dataset",
    "sample_file_name",
    "video_group_name",
    "write_sample_file",
    "write_video_file",
]

LAYOUT_ATTR = "h5feed_layout"
"""Name of the file attribute that names the layout."""
LAYOUT = "group_per_video"
"""Value of :data:`LAYOUT_ATTR` in the files written here."""

_MAX_INDEX = 1000  # names are zero-padded to 3 digits, so they sort like their numbers


@dataclasses.dataclass(frozen=True, slots=True)
class SampleSpec:
    """What :func:`make_sample_dataset` makes. Validated on construction (``ValueError``).

    ``files`` files of ``videos_per_file`` videos each; each video has a frame count drawn
    uniformly from ``[min_frames, max_frames]`` (both inclusive) of ``height`` x ``width``
    frames, JPEG-encoded at ``quality``. Labels are in ``[0, num_classes)``.
    """

    files: int = 4
    videos_per_file: int = 24
    min_frames: int = 24
    max_frames: int = 72
    height: int = 240
    width: int = 320
    num_classes: int = 4
    quality: int = 90
    seed: int = 0
    frames_key: str = "frames"
    label_key: str = "label"

    def __post_init__(self) -> None:
        def check_int(name: str, low: int, high: int | None = None) -> None:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an int, got {value!r}")
            if value < low or (high is not None and value > high):
                upper = "" if high is None else f" and <= {high}"
                raise ValueError(f"{name} must be >= {low}{upper}, got {value!r}")

        check_int("files", 1, _MAX_INDEX)
        check_int("videos_per_file", 1, _MAX_INDEX)
        check_int("min_frames", 1)
        check_int("max_frames", 1)
        if self.max_frames < self.min_frames:
            raise ValueError(
                f"max_frames ({self.max_frames}) must be >= min_frames ({self.min_frames})"
            )
        check_int("height", 16, 8192)
        check_int("width", 16, 8192)
        check_int("num_classes", 1, 1000)
        check_int("quality", 1, 100)
        check_int("seed", 0)
        for name in ("frames_key", "label_key"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or "/" in value or value == ".":
                raise ValueError(f"{name} must be a non-empty name without '/', got {value!r}")


def sample_file_name(file_index: int) -> str:
    """Name of sample file ``file_index``: ``sample_000.h5``, ``sample_001.h5``, ..."""
    return f"sample_{file_index:03d}.h5"


def video_group_name(video_index: int) -> str:
    """Name of the group of video ``video_index`` in its file: ``video_000``, ..."""
    return f"video_{video_index:03d}"


# --------------------------------------------------------------------------------------------
# Writing the layout


def _atomic_write(
    path: str | os.PathLike[str],
    videos: Iterable[tuple[str, Sequence[NDArray[np.uint8]], int | None]],
    frames_key: str,
    label_key: str,
) -> None:
    """Write ``videos`` (group name, encoded frames, label or None) to ``path`` atomically.

    The file is written as ``path + ".tmp"``, flushed to disk, then renamed over ``path``: a
    file under its final name is always complete. On error the temporary file is removed.
    """
    with atomic_file(os.fspath(path)) as tmp, h5py.File(tmp, "w") as f:
        f.attrs[LAYOUT_ATTR] = LAYOUT
        vlen = h5py.vlen_dtype(np.uint8)
        for name, frames, label in videos:
            group = f.create_group(name)
            # An object array of 1-D uint8 arrays; built element by element so that frames
            # of equal length are not stacked into a 2-D array.
            elements = np.empty(len(frames), dtype=object)
            for i, frame in enumerate(frames):
                elements[i] = frame
            group.create_dataset(frames_key, shape=(len(frames),), dtype=vlen, data=elements)
            if label is not None:
                group.attrs[label_key] = np.int64(label)


def write_video_file(
    path: str | os.PathLike[str],
    videos: Mapping[str, tuple[Sequence[bytes], int | None]],
    frames_key: str = "frames",
    label_key: str = "label",
) -> None:
    """Write the given JPEG byte strings and labels to ``path`` in the default layout.

    ``videos`` maps group name to (frames, label); each frame is stored as given (it need not
    be a valid JPEG, which is what tests of corrupt data want); a label of ``None`` leaves the
    attribute out. Groups are written in the mapping's order. Written atomically, like
    :func:`write_sample_file`.
    """
    _atomic_write(
        path,
        (
            (name, [np.frombuffer(bytes(b), dtype=np.uint8) for b in frames], label)
            for name, (frames, label) in videos.items()
        ),
        frames_key,
        label_key,
    )


# --------------------------------------------------------------------------------------------
# Making the pictures


def _file_labels(spec: SampleSpec, file_index: int) -> NDArray[np.int64]:
    """Balanced labels of the videos of file ``file_index``, in a shuffled order."""
    rng = np.random.default_rng([spec.seed, file_index])
    offset = int(rng.integers(spec.num_classes))
    labels = (np.arange(spec.videos_per_file, dtype=np.int64) + offset) % spec.num_classes
    rng.shuffle(labels)
    return labels


def _sample_videos(
    spec: SampleSpec, file_index: int
) -> Iterable[tuple[str, list[NDArray[np.uint8]], int]]:
    """The videos of sample file ``file_index``, made one at a time."""
    labels = _file_labels(spec, file_index)
    for v in range(spec.videos_per_file):
        rng = np.random.default_rng([spec.seed, file_index, v])
        n_frames = int(rng.integers(spec.min_frames, spec.max_frames + 1))
        label = int(labels[v])
        yield (
            video_group_name(v),
            video_frames(
                rng,
                label,
                n_frames,
                height=spec.height,
                width=spec.width,
                num_classes=spec.num_classes,
                quality=spec.quality,
            ),
            label,
        )


def write_sample_file(path: str | os.PathLike[str], spec: SampleSpec, file_index: int) -> None:
    """Write sample file ``file_index`` of ``spec`` to ``path``, atomically.

    The file holds ``spec.videos_per_file`` videos ``video_000``, ... in the default layout
    (see the module docstring). Its content depends only on ``spec`` (not on ``spec.files``)
    and ``file_index``. It is written as ``path + ".tmp"`` and renamed to ``path`` when
    complete, so ``path`` either does not exist or is a complete file; a stale ``.tmp`` from an
    interrupted run is overwritten.
    """
    if not isinstance(file_index, int) or isinstance(file_index, bool) or file_index < 0:
        raise ValueError(f"file_index must be an int >= 0, got {file_index!r}")
    _atomic_write(path, _sample_videos(spec, file_index), spec.frames_key, spec.label_key)


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def make_sample_dataset(
    directory: str | os.PathLike[str],
    spec: SampleSpec = SampleSpec(),  # frozen, so sharing it is safe
    progress: Callable[[int, int], None] | None = None,
    *,
    processes: int | None = None,
) -> list[pathlib.Path]:
    """Make the sample dataset ``spec`` in ``directory`` and return its files, sorted.

    Creates ``directory`` (and parents) if needed, then writes ``sample_000.h5``, ...,
    one per ``spec.files``, with :func:`write_sample_file`. A file that already exists under its
    final name is complete (writing is atomic) and is kept as it is, not checked against
    ``spec``. ``progress(done, total)`` is called once per file, kept or written, in the
    calling process, with ``done`` counting up to ``total == spec.files``.

    Files are written in parallel by ``processes`` threads (no child process, so safe to call
    from any program); by default one per available CPU, at most one per missing file. With
    ``processes=1``, or a single missing file, everything runs in the calling thread.
    """
    if processes is not None and (not isinstance(processes, int) or processes < 1):
        raise ValueError(f"processes must be an int >= 1 or None, got {processes!r}")
    root = pathlib.Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    paths = [root / sample_file_name(i) for i in range(spec.files)]
    total = len(paths)
    todo = [i for i, p in enumerate(paths) if not p.exists()]
    done = 0
    for _ in range(total - len(todo)):
        done += 1
        if progress is not None:
            progress(done, total)

    workers = min(len(todo), processes if processes is not None else _available_cpus())
    if workers <= 1:
        for i in todo:
            write_sample_file(paths[i], spec, i)
            done += 1
            if progress is not None:
                progress(done, total)
    else:
        # Threads, not processes: OpenCV and NumPy release the GIL for the heavy work, and a
        # process pool would re-import the caller's __main__ (a script without a main guard).
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(write_sample_file, paths[i], spec, i) for i in todo]
            for future in concurrent.futures.as_completed(futures):
                future.result()
                done += 1
                if progress is not None:
                    progress(done, total)
    return sorted(paths)
