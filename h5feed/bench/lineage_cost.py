"""``h5feed bench lineage``: what the lineage record (``lineage=PATH``) costs the trainer.

Two figures (see ``h5feed bench lineage --help``):

* end to end: the trainer process's CPU (``time.process_time``: every thread, ZeroMQ's and
  the loop's included) per clip over whole epochs of h5feed's sample data read with
  ``h5feed.batches``, without and with ``lineage=``, in interleaved pairs (the machine's load
  drifts alike for both), medians reported;
* the record alone: :meth:`LineageLog.record` on one real batch, five blocks of many calls,
  the median block in microseconds per clip (the part of the first figure's difference
  that is the record's).
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
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.options import HdfConfig
from h5feed.consumer.plan.epoch_plan import Index
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

#: The main bench's clip (h5feed bench): 16 frames, resized, cropped, flipped, batches of 8.
CLIP: dict[str, Any] = dict(
    clip_len=16, resize=(128, 171), crop=(112, 112), flip=True, batch_size=8, seed=0
)  # fmt: skip


def trainer_cpu_ms_per_clip(
    files: list[str], lineage: str | None, args: argparse.Namespace
) -> float:
    """The trainer's CPU per clip from the first batch to the end of ``args.epochs`` epochs
    (the first batch, which waits on the index, left out)."""
    feed = h5feed.batches(
        files, **CLIP, epochs=args.epochs, workers=args.workers, lineage=lineage,
        start_timeout_s=120,
    )  # fmt: skip
    with feed.stream() as stream:
        next(stream)
        began = time.process_time()
        clips = sum(len(batch["label"]) for batch in stream)
        spent = time.process_time() - began
    if clips == 0:
        raise ValueError("one batch only: give more --videos-per-file, --files or --epochs")
    return 1000.0 * spent / clips


def record_us_per_clip(files: list[str], path: str, calls: int) -> float:
    """:meth:`LineageLog.record` of one real batch (rows made from its plan, JSON, one
    write), ``calls`` times: microseconds per clip."""
    feed = h5feed.batches(files, **CLIP, workers=1, lineage=path)
    if not isinstance(feed.config, HdfConfig) or feed.lineage is None:
        raise TypeError("an HDF5 feed with lineage= was made")
    log = feed.lineage
    with feed.stream() as stream:
        arrays = next(stream)
        index = stream.learnt  # an HDF5 iteration's handshake teaches its index
    if not isinstance(index, Index):
        raise TypeError("the first batch came before the index")
    feed.close()  # its kept workers stop: nothing else runs while the record is timed
    planned = feed.config.epoch_plan(index, 0).batch(0)  # what the stream's batch carried
    batch = Batch(0, 0, arrays, planned=planned)
    rows = len(planned.samples)
    blocks = []  # the median of five blocks: a burst of the machine's load shows in one
    for block in range(5):
        began = time.perf_counter()
        for step in range(block * calls, (block + 1) * calls):
            log.record(step, batch)
        blocks.append(1e6 * (time.perf_counter() - began) / (calls * rows))
    return statistics.median(blocks)


def run(args: argparse.Namespace) -> int:
    """Both figures, printed as measured; written to ``args.json`` when given."""
    with tempfile.TemporaryDirectory(prefix="h5feed-lineage-") as tmp:
        root = pathlib.Path(tmp)
        spec = SampleSpec(files=args.files, videos_per_file=args.videos_per_file)
        files = [str(p) for p in make_sample_dataset(root / "data", spec)]
        off: list[float] = []
        on: list[float] = []
        for pair in range(args.repeats):
            first_on = pair % 2 == 1  # alternate which goes first
            for lineage in (True, False) if first_on else (False, True):
                path = str(root / "lineage.ndjson") if lineage else None
                figure = trainer_cpu_ms_per_clip(files, path, args)
                (on if lineage else off).append(figure)
                print(f"pair {pair}: lineage {'on ' if lineage else 'off'} "
                      f"{figure:.3f} ms/clip", flush=True)  # fmt: skip
        alone = record_us_per_clip(files, str(root / "record.ndjson"), args.calls)
    results = {
        "files": args.files, "videos_per_file": args.videos_per_file, "epochs": args.epochs,
        "workers": args.workers, "repeats": args.repeats, "clip": CLIP,
        "trainer_cpu_ms_per_clip_off": round(statistics.median(off), 4),
        "trainer_cpu_ms_per_clip_on": round(statistics.median(on), 4),
        "off": off, "on": on,
        "record_us_per_clip": round(alone, 2),
        "machine": platform.processor() or platform.machine(),
    }  # fmt: skip
    print(f"trainer CPU per clip, median of {args.repeats}: lineage off "
          f"{results['trainer_cpu_ms_per_clip_off']:.3f} ms, on "
          f"{results['trainer_cpu_ms_per_clip_on']:.3f} ms", flush=True)  # fmt: skip
    print(f"the record alone: {alone:.1f} us per clip", flush=True)
    if args.json is not None:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0
