"""A GPU trainer fed by h5feed, next to the same trainer on a cached batch and fed by PyTorch's
DataLoader: does h5feed keep a real model on a real GPU busy?

Made for the lent GPU machine (PyTorch with CUDA, no TensorFlow): h5feed feeds the loop through
``h5feed.torch_batches`` (tensors over the batch memory) and Keras 3 on the torch backend
through ``h5feed.keras_batches``. ``--device cpu`` runs the same code on the CPU, as a rehearsal
(its figures then mean nothing). Workload as ``h5feed bench``: 16-frame clips of 320x240 JPEG
videos in HDF5, resize (128, 171), random crop (112, 112), flip, batches of 8.

The model is a fixed 3D CNN (:func:`make_model`: six conv-BN-ReLU blocks, pooled, a linear
head), trained with bf16 autocast and AdamW; each step copies the uint8 batch to the GPU and
normalises it there. Its width is *sized to the loader*: ``--calibrate`` times the model on one
batch held on the GPU (no loader at all: the headspace) at each of ``--widths`` and keeps the
heaviest one whose clips/s is still at least ``--margin`` x ``--need-clips-per-s`` (the
clips/s of 8 h5feed workers, measured by ``h5feed bench`` in the same run): so the model needs
at least that many workers' input, and the question "does the loader keep it busy" has teeth.

Feeders (each in a fresh process, run in turn; ``--feeders``):

- ``cached``: the headspace: the same step on one batch held on the GPU.
- ``h5feed``: ``h5feed.torch_batches(workers=N)``.
- ``torch``: ``DataLoader(map-style Dataset, batch_size=8, shuffle=True, num_workers=N,
  persistent_workers=True, pin_memory=True)``, the same per-clip work (h5py read + cv2).
- ``keras-cached`` / ``keras-h5feed``: the same network in Keras 3 (torch backend), ``fit`` on
  one repeated batch / on ``h5feed.keras_batches(workers=N)``.

Reported per feeder: steps/s and clips/s over ``--seconds`` after ``--warmup``; the ratio to
the cached headspace; the GPU busy share (CUDA events around each step, summed, over wall
time) and NVML's utilisation sampled every 100 ms; where the trainer's time went (waiting on
the loader, in the step's Python, the host-to-GPU copy); the trainer's and the loader's
worker processes' CPU ms per clip.

    python benchmarks/gpu_train.py --calibrate --need-clips-per-s 1400 --json $OUT/train.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import pathlib
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from h5feed.bench.procstat import descendants, process_cpu_s
from h5feed.bench.workload import (
    BATCH_SIZE,
    CLIP_SHAPE,
    FULL_SPEC,
    ClipReader,
    draw_clip,
    index_videos,
    prepare_dataset,
)

_TAG = "@@gpu_train "
_CLIP_OPTIONS: dict[str, Any] = {
    "clip_len": 16, "resize": (128, 171), "crop": (112, 112), "flip": True,
    "batch_size": BATCH_SIZE,
}  # fmt: skip
_CHILD_TIMEOUT_S = 300
_CLASSES = 4


# --- feeders: each yields uint8 frame batches [8, 16, 112, 112, 3] (torch tensor or NumPy) ---


def h5feed_source(paths: list[str], workers: int, pin_memory: bool = False) -> Iterator[Any]:
    import h5feed

    feed = h5feed.torch_batches(
        paths, keys=("frames",), workers=workers, epochs=None, start_timeout_s=120,
        pin_memory=pin_memory, **_CLIP_OPTIONS,
    )  # fmt: skip
    for batch in feed:
        yield batch["frames"]


def dataloader_source(paths: list[str], workers: int) -> Iterator[Any]:
    import torch
    import torch.utils.data

    videos = index_videos(paths)

    class Clips(torch.utils.data.Dataset):  # type: ignore[misc,type-arg]
        """One random clip per video, h5py opened lazily in each DataLoader worker."""

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
        Clips(), batch_size=BATCH_SIZE, shuffle=True, num_workers=workers,
        persistent_workers=True, pin_memory=torch.cuda.is_available(), prefetch_factor=4,
    )  # fmt: skip
    while True:
        yield from loader


def cached_source(paths: list[str], workers: int) -> Iterator[Any]:
    """One real batch, made once, then handed out forever (moved to the GPU by the step, which
    keeps the GPU copy: see ``run_torch``)."""
    reader = ClipReader(paths)
    rng = np.random.default_rng(0)
    videos = index_videos(paths)
    batch = np.stack([reader.clip(draw_clip(rng, videos[i])) for i in range(BATCH_SIZE)])
    while True:
        yield batch


# --- the model ---


def make_model(width: int) -> Any:
    """The fixed 3D CNN: six conv-BN-ReLU blocks (strides 1x2x2, 1, 2, 1, 2, 1; widths w, w,
    2w, 2w, 4w, 4w), global average pooling, a linear head of 4 classes."""
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
        nn.Linear(4 * width, _CLASSES),
    ).to(memory_format=torch.channels_last_3d)


def make_keras_model(width: int) -> Any:
    """:func:`make_model`'s network in Keras 3 (channels last), compiled with AdamW."""
    import keras

    layers = [keras.Input((*CLIP_SHAPE,), dtype="uint8"), keras.layers.Rescaling(1 / 255)]
    for cout, stride in [
        (width, (1, 2, 2)), (width, 1), (2 * width, 2), (2 * width, 1), (4 * width, 2),
        (4 * width, 1),
    ]:  # fmt: skip
        layers += [
            keras.layers.Conv3D(cout, 3, strides=stride, padding="same", use_bias=False),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
        ]
    layers += [keras.layers.GlobalAveragePooling3D(), keras.layers.Dense(_CLASSES)]
    model = keras.Sequential(layers)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


