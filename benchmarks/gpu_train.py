"""A GPU training loop fed by h5feed, next to the same loop fed by PyTorch's DataLoader.

Runs where PyTorch sees a CUDA GPU (no TensorFlow needed: h5feed feeds the loop through
``h5feed.batches``, NumPy batches handed to ``torch.from_numpy``). Same workload as
``h5feed bench``: 16-frame clips of 320x240 JPEG videos in HDF5, resize (128, 171), random
crop (112, 112), flip, batches of 8. The model is a small 3D CNN (``--width``) trained with
bf16 autocast and AdamW; each step copies the uint8 batch to the GPU and normalises it there.

Reported per feeder (each in a process of its own, feeders alternating, ``--rounds`` rounds):
clips/s over ``--seconds`` after ``--warmup``; the GPU busy share (the time between CUDA events
recorded before each step's host-to-device copy and after its optimiser step, summed, over the
wall time; and NVML's utilisation sampled every 100 ms when ``pynvml`` is there); the trainer
process's CPU ms per clip.

    python benchmarks/gpu_train.py --workers 15 --json docs/bench/gpu-h100.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from h5feed.bench.workload import FULL_SPEC, ClipReader, draw_clip, index_videos, prepare_dataset

_TAG = "@@gpu_train "


def h5feed_batches(paths: list[str], workers: int) -> Iterator[np.ndarray]:
    import h5feed

    feed = h5feed.batches(
        paths, clip_len=16, resize=(128, 171), crop=(112, 112), flip=True, batch_size=8,
        workers=workers, epochs=None, start_timeout_s=120,
    )  # fmt: skip
    for batch in feed:
        yield batch["frames"]


def torch_batches(paths: list[str], workers: int) -> Iterator[Any]:
    import torch
    import torch.utils.data

    videos = index_videos(paths)

    class Clips(torch.utils.data.Dataset):  # type: ignore[misc,type-arg]
        def __init__(self) -> None:
            self.reader: ClipReader | None = None
            self.rng: np.random.Generator | None = None

        def __len__(self) -> int:
            return len(videos)

        def __getitem__(self, index: int) -> Any:
            if self.reader is None or self.rng is None:  # opened inside each worker
                self.reader, self.rng = ClipReader(paths), np.random.default_rng()
            return torch.from_numpy(self.reader.clip(draw_clip(self.rng, videos[index])))

    loader = torch.utils.data.DataLoader(
        Clips(), batch_size=8, shuffle=True, num_workers=workers, persistent_workers=True,
        pin_memory=True,
    )  # fmt: skip
    while True:
        yield from loader


def make_model(width: int) -> Any:
    import torch
    from torch import nn

    def block(cin: int, cout: int, stride: tuple[int, int, int]) -> list[nn.Module]:
        return [nn.Conv3d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm3d(cout), nn.ReLU()]

    return nn.Sequential(
        *block(3, width, (1, 2, 2)),
        *block(width, width, (1, 1, 1)),
        *block(width, 2 * width, (2, 2, 2)),
        *block(2 * width, 2 * width, (1, 1, 1)),
        *block(2 * width, 4 * width, (2, 2, 2)),
        *block(4 * width, 4 * width, (1, 1, 1)),
        nn.AdaptiveAvgPool3d(1),
        nn.Flatten(),
        nn.Linear(4 * width, 4),
    ).to(memory_format=torch.channels_last_3d)


class NvmlSampler:
    """GPU utilisation (NVML, percent) sampled every 100 ms in a thread, when pynvml exists."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self._read = lambda: pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
        except Exception:  # no NVML here: the CUDA-event share is reported alone
            self._read = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            if self._read is not None:
                self.samples.append(int(self._read()))

    def __enter__(self) -> NvmlSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(1)


def run_one(feeder: str, paths: list[str], args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    model = make_model(args.width).to(device)
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    source = (h5feed_batches if feeder == "h5feed" else torch_batches)(paths, args.workers)

    def step(frames: Any) -> tuple[Any, Any]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        tensor = torch.as_tensor(frames).to(device, non_blocking=True)
        x = tensor.permute(0, 4, 1, 2, 3).float().div_(255.0)
        x = x.contiguous(memory_format=torch.channels_last_3d)
        labels = torch.zeros(x.shape[0], dtype=torch.long, device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), labels)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        end.record()
        return start, end

    deadline = time.monotonic() + args.warmup
    for frames in source:
        step(frames)
        if time.monotonic() > deadline:
            break
    torch.cuda.synchronize()
    events = []
    clips = 0
    cpu0, wall0 = time.process_time(), time.monotonic()
    with NvmlSampler() as nvml:
        for frames in source:
            events.append(step(frames))
            clips += int(frames.shape[0])
            if time.monotonic() - wall0 > args.seconds:
                break
        torch.cuda.synchronize()
    wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    busy_ms = sum(start.elapsed_time(end) for start, end in events)
    return {
        "feeder": feeder,
        "workers": args.workers,
        "clips_per_s": clips / wall,
        "gpu_busy_share_events": busy_ms / 1000 / wall,
        "gpu_util_nvml_mean": statistics.fmean(nvml.samples) / 100 if nvml.samples else None,
        "gpu_step_ms_min": min(start.elapsed_time(end) for start, end in events),
        "trainer_cpu_ms_per_clip": cpu / clips * 1000,
        "steps": len(events),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--width", type=int, default=32, help="channels of the first conv")
    parser.add_argument("--data-dir", type=pathlib.Path, default=pathlib.Path("bench_data"))
    parser.add_argument("--feeders", default="h5feed,torch")
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    paths = prepare_dataset(args.data_dir, FULL_SPEC)
    if args.one:
        print(_TAG + json.dumps(run_one(args.one, paths, args)), flush=True)
        return 0
    results = []
    for round_index in range(args.rounds):
        for feeder in args.feeders.split(","):
            command = [sys.executable, *sys.argv, "--one", feeder]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600)
            line = next((x for x in done.stdout.splitlines() if x.startswith(_TAG)), None)
            if line is None:
                print(f"{feeder} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
                continue
            result = json.loads(line[len(_TAG) :]) | {"round": round_index}
            results.append(result)
            print(json.dumps(result), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json),
            "data_dir": str(args.data_dir)}, "results": results}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
