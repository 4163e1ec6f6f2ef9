"""Where a feed's CPU goes, per clip: the trainer's, its local workers', and the workers'
page faults and system time, over one window of ``h5feed.batches`` or ``h5feed.dataset`` on
any HDF5 files, with ``h5feed bench``'s workload (16-frame clips resized to 128x171, cropped
to 112x112, flipped, batches of 8).

``python tools/worker_faults.py FILE.h5... [--mode batches|dataset] [--workers 2]
[--warmup-s 6] [--window-s 15]`` prints clips/s and those figures. It measured
h5feed/common/system/allocator.py (glibc's thresholds: workers' page faults per clip on
1280x720 and 320x240 JPEGs, before and after). ``h5feed bench`` has no frame size to choose;
``python -c "from h5feed.producer.sample_data import SampleSpec, make_sample_dataset;
make_sample_dataset('DIR', SampleSpec(files=2, videos_per_file=10, min_frames=24,
max_frames=40, height=720, width=1280))"`` makes such files.

The counts come from ``/proc/PID/stat`` of each process below this one (minor faults, user
and system time) and ``getrusage`` of this one, before and after the window; the warm-up
is not counted. Each side's CPU is also split by thread (``/proc/PID/task/TID/stat``, by
thread name; ``main`` is the process's first thread): it told that a worker's time beyond
the per-core limit is its main thread's, not its ZeroMQ I/O thread's. Each worker's busy
share of a core and its context switches per second (``/proc/PID/task/TID/status``) tell a
worker that waits for work (busy under 1, voluntary switches) from one that shares its core
(involuntary ones): on 2 cores its workers were busy 0.93 to 0.96 of a core with about 2
waits a second, preempted 90 times a second beside `h5feed.batches`' trainer and 180 beside
`h5feed.dataset`'s (issue 37).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from h5feed.common.system.procstat import descendants, proc_field, proc_stat, process_cpu_s

_TICK = os.sysconf("SC_CLK_TCK")


def counters(pid: int) -> tuple[int, float, float]:
    """(minor faults, user s, system s) of ``pid``; zeros once it is gone."""
    fields = proc_stat(pid)
    if not fields:
        return 0, 0.0, 0.0
    return int(fields[7]), int(fields[11]) / _TICK, int(fields[12]) / _TICK


def switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of ``pid``'s main thread (the one that makes
    the clips); zeros once it is gone. A voluntary one is a wait (for work, a lock, the
    socket); an involuntary one, a thread that wanted to run and was preempted."""
    status = f"/proc/{pid}/task/{pid}/status"
    return (
        proc_field(status, b"voluntary_ctxt_switches:"),
        proc_field(status, b"nonvoluntary_ctxt_switches:"),
    )


def thread_cpu(pids: list[int]) -> dict[str, float]:
    """User + system CPU seconds of the threads of ``pids``, summed by thread name (``main``
    for each process's first thread); a thread gone by then counts 0."""
    seconds: dict[str, float] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            name = "main" if tid == str(pid) else thread_name(pid, tid)
            cpu = process_cpu_s(f"{pid}/task/{tid}")  # 0 for a thread gone meanwhile
            seconds[name] = seconds.get(name, 0.0) + cpu
    return seconds


def thread_name(pid: int, tid: str) -> str:
    """The kernel's name of thread ``tid`` of ``pid`` ("?" once it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def per_thread(before: dict[str, float], after: dict[str, float], clips: int) -> str:
    """``name ms`` per clip for each thread name that used CPU in the window, busiest first."""
    used = {name: cpu - before.get(name, 0.0) for name, cpu in after.items()}
    busy = sorted((item for item in used.items() if item[1] > 0), key=lambda item: -item[1])
    return ", ".join(f"{name} {1000 * cpu / clips:.3f}" for name, cpu in busy) or "none"


def take_for(batches: Iterator[Any], seconds: float) -> int:
    """Clips taken from ``batches`` in ``seconds``."""
    clips, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        clips += int(next(batches)["frames"].shape[0])
    return clips


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="HDF5 files of the groups layout")
    parser.add_argument("--mode", choices=("batches", "dataset"), default="batches")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--warmup-s", type=float, default=6.0)
    parser.add_argument("--window-s", type=float, default=15.0)
    args = parser.parse_args()
    import h5feed

    options: dict[str, Any] = {
        "clip_len": 16, "resize": (128, 171), "crop": (112, 112), "flip": True,
        "batch_size": 8, "shuffle": True, "seed": 0, "epochs": None,
        "workers": args.workers, "index_cache": tempfile.mkdtemp(prefix="worker-faults-"),
    }  # fmt: skip
    make = h5feed.dataset if args.mode == "dataset" else h5feed.batches
    batches = iter(make(args.files, **options))
    take_for(batches, args.warmup_s)
    kids = sorted(descendants(os.getpid()))  # the feed's workers
    before = {pid: counters(pid) for pid in kids}
    threads_before = thread_cpu(kids), thread_cpu([os.getpid()])
    switches_before = {pid: switches(pid) for pid in kids}
    trainer_faults, trainer_cpu = (
        resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
        time.process_time(),
    )
    began = time.monotonic()
    clips = take_for(batches, args.window_s)
    wall = time.monotonic() - began
    trainer_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - trainer_faults
    trainer_cpu = time.process_time() - trainer_cpu
    after = {pid: counters(pid) for pid in kids}
    threads_after = thread_cpu(kids), thread_cpu([os.getpid()])
    switches_after = {pid: switches(pid) for pid in kids}
    faults = sum(after[p][0] - before[p][0] for p in kids)
    user = sum(after[p][1] - before[p][1] for p in kids)
    system = sum(after[p][2] - before[p][2] for p in kids)
    print(f"{args.mode}, {len(kids)} workers: {clips / wall:.1f} clips/s over {wall:.1f} s")
    cpu, sys_ms = 1000 * (user + system) / clips, 1000 * system / clips
    print(f"workers: {cpu:.3f} ms CPU per clip ({sys_ms:.3f} system), "
          f"{faults / clips:.1f} page faults per clip")  # fmt: skip
    print(f"trainer: {1000 * trainer_cpu / clips:.3f} ms CPU per clip, "
          f"{trainer_faults / clips:.1f} page faults per clip")  # fmt: skip
    for pid in kids:  # a worker that waits for work shows as busy < 1 and voluntary/s > 0
        busy = (sum(after[pid][1:]) - sum(before[pid][1:])) / wall
        counts = zip(switches_after[pid], switches_before[pid], strict=True)
        waits, preempted = ((now - was) / wall for now, was in counts)
        print(f"worker {pid}: busy {busy:.2f} of a core, {waits:.1f} waits/s "
              f"(its main thread's voluntary switches), preempted {preempted:.1f}/s")  # fmt: skip
    for side, was, now in zip(
        ("workers'", "trainer's"), threads_before, threads_after, strict=True
    ):
        print(f"{side} threads, ms CPU per clip: {per_thread(was, now, clips)}")
    os._exit(0)  # the feed's workers stop with this process (their parent gone)


if __name__ == "__main__":
    main()