# --- measuring ---


class NvmlSampler:
    """GPU utilisation (NVML, percent) sampled every 100 ms in a thread, when pynvml exists."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._read: Callable[[], int] | None = None
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self._read = lambda: int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:  # no NVML here (the CPU rehearsal): the CUDA-event share stands alone
            self._read = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            if self._read is not None:
                self.samples.append(self._read())

    def __enter__(self) -> NvmlSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(1)

    def mean(self) -> float | None:
        return statistics.fmean(self.samples) / 100 if self.samples else None


class _CpuEvent:
    """``torch.cuda.Event``'s timing interface on the host clock (``--device cpu``)."""

    def record(self) -> None:
        self.at = time.perf_counter()

    def elapsed_time(self, end: _CpuEvent) -> float:
        return (end.at - self.at) * 1000.0


def children_cpu_s() -> float:
    """CPU seconds of this process's descendants now (the loader's workers)."""
    total = 0.0
    for pid in descendants(os.getpid()):
        with contextlib.suppress(OSError, IndexError, ValueError):  # exited meanwhile
            total += process_cpu_s(pid)
    return total


def run_torch(
    feeder: str, paths: list[str], width: int, args: argparse.Namespace
) -> dict[str, Any]:
    """The torch training loop fed by ``feeder``: warm-up, then ``args.seconds`` timed."""
    import torch

    torch.backends.cudnn.benchmark = True
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    model = make_model(width).to(device)
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    sources: dict[str, Callable[..., Iterator[Any]]] = {
        "cached": cached_source, "h5feed": h5feed_source, "torch": dataloader_source,
        "h5feed-pinned": lambda p, w: h5feed_source(p, w, pin_memory=True),
    }  # fmt: skip
    source = sources[feeder](paths, args.workers)
    on_gpu: dict[int, Any] = {}  # the cached feeder's batch, copied to the GPU once
    new_event: Callable[[], Any] = (
        (lambda: torch.cuda.Event(enable_timing=True)) if cuda else _CpuEvent
    )
    copy_ms: list[float] = []

    def step(frames: Any) -> tuple[Any, Any]:
        start, end = new_event(), new_event()
        start.record()
        if feeder == "cached":
            tensor = on_gpu.get(id(frames))
            if tensor is None:
                tensor = on_gpu[id(frames)] = torch.as_tensor(frames).to(device)
        else:
            t0 = time.perf_counter()
            tensor = torch.as_tensor(frames).to(device, non_blocking=True)
            copy_ms.append((time.perf_counter() - t0) * 1000)
        x = tensor.permute(0, 4, 1, 2, 3).float().div_(255.0)
        x = x.contiguous(memory_format=torch.channels_last_3d)
        labels = torch.zeros(x.shape[0], dtype=torch.long, device=device)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_fn(model(x), labels)
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        end.record()
        return start, end

    synchronize = torch.cuda.synchronize if cuda else (lambda: None)
    deadline = time.monotonic() + args.warmup
    for frames in source:
        step(frames)
        if time.monotonic() > deadline:
            break
    synchronize()
    copy_ms.clear()
    events: list[tuple[Any, Any]] = []
    wait_s = step_s = 0.0
    cpu0, kids0, wall0 = time.process_time(), children_cpu_s(), time.monotonic()
    with NvmlSampler() as nvml:
        iterator = iter(source)
        while time.monotonic() - wall0 < args.seconds:
            t0 = time.perf_counter()
            frames = next(iterator)
            t1 = time.perf_counter()
            events.append(step(frames))
            wait_s += t1 - t0
            step_s += time.perf_counter() - t1
        synchronize()
    wall = time.monotonic() - wall0
    cpu, kids = time.process_time() - cpu0, children_cpu_s() - kids0
    steps = len(events)
    clips = steps * BATCH_SIZE
    busy_ms = sum(start.elapsed_time(end) for start, end in events)
    return {
        "feeder": feeder,
        "framework": "torch",
        "width": width,
        "workers": args.workers if feeder != "cached" else 0,
        "steps": steps,
        "steps_per_s": steps / wall,
        "clips_per_s": clips / wall,
        "gpu_busy_share_events": busy_ms / 1000 / wall,
        "gpu_util_nvml_mean": nvml.mean(),
        "gpu_step_ms_median": statistics.median(s.elapsed_time(e) for s, e in events),
        "trainer_wait_share": wait_s / wall,  # blocked on the loader's next batch
        "trainer_step_share": step_s / wall,  # the step's Python (launches, copy, blocking)
        "h2d_copy_ms_median": statistics.median(copy_ms) if copy_ms else 0.0,
        "trainer_cpu_ms_per_clip": cpu / clips * 1000,
        "loader_workers_cpu_ms_per_clip": kids / clips * 1000,
    }


