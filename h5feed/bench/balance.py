"""``h5feed bench balance``: each worker's share of the clips when the per-clip cost is a
sleep (what each figure means: ``h5feed bench balance --help``,
:mod:`h5feed.bench.worker_studies`).

The real consumer and its scheduler: ``h5feed.batches`` over real small HDF5 files (the
sample data, 16 x 16 frames), local workers, the transform
:func:`h5feed.bench.sleepy.sleep_per_clip` making each clip cost ``--clip-ms`` of sleep. The
shares come from ``stats()["workers"]`` (clips each worker delivered) at the end of the run.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import h5feed
from h5feed.bench.study_report import study_report, write_report
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

_SIZE = 16  # frame height and width: decoding is not what is measured
_SLOW = "-0"  # the end of the slow worker's name: the pool's first


def make_files(root: pathlib.Path, files: int, videos: int) -> list[str]:
    """``videos`` videos (4 to 8 frames of 16 x 16) dealt to ``files`` files (the first ones
    one more where they do not divide)."""
    share, extra = divmod(videos, files)
    paths: list[str] = []
    for size, count in ((share + 1, extra), (share, files - extra)):
        if count and size:
            spec = SampleSpec(
                files=count, videos_per_file=size, height=_SIZE, width=_SIZE,
                min_frames=4, max_frames=8, seed=size,
            )  # fmt: skip
            where = root / f"{count}x{size}"
            paths += [str(p) for p in make_sample_dataset(where, spec, processes=1)]
    return paths


def measure(
    paths: list[str], workers: int, clip_ms: float, epochs: int, slow: bool
) -> dict[str, Any]:
    """One run: clips/s after the first batch, the ideal, and each worker's share."""
    args: dict[str, Any] = {"ms": clip_ms, "slow": _SLOW if slow else None}
    feed = h5feed.batches(
        paths,
        clip_len=2,
        batch_size=8,
        epochs=epochs,
        workers=workers,
        transform="h5feed.bench.sleepy:sleep_per_clip",
        transform_args=args,
        seed=0,
        index_cache=False,
    )
    clips = 0
    with feed.stream() as stream:
        stream_iter = iter(stream)
        first = next(stream_iter)
        began = time.perf_counter()
        for batch in stream_iter:
            clips += len(batch["label"])
        wall = time.perf_counter() - began
        figures = stream.stats()["workers"]
    total = sum(w["clips"] for w in figures) or 1
    shares = {w["name"]: w["clips"] / total for w in figures}
    del first
    per_worker = 1000.0 / clip_ms
    ideal = per_worker * (workers - (0.5 if slow else 0.0))
    slow_share = next((s for name, s in shares.items() if name.endswith(_SLOW)), None)
    rate = clips / wall if wall > 0 else 0.0
    return {
        "files": len(paths),
        "workers": workers,
        "slow_worker": slow,
        "clips_per_s": round(rate, 1),
        "ideal_clips_per_s": round(ideal, 1),
        "of_ideal": round(rate / ideal, 3),
        "shares": sorted((round(s, 4) for s in shares.values()), reverse=True),
        "slow_share": None if not slow or slow_share is None else round(slow_share, 4),
        "fair_share": round(1 / workers, 4),
        "idle_workers": sum(1 for s in shares.values() if s == 0) + workers - len(shares),
    }


def table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        f"{'workers':>7} {'files':>5} {'slow':>4} {'clips/s':>8} {'ideal':>6} {'of ideal':>8} "
        f"{'idle':>4} {'slow %':>6}  shares % (sorted)"
    ]
    for r in rows:
        slow = f"{100 * r['slow_share']:.1f}" if r["slow_share"] is not None else "-"
        shares = " ".join(f"{100 * s:.0f}" for s in r["shares"])
        lines.append(
            f"{r['workers']:>7} {r['files']:>5} {'yes' if r['slow_worker'] else 'no':>4} "
            f"{r['clips_per_s']:>8.1f} {r['ideal_clips_per_s']:>6.0f} {r['of_ideal']:>8.2f} "
            f"{r['idle_workers']:>4} {slow:>6}  {shares}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Every (workers, files, slow) case; a table on stdout, JSON where asked."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="h5feed-balance-"))
    rows: list[dict[str, Any]] = []
    print(table([]), flush=True)
    try:
        for files in args.files:
            paths = make_files(root / f"f{files}", files, args.videos)
            for workers in args.workers:
                for slow in (False,) if args.no_slow else (False, True):
                    rows.append(measure(paths, workers, args.clip_ms, args.epochs, slow))
                    print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        settings = {"videos": args.videos, "clip_ms": args.clip_ms, "epochs": args.epochs}
        write_report(args.json, study_report("balance", settings, rows))
        print(f"wrote {args.json}")
    return 0
