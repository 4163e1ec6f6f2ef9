"""The timed training loops of ``h5feed bench gpu-train`` and what they measure.

Each loop trains for ``args.warmup`` seconds untimed, then ``args.seconds`` timed, and returns
one JSON-able dict: steps/s and clips/s over wall time; for torch the GPU busy share (CUDA
events around each step, summed, over wall time), NVML's utilisation sampled every 100 ms
where pynvml exists, where the trainer's time went (waiting on the loader, the step's Python,
the host-to-GPU copy); the trainer's and the loader's worker processes' CPU ms per clip.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from h5feed.bench.gpu.feeders import CLIP_OPTIONS, cached_source, dataloader_source, h5feed_source
from h5feed.bench.gpu.models import make_keras_model, make_model
from h5feed.bench.workload import BATCH_SIZE
from h5feed.common.system.procstat import descendants, process_cpu_s


class NvmlSampler:
    """GPU utilisation (NVML, percent) sampled every 100 ms in a thread, when pynvml exists."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._read: Callable[[], int] | None = None
        try:
            import pynvml  # type: ignore[import-not-found]  # only where NVML is

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
    gpu: Any = torch.cuda  # its Event and synchronize are untyped in torch's stubs
    new_event: Callable[[], Any] = (lambda: gpu.Event(enable_timing=True)) if cuda else _CpuEvent
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

    synchronize: Callable[[], Any] = gpu.synchronize if cuda else (lambda: None)
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
            paths, workers=args.workers, start_timeout_s=120, **CLIP_OPTIONS
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
