"""``h5feed bench reduced-decode``: what ``reduced_decode=True`` does to speed and to pixels,
on one core, in one process, with the decoding code the workers run (see
``h5feed bench reduced-decode --help``).
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import platform
import statistics
import time
from typing import Any

import cv2
import h5py
import numpy as np

from h5feed.bench.subcommands import own_arguments
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset
from h5feed.producer.worker.decode import decode_frame, jpeg_size, reduced_flag

CASES: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = (
    # (stored height, width), (resize height, width)
    ((480, 640), (128, 171)),  # 1/2 (320x240) is the largest reduction that stays above
    ((480, 640), (112, 112)),  # 1/4 (160x120)
    ((720, 1280), (128, 171)),  # 1/4 (320x180)
    ((720, 1280), (224, 224)),  # 1/2 (640x360)
)
_FLAG_NAMES = {
    cv2.IMREAD_REDUCED_COLOR_2: "1/2",
    cv2.IMREAD_REDUCED_COLOR_4: "1/4",
    cv2.IMREAD_REDUCED_COLOR_8: "1/8",
    cv2.IMREAD_COLOR: "none",
}


def frames_of(path: pathlib.Path, limit: int) -> list[np.ndarray]:
    """Up to ``limit`` encoded frames, a few from every video of the file."""
    frames: list[np.ndarray] = []
    with h5py.File(path, "r") as f:
        names = sorted(f)
        per_video = max(1, limit // len(names))
        for name in names:
            stored = f[name]["frames"]
            frames += [np.asarray(stored[i]) for i in range(min(per_video, len(stored)))]
    return frames[:limit]


def decode_resize(frames: list[np.ndarray], target: tuple[int, int], reduced: bool) -> list[Any]:
    size = (target[1], target[0])
    reduce_to = target if reduced else None
    return [
        cv2.resize(decode_frame(f, "-", "-", 0, reduce_to), size, interpolation=cv2.INTER_LINEAR)
        for f in frames
    ]


def ms_per_frame(frames: list[np.ndarray], target: tuple[int, int], reduced: bool) -> float:
    began = time.process_time()
    decode_resize(frames, target, reduced)
    return 1000.0 * (time.process_time() - began) / len(frames)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10.0 * math.log10(255.0**2 / mse)


def run_case(
    data_dir: pathlib.Path, stored: tuple[int, int], target: tuple[int, int], args: Any
) -> dict[str, Any]:
    spec = SampleSpec(files=1, videos_per_file=8, height=stored[0], width=stored[1], seed=3)
    (path,) = make_sample_dataset(data_dir / f"{stored[1]}x{stored[0]}", spec)
    frames = frames_of(path, args.frames)
    if jpeg_size(frames[0]) != stored:  # the sample writer's size is what is measured
        raise RuntimeError(f"{path}: frames of {jpeg_size(frames[0])}, expected {stored}")
    full = decode_resize(frames, target, reduced=False)
    reduced = decode_resize(frames, target, reduced=True)
    pairs = list(zip(full, reduced, strict=True))
    diffs = [np.abs(a.astype(np.int16) - b.astype(np.int16)) for a, b in pairs]
    timings = {
        kind: statistics.median(ms_per_frame(frames, target, kind) for _ in range(args.repeats))
        for kind in (False, True)
    }
    return {
        "stored": f"{stored[1]}x{stored[0]}",
        "resize": f"{target[1]}x{target[0]}",
        "reduction": _FLAG_NAMES[reduced_flag(stored, target)],
        "frames": len(frames),
        "full_ms_per_frame": timings[False],
        "reduced_ms_per_frame": timings[True],
        "speedup": timings[False] / timings[True],
        "mean_abs_diff": float(np.mean([d.mean() for d in diffs])),
        "max_abs_diff": int(max(d.max() for d in diffs)),
        "psnr_db": statistics.median(psnr(a, b) for a, b in pairs),
    }


def run(args: argparse.Namespace) -> int:
    """Every case of :data:`CASES`: a markdown table on stdout, JSON when ``args.json``."""
    cv2.setNumThreads(1)
    rows = [run_case(pathlib.Path(args.data_dir), s, t, args) for s, t in CASES]
    print("| stored | resize | decoded at | full ms/frame | reduced ms/frame | speed-up "
          "| mean abs diff | max abs diff | PSNR dB |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['stored']} | {r['resize']} | {r['reduction']} | {r['full_ms_per_frame']:.3f} "
            f"| {r['reduced_ms_per_frame']:.3f} | {r['speedup']:.2f}x | {r['mean_abs_diff']:.2f} "
            f"| {r['max_abs_diff']} | {r['psnr_db']:.1f} |"
        )
    if args.json:
        document = {
            "command": " ".join(["h5feed bench reduced-decode", *own_arguments("reduced-decode")]),
            "machine": {"processor": platform.processor(), "python": platform.python_version()},
            "cv2": cv2.__version__,
            "rows": rows,
        }
        pathlib.Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 0