def run_keras(
    feeder: str, paths: list[str], width: int, args: argparse.Namespace
) -> dict[str, Any]:
    """``model.fit`` of :func:`make_keras_model` on torch: one repeated batch, or
    ``h5feed.keras_batches``; timed by a callback between the warm-up and the end."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    import keras

    model = make_keras_model(width)
    if feeder == "keras-cached":
        frames = next(cached_source(paths, 0))
        labels = np.zeros(BATCH_SIZE, np.int32)

        class Repeated(keras.utils.PyDataset):  # type: ignore[misc,name-defined]
            def __len__(self) -> int:
                return 1_000_000

            def __getitem__(self, index: int) -> Any:
                return frames, labels

        data: Any = Repeated()
    else:
        import h5feed

        data = h5feed.keras_batches(
            paths, workers=args.workers, start_timeout_s=120, **_CLIP_OPTIONS
        )

    class Clock(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        """Counts the batches trained after ``args.warmup`` s and stops at ``args.seconds``."""

        def __init__(self) -> None:
            super().__init__()
            self.started = time.monotonic()
            self.timed_from: float | None = None
            self.steps = 0
            self.cpu0 = self.kids0 = 0.0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            now = time.monotonic()
            if self.timed_from is None:
                if now - self.started >= args.warmup:
                    self.timed_from = now
                    self.cpu0, self.kids0 = time.process_time(), children_cpu_s()
                return
            self.steps += 1
            if now - self.timed_from >= args.seconds:
                self.model.stop_training = True

    clock = Clock()
    with NvmlSampler() as nvml:
        epochs = 1 if feeder == "keras-cached" else 1000
        steps = None if feeder == "keras-cached" else len(data)
        model.fit(data, epochs=epochs, steps_per_epoch=steps, callbacks=[clock], verbose=0)
    if clock.timed_from is None or clock.steps == 0:
        raise RuntimeError(f"{feeder}: no timed steps (warm-up {args.warmup} s not reached)")
    wall = time.monotonic() - clock.timed_from
    cpu, kids = time.process_time() - clock.cpu0, children_cpu_s() - clock.kids0
    clips = clock.steps * BATCH_SIZE
    if hasattr(data, "close"):
        data.close()
    return {
        "feeder": feeder,
        "framework": "keras-torch",
        "width": width,
        "workers": args.workers if feeder != "keras-cached" else 0,
        "steps": clock.steps,
        "steps_per_s": clock.steps / wall,
        "clips_per_s": clips / wall,
        "gpu_util_nvml_mean": nvml.mean(),
        "trainer_cpu_ms_per_clip": cpu / clips * 1000,
        "loader_workers_cpu_ms_per_clip": kids / clips * 1000,
    }


def calibrate(paths: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The cached headspace at each of ``args.widths``; the chosen width: the heaviest whose
    clips/s is at least ``margin x need`` (the lightest, if none is)."""
    quick = argparse.Namespace(**{**vars(args), "warmup": 1.5, "seconds": 2.5})
    rates = {}
    for width in args.widths:
        rates[width] = run_torch("cached", paths, width, quick)["clips_per_s"]
        print(f"calibrate: width {width}: {rates[width]:.0f} clips/s", file=sys.stderr)
    floor = args.margin * args.need_clips_per_s
    fitting = [w for w in args.widths if rates[w] >= floor]
    width = max(fitting) if fitting else min(args.widths)
    return {"rates": rates, "floor_clips_per_s": floor, "width": width}


