"""``h5feed bench auto``: ``workers="auto"`` against fixed counts of local workers.

For each of ``--workers`` (default ``1,2,3,auto``), in turn, ``--repeats`` times (the order
rotated each round, so the machine's drift falls on every configuration alike): a fresh
``h5feed.batches`` over the sample data (the main bench's clip: 16 frames, resized, cropped,
flipped, batches of 8) for ``--epochs`` epochs, taken as fast as the workers make them, or
with ``--step-ms`` of simulated training per batch (a slow trainer: "auto" should then keep
few workers). Reported per configuration (medians over the repeats): clips/s from the first
batch to the end, the share of that time the trainer waited for a batch, the workers running
at the end and the workers started during the run (``peers_joined``: "auto"'s growth).
Nothing is judged here: the figures go to docs/performance/index.md.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import tempfile
import time
from typing import Any

import h5feed
from h5feed.common.system.cpus import available_cpus
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

#: The main bench's clip (h5feed bench): 16 frames, resized, cropped, flipped, batches of 8.
CLIP: dict[str, Any] = dict(
    clip_len=16, resize=(128, 171), crop=(112, 112), flip=True, batch_size=8, seed=0
)  # fmt: skip


def one_run(files: list[str], workers: int | str, args: argparse.Namespace) -> dict[str, Any]:
    """One iteration of ``args.epochs`` epochs: its figures (see the module docstring)."""
    feed = h5feed.batches(
        files, **CLIP, epochs=args.epochs, workers=workers, start_timeout_s=120
    )  # fmt: skip
    step_s = args.step_ms / 1000.0
    with feed.stream() as stream:
        first = next(stream)
        began = time.perf_counter()
        clips, waited = 0, 0.0
        del first
        while True:
            asked = time.perf_counter()
            try:
                batch = next(stream)
            except StopIteration:
                break
            waited += time.perf_counter() - asked
            clips += len(batch["label"])
            if step_s:
                time.sleep(step_s)  # the training step this trainer simulates
        seconds = time.perf_counter() - began
        stats = stream.stats()
    feed.close()
    if clips == 0:
        raise ValueError("one batch only: give more --videos-per-file, --files or --epochs")
    return {
        "clips_per_s": clips / seconds,
        "wait_share": waited / seconds,
        "workers_at_end": len(stats["workers"]),
        "workers_started": stats["peers_joined"],
        "seconds": seconds,
    }


def _workers(text: str) -> int | str:
    return text if text == "auto" else int(text)


def run(args: argparse.Namespace) -> int:
    """Every configuration, printed as measured; written to ``args.json`` when given."""
    configs = [_workers(w) for w in args.workers.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {str(c): [] for c in configs}
    with tempfile.TemporaryDirectory(prefix="h5feed-auto-") as tmp:
        spec = SampleSpec(files=args.files, videos_per_file=args.videos_per_file)
        files = [str(p) for p in make_sample_dataset(pathlib.Path(tmp) / "data", spec)]
        for round_ in range(args.repeats):
            shift = round_ % len(configs)
            for workers in configs[shift:] + configs[:shift]:
                figures = one_run(files, workers, args)
                runs[str(workers)].append(figures)
                print(f"round {round_}: workers={workers!s:>4} "
                      f"{figures['clips_per_s']:7.1f} clips/s, waited "
                      f"{figures['wait_share']:.0%}, {figures['workers_at_end']} workers at the "
                      f"end ({figures['workers_started']} started)", flush=True)  # fmt: skip
    summary = {
        name: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        for name, rows in runs.items()
    }
    print(f"\nmedians of {args.repeats} (cores available: {available_cpus()}, "
          f"step {args.step_ms:g} ms a batch):", flush=True)  # fmt: skip
    print(f"{'workers':>8} {'clips/s':>8} {'waited':>7} {'at end':>7} {'started':>8}")
    for name, row in summary.items():
        print(f"{name:>8} {row['clips_per_s']:8.1f} {row['wait_share']:7.0%} "
              f"{row['workers_at_end']:7g} {row['workers_started']:8g}")  # fmt: skip
    if args.json is not None:
        results = {
            "files": args.files, "videos_per_file": args.videos_per_file,
            "epochs": args.epochs, "repeats": args.repeats, "step_ms": args.step_ms,
            "clip": CLIP, "cores": available_cpus(), "summary": summary, "runs": runs,
            "machine": platform.processor() or platform.machine(),
        }  # fmt: skip
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0
