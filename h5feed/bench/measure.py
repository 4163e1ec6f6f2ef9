"""Timing one contender, inside its own process.

A window takes batches for at least ``seconds``: it ends with the first batch that ends past
the deadline, and rates use the window's actual length. Per window it records the clips, the
wall time, the trainer process's CPU time (``time.process_time()``: every thread of this
process, tf.data's and h5feed's loop thread included; worker processes excluded), its system
time and minor page faults, the CPU time of its descendant processes (the workers, whatever
the loader calls them), the machine's busy CPU time (for the load of everything else) and
this process's peak RSS so far (``ru_maxrss``).
"""

from __future__ import annotations

import dataclasses
import os
import resource
import time
from typing import Any

from h5feed.bench.contender import Contender
from h5feed.bench.workload import CLIP_LEN, CLIP_SHAPE
from h5feed.common.system.procstat import (
    descendants,
    process_cpu_s,
    self_sys_and_faults,
    system_busy_s,
)


@dataclasses.dataclass(frozen=True, slots=True)
class Window:
    """What one timed window measured."""

    clips: int
    wall_s: float
    trainer_cpu_s: float
    trainer_sys_s: float
    trainer_minor_faults: int
    worker_cpu_s: float
    machine_busy_s: float
    trainer_maxrss_mb: float

    @property
    def clips_per_s(self) -> float:
        return self.clips / self.wall_s

    @property
    def frames_per_s(self) -> float:
        return self.clips_per_s * CLIP_LEN

    @property
    def trainer_cpu_ms_per_clip(self) -> float:
        return 1000.0 * self.trainer_cpu_s / max(self.clips, 1)

    @property
    def worker_cpu_ms_per_clip(self) -> float:
        return 1000.0 * self.worker_cpu_s / max(self.clips, 1)

    @property
    def other_load_cores(self) -> float:
        """Cores busy with anything but this contender's own processes."""
        own = self.trainer_cpu_s + self.worker_cpu_s
        return max(self.machine_busy_s - own, 0.0) / self.wall_s

    def as_dict(self) -> dict[str, float]:
        """Raw fields and derived metrics."""
        return {**dataclasses.asdict(self), **{name: getattr(self, name) for name in METRICS}}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Window:
        """The inverse of :meth:`as_dict` (derived metrics ignored)."""
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})


#: Per-window metrics reported as medians.
METRICS = (
    "clips_per_s",
    "frames_per_s",
    "trainer_cpu_ms_per_clip",
    "worker_cpu_ms_per_clip",
    "other_load_cores",
)


def batch_rows(frames: Any) -> int:
    """Clips in a batch (its first dimension), for NumPy, TensorFlow and torch alike."""
    return int(frames.shape[0])


def describe(frames: Any) -> tuple[tuple[int, ...], str]:
    """A batch's clip shape (without the batch dimension) and its dtype's name."""
    dtype = getattr(frames.dtype, "name", None) or str(frames.dtype)
    if not isinstance(dtype, str):
        dtype = str(dtype)
    return tuple(int(d) for d in frames.shape[1:]), dtype.removeprefix("torch.")


def check_epoch(contender: Contender) -> dict[str, Any]:
    """Run a one-epoch contender to its end: clips, batches, and every distinct (shape,
    dtype) of its frames."""
    clips = batches = 0
    kinds: set[tuple[tuple[int, ...], str]] = set()
    began = time.monotonic()
    contender.start()
    while True:
        try:
            frames = contender.next_frames()
        except StopIteration:
            break
        clips += batch_rows(frames)
        batches += 1
        kinds.add(describe(frames))
    shapes = sorted(kinds)
    return {
        "clips": clips,
        "batches": batches,
        "kinds": [[list(shape), dtype] for shape, dtype in shapes],
        "ok_shape": shapes == [(CLIP_SHAPE, "uint8")],
        "seconds": time.monotonic() - began,
    }


def drive_for(contender: Contender, seconds: float) -> int:
    """Take batches for ``seconds`` (untimed); return the clips taken."""
    clips = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        clips += batch_rows(contender.next_frames())
    return clips


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # kB on Linux


def measure_window(contender: Contender, seconds: float) -> Window:
    """Take batches for at least ``seconds`` and return what it cost (see the module doc)."""
    me = os.getpid()
    pids0 = descendants(me)
    workers0 = {pid: process_cpu_s(pid) for pid in pids0}
    busy0 = system_busy_s()
    sys0, faults0 = self_sys_and_faults()
    cpu0 = time.process_time()
    elsewhere0 = contender.clips_elsewhere()
    t0 = time.perf_counter()
    deadline = t0 + seconds
    clips = 0
    while True:
        clips += batch_rows(contender.next_frames())
        if time.perf_counter() >= deadline:
            break
    t1 = time.perf_counter()
    clips += contender.clips_elsewhere() - elsewhere0
    cpu1 = time.process_time()
    sys1, faults1 = self_sys_and_faults()
    busy1 = system_busy_s()
    pids1 = descendants(me)
    workers = sum(process_cpu_s(pid) - workers0.get(pid, 0.0) for pid in pids1)
    return Window(
        clips=clips,
        wall_s=t1 - t0,
        trainer_cpu_s=cpu1 - cpu0,
        trainer_sys_s=sys1 - sys0,
        trainer_minor_faults=faults1 - faults0,
        worker_cpu_s=max(workers, 0.0),
        machine_busy_s=busy1 - busy0,
        trainer_maxrss_mb=_maxrss_mb(),
    )
