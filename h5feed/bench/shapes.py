"""Dataset shapes of ``h5feed bench --dataset``: how many files, and how many videos in each.

Two ways to write one shape (argparse only here: cheap to import):

* ``FILESxVIDEOS`` (``32x12``): FILES files of VIDEOS videos each;
* ``V1+V2+...`` (``60+10+5+5``): one file per term, of that many videos: files of very
  unequal sizes.

A comma-separated list (``1x60,2x30,3x20,5x12,60+10+5+5``) is a file-count sweep: the
benchmark runs once per shape over the same contenders (:mod:`h5feed.bench.sweep`).

Files are the sample data's (:func:`h5feed.producer.sample_data.make_sample_dataset`): one
dataset per distinct (file count, videos per file), kept and reused under ``--data-dir``; a
``FILESxVIDEOS`` shape is exactly today's dataset of that spec.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import pathlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the sample data's module imports h5py and cv2: not for --help
    from h5feed.producer.sample_data import SampleSpec

#: The most files or videos per file one shape may ask for (the bench makes them all).
_MAX_FILES = 100_000
_MAX_VIDEOS = 1_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class DatasetShape:
    """Videos per file, in file order, and the text it was written as."""

    sizes: tuple[int, ...]
    text: str

    @property
    def files(self) -> int:
        return len(self.sizes)

    @property
    def videos(self) -> int:
        return sum(self.sizes)

    def specs(self, base: SampleSpec) -> list[SampleSpec]:
        """One sample-data spec per distinct size (``base`` otherwise), in order of first
        appearance; a uniform shape is one spec."""
        counts = collections.Counter(self.sizes)
        return [
            dataclasses.replace(base, files=counts[size], videos_per_file=size)
            for size in dict.fromkeys(self.sizes)
        ]


def parse_dataset_shape(text: str) -> tuple[int, int]:
    """``FILESxVIDEOS`` (e.g. ``120x4``) as two positive ints."""
    try:
        files, videos = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected FILESxVIDEOS (e.g. 120x4), got {text!r}"
        ) from None
    if files < 1 or videos < 1:
        raise argparse.ArgumentTypeError(f"files and videos must be >= 1, got {text!r}")
    return files, videos


def _one_shape(text: str) -> DatasetShape:
    text = text.strip()
    if "+" in text:
        try:
            sizes = tuple(int(part) for part in text.split("+"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected videos per file joined by + (e.g. 60+10+5+5), got {text!r}"
            ) from None
        if min(sizes) < 1:
            raise argparse.ArgumentTypeError(f"every file needs >= 1 video, got {text!r}")
    else:
        files, videos = parse_dataset_shape(text)
        if files > _MAX_FILES:
            raise argparse.ArgumentTypeError(f"at most {_MAX_FILES} files, got {text!r}")
        sizes = (videos,) * files
    if len(sizes) > _MAX_FILES or max(sizes) > _MAX_VIDEOS:
        raise argparse.ArgumentTypeError(
            f"at most {_MAX_FILES} files of {_MAX_VIDEOS} videos, got {text!r}"
        )
    return DatasetShape(sizes, text.lower())


def parse_dataset_shapes(text: str) -> list[DatasetShape]:
    """``--dataset``: one shape or a comma-separated list of them (module docstring)."""
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected FILESxVIDEOS or V1+V2+..., got {text!r}")
    return [_one_shape(part) for part in parts]


def prepare_shape(data_dir: pathlib.Path, base: SampleSpec, shape: DatasetShape) -> list[str]:
    """The files of ``shape`` (made where missing), in the shape's file order."""
    from h5feed.bench.workload import prepare_dataset  # h5py, cv2: only when it runs

    by_size: dict[int, list[str]] = {}
    for spec in shape.specs(base):
        by_size[spec.videos_per_file] = prepare_dataset(data_dir, spec)
    used = collections.Counter[int]()
    paths = []
    for size in shape.sizes:
        paths.append(by_size[size][used[size]])
        used[size] += 1
    return paths
