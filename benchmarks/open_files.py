"""What keeping at most ``max_open_files`` HDF5 files open costs, end to end.

2,000 small files (one video of ``--frames`` JPEG frames of ``--size`` x ``--size`` pixels
each) are read by one local worker with a global shuffle, twice: with
``max_open_files=128`` (the default: a shuffled read finds its file open with a chance of
about 128 / 2,000, so nearly every clip reopens its file) and with every file open
(``max_open_files`` = the number of files). Reported: clips/s of each, from the first batch
to the end of ``--epochs`` epochs (the index, read when the iteration starts, is left out),
the best of ``--repeats`` runs. Small frames make decoding cheap, so the reopen cost shows
at its largest; with real frames (``--size 320``) it is a smaller share.

    python benchmarks/open_files.py                    # prints both figures
    python benchmarks/open_files.py --size 320 --json out.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import tempfile
import time
from typing import Any

import cv2
import numpy as np

import h5feed
from h5feed.common.config import DEFAULT_MAX_OPEN_FILES
from h5feed.producer.sample_data import write_video_file


def make_files(root: pathlib.Path, count: int, frames: int, size: int) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        image = rng.integers(0, 256, (size, size, 3), np.uint8)
        jpeg = cv2.imencode(".jpg", image)[1].tobytes()
        path = root / f"f{i:05d}.h5"
        write_video_file(path, {"video_000": ([jpeg] * frames, i % 10)})
        paths.append(str(path))
    return paths


def clips_per_s(files: list[str], max_open: int, epochs: int, cache: str, size: int) -> float:
    feed = h5feed.batches(
        files, clip_len=4, resize=(size, size), batch_size=32, shuffle=True, epochs=epochs,
        workers=1, max_open_files=max_open, index_cache=cache, start_timeout_s=120,
    )  # fmt: skip
    stream = feed.stream()
    with stream:
        first = next(stream)
        began = time.perf_counter()
        clips = sum(len(batch["label"]) for batch in stream)
        elapsed = time.perf_counter() - began
    del first
    return clips / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--frames", type=int, default=8, help="frames per video")
    parser.add_argument("--size", type=int, default=64, help="frame height and width")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="h5feed-open-files-") as tmp:
        root = pathlib.Path(tmp)
        (root / "data").mkdir()
        files = make_files(root / "data", args.files, args.frames, args.size)
        cache = str(root / "cache")
        results: dict[str, Any] = {"files": args.files, "frames": args.frames, "size": args.size}
        for label, max_open in (
            (f"max_open_files={DEFAULT_MAX_OPEN_FILES}", DEFAULT_MAX_OPEN_FILES),
            ("all files open", args.files),
        ):
            best = max(
                clips_per_s(files, max_open, args.epochs, cache, args.size)
                for _ in range(args.repeats)
            )
            results[label] = round(best, 1)
            print(f"{label:>22}: {best:8.1f} clips/s", flush=True)
    results["machine"] = platform.processor() or platform.machine()
    if args.json is not None:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
