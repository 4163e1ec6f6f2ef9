"""The help and arguments of ``h5feed bench gpu-train`` (argparse only: cheap to import;
registered by :mod:`h5feed.bench.subcommands`; the study itself: :mod:`h5feed.bench.gpu.train`).
"""

from __future__ import annotations

import argparse
import os
import pathlib

from h5feed.bench.shapes import parse_dataset_shape
from h5feed.common.cli_args import int_list, positive_int

GPU_TRAIN = """\
A GPU trainer fed by h5feed, next to the same trainer on a cached batch and fed by PyTorch's
DataLoader: does h5feed keep a real model on a real GPU busy?

Made for a GPU machine with PyTorch and CUDA, no TensorFlow needed: h5feed feeds the loop
through h5feed.torch_batches (tensors over the batch memory) and Keras 3 on the torch backend
through h5feed.keras_batches. --device cpu runs the same code on the CPU, as a rehearsal (its
figures then mean nothing). Workload as `h5feed bench`: 16-frame clips of 320x240 JPEG videos
in HDF5, resize (128, 171), random crop (112, 112), flip, batches of 8.

The model is a fixed 3D CNN (six conv-BN-ReLU blocks, pooled, a linear head), trained with
bf16 autocast and AdamW; each step copies the uint8 batch to the GPU and normalises it there.
Its width is sized to the loader: --calibrate times the model on one batch held on the GPU (no
loader at all: the headspace) at each of --widths and keeps the heaviest one whose clips/s is
still at least --margin x the needed clips/s (--need-clips-per-s, or read with --need-from
from an `h5feed bench` report: h5feed-numpy's rate at --need-workers workers): so the model
needs at least that many workers' input, and "does the loader keep it busy" has teeth.

Feeders (each in a fresh process, run in turn; --feeders):
  cached         the headspace: the same step on one batch held on the GPU
  h5feed         h5feed.torch_batches(workers=N)
  h5feed-pinned  the same with pin_memory=True
  torch          DataLoader(map-style Dataset, batch_size=8, shuffle=True, num_workers=N,
                 persistent_workers=True, pin_memory=True), the same per-clip work
  keras-cached / keras-h5feed   the same network in Keras 3 (torch backend), fit on one
                 repeated batch / on h5feed.keras_batches(workers=N)

Reported per feeder: steps/s and clips/s over --seconds after --warmup; the ratio to the
cached headspace; the GPU busy share (CUDA events around each step, summed, over wall time)
and NVML's utilisation sampled every 100 ms (with pynvml); where the trainer's time went
(waiting on the loader, in the step's Python, the host-to-GPU copy); the trainer's and the
loader's worker processes' CPU ms per clip. The GPU machine's whole run, with the scaling
curve first: h5feed/bench/gpu/run.sh in a checkout."""


FEEDERS = ("cached", "h5feed", "h5feed-pinned", "torch", "keras-cached", "keras-h5feed")


def _feeders(text: str) -> str:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in FEEDERS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"feeders are {', '.join(FEEDERS)}; got {text!r}")
    return ",".join(names)


def gpu_train_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--workers", type=positive_int, default=max(1, (os.cpu_count() or 2) - 1),
        help="loader workers (default: the CPUs but one)")  # fmt: skip
    add("--seconds", type=float, default=15.0, help="timed seconds per feeder (default 15)")
    add("--warmup", type=float, default=6.0, help="untimed seconds first (default 6)")
    add("--width", type=positive_int, default=32, help="the model's width, uncalibrated (32)")
    add("--calibrate", action="store_true", help="choose the width (see above)")
    add("--widths", type=int_list, default="32,48,64,96,128,160,192,256", metavar="W,...",
        help="widths --calibrate tries (default %(default)s)")  # fmt: skip
    add("--need-clips-per-s", type=float, default=0.0, help="what the model must take (0)")
    add("--need-from", type=pathlib.Path, default=None, metavar="BENCH_JSON",
        help="read it from an `h5feed bench` report instead")  # fmt: skip
    add("--need-workers", type=positive_int, default=8,
        help="h5feed-numpy's workers there (default 8; else the most measured)")  # fmt: skip
    add("--margin", type=float, default=1.1, help="over the needed clips/s (default 1.1)")
    add("--data-dir", type=pathlib.Path, default=pathlib.Path("bench_data"),
        help="the generated dataset, reused when present (default ./bench_data)")  # fmt: skip
    add("--dataset", type=parse_dataset_shape, default="32x12", metavar="FILESxVIDEOS",
        help="files and videos per file (default 32x12, as h5feed bench)")  # fmt: skip
    add("--feeders", type=_feeders, default="cached,h5feed,torch,keras-cached,keras-h5feed",
        help="(default %(default)s)")  # fmt: skip
    add("--device", default="cuda", help="cuda (default) or cpu (a rehearsal)")
    add("--json", type=pathlib.Path, help="write the results here")
    add("--png", type=pathlib.Path, help="a bar chart of steps/s per feeder")
