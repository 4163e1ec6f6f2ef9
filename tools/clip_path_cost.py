"""What a worker's per-clip code costs beyond the per-core limit's, in one process, no IPC.

``python tools/clip_path_cost.py DIR [--rounds 6] [--no-codecs]`` makes the clips of two
epochs of ``h5feed bench``'s workload over the HDF5 files in ``DIR`` (16-frame clips resized
to 128x171, cropped to 112x112, flipped, batches of 8) two ways, round after round, each into
the same batch array: ``limit``, the per-core limit's spelling
(:func:`h5feed.bench.workload.produce_direct`), and ``worker``, h5feed's worker code
(:class:`h5feed.producer.worker.clips.ClipMaker`: the layout's reader, the checks, the
decode and the writer, with the default ``max_frame_pixels``), the two sides in turn in
A-B-B-A order. It prints the median CPU ms per clip of each, their difference, and the median
of each round's difference between its two back-to-back runs (the figure to read on a
machine whose speed drifts: rounds here spread by 10 % or more).

``--no-codecs`` replaces OpenCV's imdecode, resize, cvtColor and flip by calls that return at
once (h5py's reads stay): what is left is each side's Python and h5py, so the difference is
the worker's own Python per clip. ``h5feed bench`` cannot tell 1 % apart between runs on a
shared machine; this can (it measured the worker's one loop per clip, issue 37).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import time
from collections.abc import Callable

import cv2
import numpy as np

from h5feed.bench.workload import (
    BATCH_SIZE,
    CLIP_LEN,
    CLIP_SHAPE,
    CROP,
    RESIZE,
    ClipReader,
    epoch_plan,
    index_videos,
)
from h5feed.common.config import ClipSpec
from h5feed.common.layouts import Auto
from h5feed.common.protocol.message_records import Row
from h5feed.producer.worker.clips import ClipMaker
from h5feed.producer.worker.code_policy import CodePolicy


def without_codecs() -> None:
    """OpenCV's per-frame calls replaced by ones that return at once (this process only)."""
    decoded = np.zeros((240, 320, 3), np.uint8)
    resized = np.zeros((*RESIZE, 3), np.uint8)
    stub: dict[str, object] = {
        "imdecode": lambda data, flag: decoded,
        "resize": lambda image, size, interpolation=None: resized,
        "cvtColor": lambda image, code, dst=None: dst,
        "flip": lambda image, code, dst=None: dst,
    }
    for name, call in stub.items():
        setattr(cv2, name, call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=pathlib.Path, help="HDF5 files of the groups layout")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--no-codecs", action="store_true", help="time the Python alone")
    args = parser.parse_args()
    paths = sorted(str(p) for p in args.directory.glob("*.h5"))
    if not paths:
        parser.error(f"no .h5 files in {args.directory}")
    videos = index_videos(paths)
    plan = epoch_plan(videos, 0, 0) + epoch_plan(videos, 0, 1)
    if args.no_codecs:
        without_codecs()
    out = np.empty((BATCH_SIZE, *CLIP_SHAPE), np.uint8)
    reader = ClipReader(paths)
    maker = ClipMaker(ClipSpec(clip_len=CLIP_LEN, resize=RESIZE, crop=CROP, flip=True), Auto(),
                      CodePolicy())  # fmt: skip
    number = {}
    for file_index, path in enumerate(paths):
        for video_index, (name, _frames, _label) in enumerate(
            maker.open_and_index(file_index, path, None)
        ):
            number[file_index, name] = video_index
    rows = [
        Row(
            i,
            c.file_index,
            number[c.file_index, c.video],
            c.indices[0],
            *c.crop_uniforms,
            c.flip,
            0,
        )
        for i, c in enumerate(plan)
    ]

    def limit() -> None:
        for first in range(0, len(plan), BATCH_SIZE):
            for row, clip in enumerate(plan[first : first + BATCH_SIZE]):
                reader.clip(clip, out[row])

    def worker() -> None:
        for first in range(0, len(rows), BATCH_SIZE):
            unit = rows[first : first + BATCH_SIZE]
            maker.produce(unit, out, list(range(len(unit))))

    sides: dict[str, Callable[[], None]] = {"limit": limit, "worker": worker}
    for make in sides.values():
        make()  # warm: files open, pages cached
    cost: dict[str, list[float]] = {name: [] for name in sides}
    order = list(sides)
    for _round in range(args.rounds):
        for name in order:  # ABBA: a drift of the machine's speed within a pair cancels out
            began = time.process_time()
            sides[name]()
            cost[name].append(1000 * (time.process_time() - began) / len(plan))
        order.reverse()
    medians = {name: statistics.median(values) for name, values in cost.items()}
    for name, values in cost.items():
        print(f"{name}: {medians[name]:.3f} ms CPU per clip (rounds: "
              f"{', '.join(f'{v:.3f}' for v in values)})")  # fmt: skip
    # Each round's pair ran back to back: the median of their differences sees through the
    # machine's drift from round to round, which the difference of the medians does not.
    paired = statistics.median(
        w - lim for w, lim in zip(cost["worker"], cost["limit"], strict=True)
    )
    print(f"worker - limit: {medians['worker'] - medians['limit']:+.3f} ms per clip"
          f" (median of the rounds' pairs: {paired:+.3f}, {100 * paired / medians['limit']:+.1f} %)"
          f"{' (Python and h5py alone)' if args.no_codecs else ''}")  # fmt: skip
    reader.close()
    maker.close()


if __name__ == "__main__":
    main()
