"""``h5feed bench open-files``: what keeping at most ``max_open_files`` HDF5 files open
costs, end to end: one worker, a global shuffle over many small files, read with the default
bound and with every file open (see ``h5feed bench open-files --help``).
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
from h5feed.common.worker_settings import DEFAULT_MAX_OPEN_FILES
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


def run(args: argparse.Namespace) -> int:
    """Both figures with ``args``, printed as measured; written to ``args.json`` when given."""
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
    return 0
