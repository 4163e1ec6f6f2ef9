"""The files of the object-storage study (``h5feed bench object-storage --layout``): the sample
writer's groups, or what ``h5feed pack`` writes from the same frames (the layout teams are
told to upload: a pack index, so learning a file's index is one read, and a CRC per frame).

The packed files hold the sample files' JPEG bytes byte for byte (``h5feed pack`` stores JPEG
images as they are), one video per sample video, in at most as many shards as sample files (a
shard size of the JPEG bytes over the file count, plus the largest video's: a video is never
split). No labels (no class folders): the study reads clips, not labels.
"""

from __future__ import annotations

import argparse
import math
import pathlib

import h5py

from h5feed.pack.run import PackSettings, pack
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

__all__ = ["LAYOUTS", "frame_label", "study_files", "study_spec"]

LAYOUTS = ("groups", "pack")


def study_spec(args: argparse.Namespace) -> SampleSpec:
    """The sample videos the study writes, from its arguments (``--files``, ``--videos``,
    ``--min-frames``, ``--max-frames``, ``--frame-size``): the same for every server."""
    height, width = args.frame_size
    return SampleSpec(
        files=args.files, videos_per_file=args.videos, min_frames=args.min_frames,
        max_frames=args.max_frames, height=height, width=width, seed=3,
    )  # fmt: skip


def frame_label(spec: SampleSpec) -> str:
    """``spec``'s frames as the study's JSON names them (``240x320``)."""
    return f"{spec.height}x{spec.width}"


def study_files(root: pathlib.Path, spec: SampleSpec, layout: str) -> list[str]:
    """The study's files in ``root/data`` (sorted paths), written in ``layout``."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "groups":
        return sorted(str(p) for p in make_sample_dataset(root / "data", spec))
    samples = make_sample_dataset(root / "samples", spec)
    source = root / "frames"
    jpeg_bytes = largest = 0
    for sample in samples:  # source/<file>_<video>/<frame>.jpg
        with h5py.File(sample, "r") as h5:
            for name in sorted(h5):
                folder = source / f"{sample.stem}_{name}"
                folder.mkdir(parents=True)
                video = 0
                for i, frame in enumerate(h5[name]["frames"][()]):
                    (folder / f"{i:05d}.jpg").write_bytes(frame.tobytes())
                    video += len(frame)
                jpeg_bytes, largest = jpeg_bytes + video, max(largest, video)
    # each shard but the last holds at least jpeg_bytes / files: at most spec.files shards
    shard = math.ceil(jpeg_bytes / spec.files) + largest
    pack(source, root / "data", PackSettings(shard_size=shard))
    return sorted(str(p) for p in (root / "data").glob("*.h5"))