def run_child(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """``main`` again in a fresh process with ``extra``; its tagged JSON line."""
    command = [sys.executable, *sys.argv, *extra]
    done = subprocess.run(
        command, stdout=subprocess.PIPE, stderr=None, text=True, timeout=_CHILD_TIMEOUT_S
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith(_TAG)), None)
    if line is None:
        raise RuntimeError(f"{extra}: exit {done.returncode}, no result")
    result: dict[str, Any] = json.loads(line[len(_TAG) :])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--seconds", type=float, default=15.0, help="timed seconds per feeder")
    parser.add_argument("--warmup", type=float, default=6.0, help="untimed seconds first")
    parser.add_argument("--width", type=int, default=32, help="the model's width (uncalibrated)")
    parser.add_argument("--calibrate", action="store_true", help="choose the width (see above)")
    parser.add_argument("--widths", type=lambda s: [int(x) for x in s.split(",")],
                        default=[32, 48, 64, 96, 128, 160, 192, 256])  # fmt: skip
    parser.add_argument("--need-clips-per-s", type=float, default=0.0,
                        help="clips/s of 8 h5feed workers (from h5feed bench)")  # fmt: skip
    parser.add_argument("--margin", type=float, default=1.1)
    parser.add_argument("--data-dir", type=pathlib.Path, default=pathlib.Path("bench_data"))
    parser.add_argument("--dataset", default="32x12", help="FILESxVIDEOS (see h5feed bench)")
    parser.add_argument("--feeders", default="cached,h5feed,torch,keras-cached,keras-h5feed")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (rehearsal)")
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--png", type=pathlib.Path, help="a bar chart of steps/s per feeder")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--calibrate-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    files, videos_per_file = (int(x) for x in args.dataset.split("x"))
    spec = dataclasses.replace(FULL_SPEC, files=files, videos_per_file=videos_per_file)
    paths = prepare_dataset(args.data_dir, spec)
    if args.calibrate_only:
        print(_TAG + json.dumps(calibrate(paths, args)), flush=True)
        return 0
    if args.one:
        run = run_keras if args.one.startswith("keras") else run_torch
        print(_TAG + json.dumps(run(args.one, paths, args.width, args)), flush=True)
        return 0
    calibration = run_child(args, ["--calibrate-only"]) if args.calibrate else None
    width = calibration["width"] if calibration else args.width
    print(f"width {width}", json.dumps(calibration), flush=True)
    results: list[dict[str, Any]] = []
    for feeder in args.feeders.split(","):
        try:
            result = run_child(args, ["--one", feeder, "--width", str(width)])
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            result = {"feeder": feeder, "error": str(error)}
        results.append(result)
        print(json.dumps(result), flush=True)
    headspace = {r["framework"]: r["steps_per_s"] for r in results if "cached" in r["feeder"]
                 and "steps_per_s" in r}  # fmt: skip
    for result in results:
        base = headspace.get(result.get("framework", ""))
        if base and "steps_per_s" in result:
            result["vs_cached"] = result["steps_per_s"] / base
    summary = {"width": width, "calibration": calibration, "results": results}
    for r in results:
        print(f"{r['feeder']:>13}: " + (
            f"{r['steps_per_s']:7.1f} steps/s {r['clips_per_s']:7.1f} clips/s "
            f"vs cached {r.get('vs_cached', float('nan')):.3f} "
            f"nvml {r.get('gpu_util_nvml_mean')}" if "steps_per_s" in r else r["error"]
        ), flush=True)  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}}
                                        | summary, indent=1))  # fmt: skip
    if args.png:
        plot(results, width, args.png)
    return 0


def plot(results: list[dict[str, Any]], width: int, png: pathlib.Path) -> None:
    """Steps/s per feeder, each framework's cached headspace drawn as a line over its bars."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    done = [r for r in results if "steps_per_s" in r]
    figure, axes = plt.subplots(figsize=(8, 4))
    colours = ["#999999" if "cached" in r["feeder"] else "#1f77b4" for r in done]
    axes.bar([r["feeder"] for r in done], [r["steps_per_s"] for r in done], color=colours)
    for i, r in enumerate(done):
        share = r.get("gpu_util_nvml_mean")
        label = f"{r.get('vs_cached', 0):.2f}x" + (f"\nGPU {share:.0%}" if share else "")
        axes.annotate(label, (i, r["steps_per_s"]), ha="center", va="bottom", fontsize=8)
    axes.set_ylabel("training steps/s (batch 8)")
    axes.set_title(f"3D CNN width {width}: steps/s by feeder (grey: one cached batch)")
    figure.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
