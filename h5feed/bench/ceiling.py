"""The consumer ceiling: how fast the trainer side moves ready-made batches, on one core.

Producers are real worker processes speaking the h5feed protocol
(:mod:`h5feed.bench.synthetic_worker`) that answer each UNIT with a preallocated array of the
right shape, so nothing is read or decoded. They connect to ``h5feed.dataset(...,
workers=0, listen="ipc://...")`` (then to ``h5feed.batches``) like remote producers. With at
least two CPUs, the trainer process is pinned to one CPU before TensorFlow starts (so
TensorFlow's thread pools are sized for one core too) and the producers to the others. The
figure is GB/s and batches/s of frames delivered to the trainer loop, next to ``memcpy``
bandwidth: ``np.copyto`` of an array of one batch's size, in the same process and run,
windows interleaved with the consumer's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from h5feed.bench.contender import DictIterator
from h5feed.bench.measure import drive_for, measure_window
from h5feed.bench.workload import BATCH_BYTES, BATCH_SIZE, CLIP_LEN, CROP, RESIZE
from h5feed.common.system.procstat import available_cores

_STOP_WAIT_S = 5.0


def pinning(cores: list[int]) -> tuple[list[int], list[int]]:
    """(trainer CPUs, producer CPUs): one CPU for the trainer and the rest for producers when
    there are at least two; else everything shares what there is."""
    if len(cores) >= 2:
        return cores[:1], cores[1:]
    return cores, cores


def memcpy_gb_per_s(seconds: float) -> float:
    """Bandwidth of ``np.copyto`` between two arrays of one batch's size, over ``seconds``."""
    source = np.ones(BATCH_BYTES, np.uint8)
    target = np.empty_like(source)
    copies = 0
    began = time.perf_counter()
    deadline = began + seconds
    while True:
        np.copyto(target, source)
        copies += 1
        if time.perf_counter() >= deadline:
            break
    return copies * BATCH_BYTES / (time.perf_counter() - began) / 1e9


class ListeningFeed(DictIterator):
    """``h5feed.dataset`` or ``h5feed.batches`` listening at ``address`` for the synthetic
    producers; ``options``: more keyword arguments (CURVE keys, ``insecure``)."""

    def __init__(self, setup: Any, api: str, address: str, **options: Any) -> None:
        super().__init__(setup)
        self.api, self.address, self.options = api, address, options

    def start(self) -> None:
        import h5feed

        kwargs: dict[str, Any] = {
            "clip_len": CLIP_LEN,
            "resize": RESIZE,
            "crop": CROP,
            "flip": True,
            "batch_size": BATCH_SIZE,
            "epochs": None,
            "workers": 0,
            "listen": self.address,
            "index_cache": self.setup.cache_dir,
            **self.options,
        }
        make = h5feed.dataset if self.api == "dataset" else h5feed.batches
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # InsecureWarning on a private link: wanted
            self._iterator = iter(make(list(self.setup.paths), **kwargs))


def start_producers(count: int, address: str, cpus: list[int]) -> list[subprocess.Popen[bytes]]:
    """``count`` synthetic workers connecting to ``address``, pinned to ``cpus``."""
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "h5feed.bench.synthetic_worker",
                "--connect",
                address,
                "--worker-id",
                f"synthetic-{i}",
                "--parent-pid",
                str(os.getpid()),
                "--cpus",
                ",".join(map(str, cpus)),
            ],
            stdin=subprocess.DEVNULL,
        )
        for i in range(count)
    ]


def stop_producers(processes: list[subprocess.Popen[bytes]]) -> None:
    """They leave on the consumer's BYE; whatever is left is terminated, then killed."""
    for process in processes:
        try:
            process.wait(timeout=_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=_STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def pinned_setup(spec: dict[str, Any]) -> tuple[Any, list[int], list[int]]:
    """Pin this ceiling process to the trainer's CPUs (before TensorFlow sizes its thread
    pools); the dataset of ``spec``, the trainer's CPUs and those left for the producers."""
    from h5feed.bench.contender import Setup
    from h5feed.bench.workload import VideoRef

    trainer_cpus, producer_cpus = pinning(sorted(os.sched_getaffinity(0)))
    os.sched_setaffinity(0, set(trainer_cpus))
    raw = spec["setup"]
    setup = Setup(
        paths=tuple(raw["paths"]),
        videos=tuple(VideoRef(*v) for v in raw["videos"]),
        workers=0,
        epochs=None,
        seed=int(raw["seed"]),
        cache_dir=str(raw["cache_dir"]),
    )
    return setup, trainer_cpus, producer_cpus


def serve_ceiling(spec: dict[str, Any], send: Callable[[str, dict[str, Any]], None]) -> int:
    """The ceiling process (run by ``run_one`` for ``"kind": "ceiling"``): sends one
    ``ceiling`` message with every window."""
    setup, trainer_cpus, producer_cpus = pinned_setup(spec)
    windows: list[dict[str, Any]] = []
    tmpdir = tempfile.mkdtemp(prefix="h5feed-ceiling-")
    try:
        for api in ("dataset", "batches"):
            address = f"ipc://{tmpdir}/{api}.sock"
            feed = ListeningFeed(setup, api, address)
            producers = start_producers(spec["producers"], address, producer_cpus)
            try:
                feed.start()
                feed.next_frames()
                for _ in range(spec["repeats"]):
                    windows.append({"api": "memcpy", "gb_per_s": memcpy_gb_per_s(spec["window_s"])})
                    drive_for(feed, spec["warmup_s"])
                    window = measure_window(feed, spec["window_s"])
                    windows.append(
                        {
                            "api": api,
                            **window.as_dict(),
                            "gb_per_s": window.clips
                            * BATCH_BYTES
                            / BATCH_SIZE
                            / window.wall_s
                            / 1e9,
                            "batches_per_s": window.clips_per_s / BATCH_SIZE,
                        }
                    )
            finally:
                feed.close()
                stop_producers(producers)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    tf = sys.modules.get("tensorflow")
    send(
        "ceiling",
        {
            "windows": windows,
            "trainer_cpus": trainer_cpus,
            "producer_cpus": producer_cpus,
            "producers": spec["producers"],
            "tensorflow": getattr(tf, "__version__", None),
        },
    )
    return 0


def default_producers() -> int:
    """One producer per CPU left after the trainer's, at most 4 (each only sends)."""
    return max(1, min(available_cores() - 1, 4))
