"""Core benchmark of h5feed: clips/s and trainer CPU per clip on the core workload.

Workload: 16-frame clips from 320x240 JPEG videos stored in HDF5 (h5feed's sample dataset,
``SampleSpec(files=4, videos_per_file=24)``, made once under ``--data-dir`` and reused),
resized to (128, 171), randomly cropped to (112, 112), randomly flipped, batches of 8, shuffled.

Contenders (each row of the report):

* **per-core limit**: the same per-clip work in one process, without IPC: the files opened
  once, a plan of random clips made up front, every clip read, decoded and preprocessed into a
  preallocated array. Two spellings: ``direct cv2`` (h5py slice + ``cv2.imdecode`` /
  ``resize`` / ``cvtColor`` / ``flip``) and ``ClipWriter`` (``VideoFile.read_frames`` + h5feed's
  ``decode_frame`` + ``ClipWriter.write``, the worker's own per-frame code). Both give the same
  pixels (checked at start); the faster one is the per-core limit.
* **per-core xN processes**: N independent copies of ``direct cv2`` running at once: what N
  cores really give when nothing is shared (memory bandwidth, host contention), for reference.
* **h5feed.dataset**: the trainer path, ``h5feed.dataset(..., workers=n, epochs=None)``
  iterated with ``next()`` on ``iter(ds)`` in a plain loop (what ``model.fit`` does), for
  n = 1..``--max-workers``.
* **h5feed.batches**: the same through ``h5feed.batches()`` (NumPy, no TensorFlow).

Method: every contender runs in its own process, as a trainer would (so one contender's
threads, imports and allocator state never bill another's CPU time), started once (startup is
not timed) and kept alive across its windows. For each repeat, each contender in turn (the
order rotates between repeats, so per-core windows interleave with h5feed windows) is driven
for ``--warmup`` seconds (not timed: it drains what an idle pipeline buffered meanwhile), then
for a timed window of ``--window`` seconds; only one contender runs at a time. Reported values
are medians over windows. Per window a contender's process records clips, wall time, its own
CPU time (``time.process_time()``: every thread of the trainer process, the tf.data threads
and h5feed's coordinator thread included, its worker processes excluded), its system time and
minor page faults (``/proc/self/stat``), its worker processes' CPU time and the machine's busy
CPU time (``/proc/stat``), from which "other" is the cores used by anything else: a busy
machine shows up there.

Run ``python benchmarks/core_bench.py --help``. ``--quick`` is a smoke run for CI (a tiny
dataset, 1 s windows): its numbers are not meant to be read.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import importlib.util
import itertools
import json
import os
import pathlib
import platform
import select
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

import cv2
import h5py
import numpy as np

from h5feed.common.config import ClipSpec, clip_frame_indices
from h5feed.producer.decode import ClipWriter, crop_offset, decode_frame
from h5feed.producer.reader import VideoFile
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset
from h5feed.progress import Bar, progress_bar

CLIP_LEN = 16
RESIZE = (128, 171)  # (height, width)
CROP = (112, 112)  # (height, width)
BATCH_SIZE = 8
PLANNED_CLIPS = 4096  # the per-core contenders cycle through this many planned clips

TARGET_RATIO = 0.85
TARGET_TRAINER_CPU_MS = 1.0
TARGET_LINE = "target: >= 0.85 x twice the single-process rate; trainer CPU <= 1 ms per clip"

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_WORKER_MODULE = b"h5feed.producer.worker"
_TAG = "@@core_bench "  # prefix of the lines a contender process sends to the orchestrator
_START_TIMEOUT_S = 180.0
_REPLY_GRACE_S = 120.0


# --------------------------------------------------------------------------------------------
# Settings


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one benchmark run does."""

    window_s: float
    repeats: int
    warmup_s: float
    max_workers: int
    data_dir: pathlib.Path
    spec: SampleSpec
    seed: int
    use_tf: bool
    quick: bool
    json_path: pathlib.Path | None
    progress: bool = True  # a bar of the windows, on a terminal only (--no-progress: none)


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def build_parser() -> argparse.ArgumentParser:
    """The command line (``--quick`` changes the defaults of the sizing options)."""
    parser = argparse.ArgumentParser(
        prog="python benchmarks/core_bench.py",
        description=(
            "h5feed core benchmark: 16-frame 320x240 JPEG clips, resize (128, 171), random "
            "crop (112, 112), flip, batch 8, shuffle. Compares the single-process per-core "
            "limit with h5feed.dataset() and h5feed.batches() for 1..--max-workers workers."
        ),
    )
    parser.add_argument("--window", type=float, help="seconds per timed window (default 10)")
    parser.add_argument("--repeats", type=int, help="timed windows per contender (default 3)")
    parser.add_argument(
        "--warmup", type=float, help="untimed seconds before every window (default 3)"
    )
    parser.add_argument(
        "--max-workers",
        type=int,
        default=available_cores(),
        help="h5feed runs with 1..N workers (default: the cores available, %(default)s)",
    )
    parser.add_argument(
        "--data-dir",
        type=pathlib.Path,
        default=pathlib.Path("bench_data"),
        help="cache of the generated dataset, reused when present (default ./bench_data)",
    )
    parser.add_argument("--files", type=int, help="HDF5 files to generate (default 4)")
    parser.add_argument("--videos-per-file", type=int, help="videos per file (default 24)")
    parser.add_argument("--seed", type=int, default=0, help="plan seed (default 0)")
    parser.add_argument(
        "--no-tf", action="store_true", help="leave out h5feed.dataset (no TensorFlow)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CI smoke run: window 1 s, 1 repeat, warm-up 0.5 s, 2 files x 4 videos",
    )
    parser.add_argument("--json", type=pathlib.Path, help="write all raw numbers to this file")
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (shown only when stderr is a terminal anyway)",
    )
    parser.add_argument("--contender", help=argparse.SUPPRESS)  # internal: run one contender
    return parser


def settings_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Settings:
    """Resolve the defaults (plain or ``--quick``) and validate."""
    quick = bool(args.quick)
    defaults = (1.0, 1, 0.5, 2, 4) if quick else (10.0, 3, 3.0, 4, 24)
    given = (args.window, args.repeats, args.warmup, args.files, args.videos_per_file)
    window, repeats, warmup, files, videos = (
        value if value is not None else default
        for value, default in zip(given, defaults, strict=True)
    )
    if window <= 0 or warmup < 0 or repeats < 1 or args.max_workers < 1:
        parser.error("--window must be > 0, --warmup >= 0, --repeats and --max-workers >= 1")
    use_tf = not args.no_tf and importlib.util.find_spec("tensorflow") is not None
    if not args.no_tf and not use_tf:
        log("note: TensorFlow is not installed; h5feed.dataset is left out")
    return Settings(
        window_s=float(window),
        repeats=int(repeats),
        warmup_s=float(warmup),
        max_workers=args.max_workers,
        data_dir=args.data_dir,
        spec=SampleSpec(files=int(files), videos_per_file=int(videos)),
        seed=args.seed,
        use_tf=use_tf,
        quick=quick,
        json_path=args.json,
        progress=not args.no_progress,
    )


def dataset_dir(settings: Settings) -> pathlib.Path:
    """Where the dataset of ``settings.spec`` lives: one sub-directory per spec, so a quick
    run's tiny dataset never stands in for the full one."""
    s = settings.spec
    name = f"{s.files}x{s.videos_per_file}_{s.width}x{s.height}_q{s.quality}_seed{s.seed}"
    return settings.data_dir / name


def prepare_dataset(settings: Settings) -> list[str]:
    """Make the dataset if missing (complete files are kept) and return its file paths."""
    started = time.monotonic()
    paths = make_sample_dataset(dataset_dir(settings), settings.spec)
    took = time.monotonic() - started
    if took > 1.0:
        log(f"dataset made in {took:.1f} s: {dataset_dir(settings)}")
    return [str(p) for p in paths]


def log(message: str) -> None:
    """Progress to stderr (the report goes to stdout)."""
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# CPU accounting from /proc


def proc_stat(pid: int | str) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or []."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return []
    return stat[stat.rfind(b")") + 2 :].split()


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), 0 if it is gone."""
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS if fields else 0.0


def self_sys_and_faults() -> tuple[float, int]:
    """This process's system CPU seconds and minor page faults so far."""
    fields = proc_stat("self")
    return int(fields[12]) / _CLOCK_TICKS, int(fields[7])


def system_busy_s() -> float:
    """CPU seconds all CPUs of the machine spent busy since boot (not idle, not iowait)."""
    try:
        with open("/proc/stat") as handle:
            values = [int(v) for v in handle.readline().split()[1:]]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / _CLOCK_TICKS


def worker_children() -> set[int]:
    """Pids of live ``h5feed.producer.worker`` processes whose parent is this process."""
    me = str(os.getpid()).encode()
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = proc_stat(entry)
        if len(fields) < 2 or fields[0] == b"Z" or fields[1] != me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if _WORKER_MODULE in handle.read():
                    found.add(int(entry))
        except OSError:
            continue
    return found


# --------------------------------------------------------------------------------------------
# Contenders (each runs in a process of its own)


class Contender:
    """One way of producing clips, driven one step at a time by the measuring loop."""

    def start(self) -> None:
        """Open, spawn, index: everything before the first clip (never timed)."""

    def take(self) -> int:
        """Produce or receive the next clip(s); return how many clips that was."""
        raise NotImplementedError

    def worker_pids(self) -> list[int]:
        """The processes besides this one that do this contender's work."""
        return []

    def close(self) -> None:
        """Release everything :meth:`start` took."""


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedClip:
    """One random clip: where it is, and its crop and flip (as the plan would draw them)."""

    file_index: int
    video: str
    indices: list[int]
    crop_uniforms: tuple[float, float]
    top: int
    left: int
    flip: bool


def plan_clips(videos: Sequence[tuple[int, str, int]], count: int, seed: int) -> list[PlannedClip]:
    """``count`` clips of random videos, random starts, random crops and flips.

    ``videos`` are (file index, group name, frame count). Offsets use h5feed's own
    :func:`crop_offset`, so both per-core variants crop exactly where a worker would.
    """
    rng = np.random.default_rng(seed)
    clips = []
    for _ in range(count):
        file_index, name, n_frames = videos[int(rng.integers(len(videos)))]
        start = int(rng.integers(max(n_frames - CLIP_LEN, 0) + 1))
        uy, ux = float(rng.random()), float(rng.random())
        clips.append(
            PlannedClip(
                file_index=file_index,
                video=name,
                indices=clip_frame_indices(start, n_frames, CLIP_LEN, 1, "loop"),
                crop_uniforms=(uy, ux),
                top=crop_offset(RESIZE[0], CROP[0], uy, "random"),
                left=crop_offset(RESIZE[1], CROP[1], ux, "random"),
                flip=bool(rng.integers(2)),
            )
        )
    return clips


def is_contiguous(indices: Sequence[int]) -> bool:
    """Whether ``indices`` are consecutive increasing frame numbers (one slice read)."""
    return all(b - a == 1 for a, b in itertools.pairwise(indices))


class SingleProcess(Contender):
    """The per-core limit: the per-clip work in this process, no IPC, no batching overhead.

    ``variant="direct"``: h5py slice reads on datasets opened once and plain cv2 calls;
    ``variant="clipwriter"``: :class:`VideoFile` reads and h5feed's ``decode_frame`` +
    ``ClipWriter.write``, as a worker runs them. Clips are written round-robin into the rows
    of one preallocated [batch, clip_len, 112, 112, 3] array.
    """

    def __init__(self, paths: Sequence[str], variant: str, seed: int) -> None:
        if variant not in ("direct", "clipwriter"):
            raise ValueError(f"unknown variant {variant!r}")
        self.variant = variant
        self.paths = list(paths)
        self.seed = seed
        self.files: list[VideoFile] = []
        self.h5: list[h5py.File] = []
        self.datasets: dict[tuple[int, str], h5py.Dataset] = {}
        self.plan: list[PlannedClip] = []
        self.out = np.empty((BATCH_SIZE, CLIP_LEN, *CROP, 3), np.uint8)
        self.writer = ClipWriter(ClipSpec(clip_len=CLIP_LEN, resize=RESIZE, crop=CROP, flip=True))
        self._resize_wh = (RESIZE[1], RESIZE[0])
        self._next = 0

    def start(self) -> None:
        self.files = [VideoFile(path) for path in self.paths]
        videos = [
            (file_index, name, n_frames)
            for file_index, handle in enumerate(self.files)
            for name, n_frames, _label in handle.index()
        ]
        self.h5 = [h5py.File(path, "r") for path in self.paths]
        self.datasets = {
            (file_index, name): self.h5[file_index][name]["frames"]
            for file_index, name, _n in videos
        }
        self.plan = plan_clips(videos, PLANNED_CLIPS, self.seed)

    def take(self) -> int:
        clip = self.plan[self._next % len(self.plan)]
        out = self.out[self._next % BATCH_SIZE]
        self._next += 1
        if self.variant == "direct":
            self.produce_direct(clip, out)
        else:
            self.produce_clipwriter(clip, out)
        return 1

    def produce_direct(self, clip: PlannedClip, out: np.ndarray) -> None:
        """Read, decode and preprocess ``clip`` into ``out`` [clip_len, H, W, 3] with plain
        h5py and cv2 calls: the cheapest spelling of the per-clip work."""
        dataset = self.datasets[(clip.file_index, clip.video)]
        indices = clip.indices
        if is_contiguous(indices):
            encoded: Sequence[np.ndarray] = dataset[indices[0] : indices[-1] + 1]
        else:
            encoded = [dataset[i] for i in indices]
        top, left, flip = clip.top, clip.left, clip.flip
        bottom, right = top + CROP[0], left + CROP[1]
        for t, data in enumerate(encoded):
            image = cv2.imdecode(data, cv2.IMREAD_COLOR)
            if image is None:
                raise ValueError(f"undecodable frame in {clip.video}")
            small = cv2.resize(image, self._resize_wh, interpolation=cv2.INTER_LINEAR)
            frame = out[t]
            cv2.cvtColor(small[top:bottom, left:right], cv2.COLOR_BGR2RGB, dst=frame)
            if flip:
                cv2.flip(frame, 1, dst=frame)

    def produce_clipwriter(self, clip: PlannedClip, out: np.ndarray) -> None:
        """The same clip through h5feed's reader and decode code, as ``_Job.produce`` runs
        them per row (without the unit and the wire around it)."""
        handle = self.files[clip.file_index]
        encoded = handle.read_frames(clip.video, clip.indices)
        for t, (data, frame) in enumerate(zip(encoded, clip.indices, strict=True)):
            image = decode_frame(data, handle.path, clip.video, frame)
            where = (handle.path, clip.video, frame)
            self.writer.write(out[t], image, clip.crop_uniforms, clip.flip, where)

    def close(self) -> None:
        for handle in self.files:
            handle.close()
        for h5 in self.h5:
            h5.close()
        self.files, self.h5, self.datasets = [], [], {}


def check_variants_agree(paths: Sequence[str], seed: int, clips: int = 4) -> None:
    """Both per-core spellings must give the same pixels for the same planned clips (so the
    cheaper one does the same work, not less). Raises AssertionError otherwise."""
    contender = SingleProcess(paths, "direct", seed)
    contender.start()
    try:
        for clip in contender.plan[:clips]:
            a = np.empty((CLIP_LEN, *CROP, 3), np.uint8)
            b = np.empty_like(a)
            contender.produce_direct(clip, a)
            contender.produce_clipwriter(clip, b)
            if not np.array_equal(a, b):
                raise AssertionError(f"per-core variants disagree on a clip of {clip.video}")
    finally:
        contender.close()


class H5Feed(Contender):
    """h5feed with ``workers`` local workers, through ``dataset()`` (tf.data) or
    ``batches()`` (NumPy), forever (``epochs=None``), one batch per :meth:`take`."""

    def __init__(self, paths: Sequence[str], api: str, workers: int, seed: int, cache: str):
        if api not in ("dataset", "batches"):
            raise ValueError(f"unknown api {api!r}")
        self.api = api
        self.workers = workers
        self.paths = list(paths)
        self.seed = seed
        self.cache = cache
        self._iterator: Iterator[Any] | None = None
        self._pids: list[int] = []

    def feed_kwargs(self) -> dict[str, Any]:
        """The core workload's arguments, shared by ``dataset()`` and ``batches()``."""
        return {
            "clip_len": CLIP_LEN,
            "resize": RESIZE,
            "crop": CROP,
            "flip": True,
            "batch_size": BATCH_SIZE,
            "shuffle": True,
            "seed": self.seed,
            "epochs": None,
            "workers": self.workers,
            "index_cache": self.cache,
        }

    def start(self) -> None:
        import h5feed

        before = worker_children()
        if self.api == "dataset":
            self._iterator = iter(h5feed.dataset(self.paths, **self.feed_kwargs()))
        else:
            self._iterator = iter(h5feed.batches(self.paths, **self.feed_kwargs()))
        self.take()  # the first batch: workers started, files indexed
        self._pids = sorted(worker_children() - before)

    def take(self) -> int:
        if self._iterator is None:
            raise RuntimeError("take() before start()")
        batch = next(self._iterator)
        return int(batch["frames"].shape[0])

    def worker_pids(self) -> list[int]:
        return self._pids

    def close(self) -> None:
        iterator, self._iterator = self._iterator, None
        close = getattr(iterator, "close", None)
        if close is not None:
            close()  # a BatchStream; a tf.data iterator is closed when collected
        del iterator
        gc.collect()


def make_contender(spec: dict[str, Any]) -> Contender:
    """The contender a ``--contender`` JSON spec describes."""
    if spec["kind"] == "single":
        return SingleProcess(spec["paths"], spec["variant"], spec["seed"])
    return H5Feed(spec["paths"], spec["api"], spec["workers"], spec["seed"], spec["cache"])


# --------------------------------------------------------------------------------------------
# Measuring (in the contender's process)


@dataclasses.dataclass(frozen=True, slots=True)
class Window:
    """What one timed window measured (summed over processes for a multi-process row)."""

    clips: int
    wall_s: float
    trainer_cpu_s: float
    trainer_sys_s: float
    trainer_minor_faults: int
    worker_cpu_s: float
    machine_busy_s: float

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
    def trainer_sys_ms_per_clip(self) -> float:
        return 1000.0 * self.trainer_sys_s / max(self.clips, 1)

    @property
    def trainer_faults_per_clip(self) -> float:
        return self.trainer_minor_faults / max(self.clips, 1)

    @property
    def worker_cpu_ms_per_clip(self) -> float:
        return 1000.0 * self.worker_cpu_s / max(self.clips, 1)

    @property
    def total_cpu_ms_per_clip(self) -> float:
        return self.trainer_cpu_ms_per_clip + self.worker_cpu_ms_per_clip

    @property
    def other_load_cores(self) -> float:
        """Cores busy with anything but the contender's own processes."""
        own = self.trainer_cpu_s + self.worker_cpu_s
        return max(self.machine_busy_s - own, 0.0) / self.wall_s

    def as_dict(self) -> dict[str, float]:
        """Raw fields and derived metrics."""
        derived = {name: getattr(self, name) for name in METRICS}
        return {**dataclasses.asdict(self), **derived}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Window:
        """The inverse of :meth:`as_dict` (derived metrics ignored)."""
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})


#: Per-window metrics that are reported as medians.
METRICS = (
    "clips_per_s",
    "frames_per_s",
    "trainer_cpu_ms_per_clip",
    "trainer_sys_ms_per_clip",
    "trainer_faults_per_clip",
    "worker_cpu_ms_per_clip",
    "total_cpu_ms_per_clip",
    "other_load_cores",
)


def drive_for(contender: Contender, seconds: float) -> int:
    """Take clips from ``contender`` for ``seconds`` (untimed); return how many."""
    clips = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        clips += contender.take()
    return clips


def measure_window(contender: Contender, seconds: float) -> Window:
    """Take clips for ``seconds``: the window ends with the first take that ends past it, and
    rates use the window's actual length."""
    pids = contender.worker_pids()
    workers0 = sum(process_cpu_s(pid) for pid in pids)
    busy0 = system_busy_s()
    sys0, faults0 = self_sys_and_faults()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    deadline = t0 + seconds
    clips = 0
    while True:
        clips += contender.take()
        if time.perf_counter() >= deadline:
            break
    t1 = time.perf_counter()
    cpu1 = time.process_time()
    sys1, faults1 = self_sys_and_faults()
    busy1 = system_busy_s()
    workers1 = sum(process_cpu_s(pid) for pid in pids)
    return Window(
        clips=clips,
        wall_s=t1 - t0,
        trainer_cpu_s=cpu1 - cpu0,
        trainer_sys_s=sys1 - sys0,
        trainer_minor_faults=faults1 - faults0,
        worker_cpu_s=workers1 - workers0,
        machine_busy_s=busy1 - busy0,
    )


def send(kind: str, payload: dict[str, Any]) -> None:
    """One message to the orchestrator, on stdout (other output there is ignored)."""
    sys.stdout.write(f"{_TAG}{kind} {json.dumps(payload)}\n")
    sys.stdout.flush()


def serve_contender(spec: dict[str, Any]) -> int:
    """The contender process: start, say ready, then run windows on request until stop.

    Requests, one per stdin line: ``window WARMUP SECONDS`` or ``stop``.
    """
    contender = make_contender(spec)
    started = time.monotonic()
    try:
        contender.start()
        tf = sys.modules.get("tensorflow")
        send(
            "ready",
            {
                "pid": os.getpid(),
                "worker_pids": contender.worker_pids(),
                "startup_s": time.monotonic() - started,
                "tensorflow": getattr(tf, "__version__", None),
            },
        )
        for line in sys.stdin:
            words = line.split()
            if not words or words[0] == "stop":
                break
            drive_for(contender, float(words[1]))
            send("window", measure_window(contender, float(words[2])).as_dict())
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        contender.close()
    return 0


# --------------------------------------------------------------------------------------------
# Orchestrating (in the main process)


class ContenderProcess:
    """A contender running in a child process of this script, spoken to by lines."""

    def __init__(self, label: str, spec: dict[str, Any]) -> None:
        self.label = label
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--contender", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self._pending = b""
        self.ready: dict[str, Any] = {}

    def request(self, line: str) -> None:
        """Send one request line."""
        if self.process.stdin is None:
            raise RuntimeError("no stdin")
        self.process.stdin.write(line.encode() + b"\n")
        self.process.stdin.flush()

    def receive(self, kind: str, timeout_s: float) -> dict[str, Any]:
        """Wait for the next message of ``kind``; raise if the process ends or times out."""
        deadline = time.monotonic() + timeout_s
        while True:
            line, newline, rest = self._pending.partition(b"\n")
            if newline:
                self._pending = rest
                text = line.decode(errors="replace")
                if text.startswith(_TAG + kind + " "):
                    payload: dict[str, Any] = json.loads(text[len(_TAG) + len(kind) + 1 :])
                    return payload
                continue
            self._read_more(deadline)

    def _read_more(self, deadline: float) -> None:
        stdout = self.process.stdout
        if stdout is None:
            raise RuntimeError("no stdout")
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{self.label}: no answer in time")
        readable, _, _ = select.select([stdout], [], [], left)
        if readable:
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                code = self.process.wait()
                raise RuntimeError(f"{self.label}: contender process exited with code {code}")
            self._pending += chunk

    def stop(self) -> None:
        """Ask the process to stop, then make sure it has (terminate, kill)."""
        with contextlib.suppress(OSError, RuntimeError):  # already gone
            self.request("stop")
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclasses.dataclass
class Row:
    """A row of the report: one contender, run by one process (or several at once)."""

    key: str
    label: str
    kind: str  # "per-core", "per-core xN" or the h5feed API ("dataset", "batches")
    workers: int
    processes: list[ContenderProcess]
    windows: list[Window] = dataclasses.field(default_factory=list)


def make_rows(paths: Sequence[str], settings: Settings) -> tuple[list[Row], list[ContenderProcess]]:
    """Start every contender process; return the report rows and all processes."""
    base = {"paths": list(paths), "seed": settings.seed}
    n = settings.max_workers
    directs = [
        ContenderProcess(
            f"per-core direct #{i}",
            {**base, "kind": "single", "variant": "direct", "seed": settings.seed + i},
        )
        for i in range(max(n, 1))
    ]
    clipwriter = ContenderProcess(
        "per-core ClipWriter", {**base, "kind": "single", "variant": "clipwriter"}
    )
    rows = [
        Row(
            "per-core limit (direct cv2)", "per-core limit (direct cv2)", "per-core", 1, directs[:1]
        ),
        Row(
            "per-core limit (ClipWriter)",
            "per-core limit (ClipWriter)",
            "per-core",
            1,
            [clipwriter],
        ),
    ]
    if n >= 2:
        label = f"per-core x{n} processes (direct)"
        rows.append(Row(label, label, "per-core xN", n, directs))
    cache = str(settings.data_dir / "index-cache")
    feeds: list[ContenderProcess] = []
    for api in ["dataset", "batches"] if settings.use_tf else ["batches"]:
        for workers in range(1, n + 1):
            spec = {**base, "kind": "feed", "api": api, "workers": workers, "cache": cache}
            key = f"h5feed.{api} workers={workers}"
            feeds.append(ContenderProcess(key, spec))
            rows.append(Row(key, f"h5feed.{api}", api, workers, feeds[-1:]))
    return rows, [*directs, clipwriter, *feeds]


def combine(windows: Sequence[Window]) -> Window:
    """One window of a row run by several processes at once: clips, CPU and faults summed;
    wall time averaged (so clips/s is close to the sum of the rates); machine busy time
    averaged (every process measured the whole machine over about the same time)."""
    if len(windows) == 1:
        return windows[0]
    return Window(
        clips=sum(w.clips for w in windows),
        wall_s=statistics.fmean(w.wall_s for w in windows),
        trainer_cpu_s=sum(w.trainer_cpu_s for w in windows),
        trainer_sys_s=sum(w.trainer_sys_s for w in windows),
        trainer_minor_faults=sum(w.trainer_minor_faults for w in windows),
        worker_cpu_s=sum(w.worker_cpu_s for w in windows),
        machine_busy_s=statistics.fmean(w.machine_busy_s for w in windows),
    )


def run_window(row: Row, settings: Settings) -> Window:
    """Run one window of ``row`` (all its processes at once) and return it."""
    for process in row.processes:
        process.request(f"window {settings.warmup_s} {settings.window_s}")
    timeout = settings.warmup_s + settings.window_s + _REPLY_GRACE_S
    results = [Window.from_dict(p.receive("window", timeout)) for p in row.processes]
    return combine(results)


def run_schedule(rows: Sequence[Row], settings: Settings) -> None:
    """Interleave the rows' windows, rotating the order by one row per repeat."""
    bar = progress_bar("windows", settings.repeats * len(rows), enabled=settings.progress)
    try:
        _run_windows(rows, settings, bar)
    finally:
        bar.close()


def _run_windows(rows: Sequence[Row], settings: Settings, bar: Bar) -> None:
    done = 0
    for repeat in range(settings.repeats):
        shift = repeat % len(rows)
        for row in [*rows[shift:], *rows[:shift]]:
            bar.update(done, f"{row.key} (repeat {repeat + 1})")
            window = run_window(row, settings)
            row.windows.append(window)
            done += 1
            bar.update(done)
            log(
                f"repeat {repeat + 1}/{settings.repeats} {row.key:<34} "
                f"{window.clips_per_s:7.1f} clips/s  trainer "
                f"{window.trainer_cpu_ms_per_clip:5.2f} ms/clip  other "
                f"{window.other_load_cores:4.2f} cores"
            )


def wait_until_ready(processes: Sequence[ContenderProcess]) -> None:
    """Wait for every contender process to be started (startup is not measured)."""
    for process in processes:
        process.ready = process.receive("ready", _START_TIMEOUT_S)
        log(f"started {process.label} in {process.ready['startup_s']:.1f} s")


# --------------------------------------------------------------------------------------------
# Summarising and reporting


def medians(windows: Sequence[Window]) -> dict[str, float]:
    """The median of every metric over ``windows``."""
    return {name: statistics.median(getattr(w, name) for w in windows) for name in METRICS}


def per_core_limit(rows: Sequence[Row]) -> tuple[str, float, list[float]]:
    """The faster per-core spelling (by median clips/s): its name, median rate, and the best
    per-core rate of every repeat (for ratios paired by repeat)."""
    single = [row for row in rows if row.kind == "per-core"]
    best = max(single, key=lambda row: medians(row.windows)["clips_per_s"])
    per_repeat = [
        max(ws) for ws in zip(*([w.clips_per_s for w in r.windows] for r in single), strict=True)
    ]
    return best.key, medians(best.windows)["clips_per_s"], per_repeat


def summarise(rows: Sequence[Row], settings: Settings) -> dict[str, Any]:
    """The per-core limit and, for each h5feed API at max workers, the ratio to max_workers
    x that limit (of medians, and the median of ratios paired by repeat), the trainer CPU
    and whether the target is met."""
    best, limit, limit_by_repeat = per_core_limit(rows)
    n = settings.max_workers
    parallel = next((r for r in rows if r.kind == "per-core xN"), None)
    verdicts: dict[str, Any] = {}
    for row in rows:
        if row.kind not in ("dataset", "batches") or row.workers != n:
            continue
        row_medians = medians(row.windows)
        ratio = row_medians["clips_per_s"] / (n * limit)
        paired = [
            w.clips_per_s / (n * b) for w, b in zip(row.windows, limit_by_repeat, strict=True)
        ]
        cpu = row_medians["trainer_cpu_ms_per_clip"]
        verdict = {
            "workers": n,
            "clips_per_s": row_medians["clips_per_s"],
            "ratio_to_n_times_per_core": ratio,
            "paired_ratios_by_repeat": paired,
            "median_paired_ratio": statistics.median(paired),
            "trainer_cpu_ms_per_clip": cpu,
            "meets_ratio": ratio >= TARGET_RATIO,
            "meets_trainer_cpu": cpu <= TARGET_TRAINER_CPU_MS,
        }
        if parallel is not None:
            ceiling = medians(parallel.windows)["clips_per_s"]
            verdict["ratio_to_n_processes_no_ipc"] = row_medians["clips_per_s"] / ceiling
        verdicts[row.kind] = verdict
    return {
        "per_core_limit_clips_per_s": limit,
        "per_core_limit_variant": best,
        "per_core_limit_by_repeat": limit_by_repeat,
        "max_workers": n,
        "target": {
            "line": TARGET_LINE,
            "ratio": TARGET_RATIO,
            "trainer_cpu_ms_per_clip": TARGET_TRAINER_CPU_MS,
        },
        "h5feed": verdicts,
    }


_COLUMNS = (
    # (header, unit, width, metric, format)
    ("clips/s", "", 8, "clips_per_s", ".1f"),
    ("frames/s", "", 9, "frames_per_s", ".0f"),
    ("trainer", "ms/clip", 8, "trainer_cpu_ms_per_clip", ".2f"),
    ("(sys)", "ms/clip", 8, "trainer_sys_ms_per_clip", ".2f"),
    ("faults", "/clip", 7, "trainer_faults_per_clip", ".0f"),
    ("workers", "ms/clip", 8, "worker_cpu_ms_per_clip", ".2f"),
    ("total", "ms/clip", 8, "total_cpu_ms_per_clip", ".2f"),
    ("other", "cores", 6, "other_load_cores", ".2f"),
)


def format_table(rows: Sequence[Row], summary: dict[str, Any]) -> str:
    """The human-readable report: one row per contender (medians; clips/s range over the
    windows), then the per-core limit, the ratios and the target."""
    head = f"{'contender':<34} {'N':>2} " + " ".join(f"{h:>{w}}" for h, _, w, _, _ in _COLUMNS)
    head += f" {'clips/s range':>15}"
    units = f"{'':<34} {'':>2} " + " ".join(f"{u:>{w}}" for _, u, w, _, _ in _COLUMNS)
    lines = [head, units, "-" * len(head)]
    for row in rows:
        values = medians(row.windows)
        rates = [w.clips_per_s for w in row.windows]
        cells = " ".join(f"{values[m]:>{w}{f}}" for _, _, w, m, f in _COLUMNS)
        spread = f"{min(rates):.1f}-{max(rates):.1f}"
        lines.append(f"{row.label:<34} {row.workers:>2} {cells} {spread:>15}")
    n = summary["max_workers"]
    limit = summary["per_core_limit_clips_per_s"]
    lines += [
        "",
        "trainer = CPU time of the consuming process (all its threads), per clip; (sys) and "
        "faults: its kernel time and minor page faults; workers = worker processes' CPU; "
        "other = cores used by anything else on the machine.",
        f"per-core limit: {limit:.1f} clips/s ({summary['per_core_limit_variant']}); "
        f"{n} x limit = {n * limit:.1f} clips/s",
    ]
    for api, verdict in summary["h5feed"].items():
        ok = verdict["meets_ratio"] and (api != "dataset" or verdict["meets_trainer_cpu"])
        extra = ""
        if "ratio_to_n_processes_no_ipc" in verdict:
            extra = f", / {n} independent processes = {verdict['ratio_to_n_processes_no_ipc']:.3f}"
        lines.append(
            f"h5feed.{api}({n} workers) / ({n} x per-core limit) = "
            f"{verdict['ratio_to_n_times_per_core']:.3f} (paired by repeat: median "
            f"{verdict['median_paired_ratio']:.3f}{extra}); trainer CPU "
            f"{verdict['trainer_cpu_ms_per_clip']:.2f} ms/clip -> {'MEETS' if ok else 'MISSES'}"
        )
    lines.append(TARGET_LINE + " (trainer CPU judged on h5feed.dataset)")
    return "\n".join(lines)


def machine_info(tensorflow_version: str | None) -> dict[str, Any]:
    """CPU model, core counts, load and the versions that matter to the numbers."""
    import zmq

    import h5feed

    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu_model": model,
        "cores_available": available_cores(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "loadavg": list(os.getloadavg()),
        "cv2_threads": cv2.getNumThreads(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cv2": cv2.__version__,
        "h5py": h5py.__version__,
        "pyzmq": zmq.__version__,
        "h5feed": h5feed.__version__,
        "tensorflow": tensorflow_version,
    }


def write_json(
    path: pathlib.Path,
    settings: Settings,
    machine: dict[str, Any],
    rows: Sequence[Row],
    summary: dict[str, Any],
) -> None:
    """Every window's raw numbers, the medians, the verdicts and the machine, as JSON."""
    document = {
        "settings": {
            "window_s": settings.window_s,
            "repeats": settings.repeats,
            "warmup_s": settings.warmup_s,
            "max_workers": settings.max_workers,
            "quick": settings.quick,
            "seed": settings.seed,
            "dataset": {**dataclasses.asdict(settings.spec), "dir": str(dataset_dir(settings))},
            "workload": {
                "clip_len": CLIP_LEN,
                "resize": list(RESIZE),
                "crop": list(CROP),
                "flip": True,
                "batch_size": BATCH_SIZE,
                "shuffle": True,
            },
        },
        "machine": machine,
        "contenders": {
            row.key: {
                "name": row.label,
                "kind": row.kind,
                "workers": row.workers,
                "processes": [p.ready for p in row.processes],
                "windows": [w.as_dict() for w in row.windows],
                "median": medians(row.windows),
            }
            for row in rows
        },
        "summary": summary,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def run(settings: Settings) -> dict[str, Any]:
    """The whole benchmark; prints the report and returns the summary."""
    paths = prepare_dataset(settings)
    check_variants_agree(paths, settings.seed)
    loadavg = os.getloadavg()
    log(
        f"{available_cores()} cores, load {loadavg[0]:.2f}; {settings.repeats} windows x "
        f"{settings.window_s:g} s per contender, each after {settings.warmup_s:g} s warm-up"
    )
    rows, processes = make_rows(paths, settings)
    try:
        wait_until_ready(processes)
        run_schedule(rows, settings)
    finally:
        for process in processes:
            process.stop()
    tf_version = next(
        (p.ready.get("tensorflow") for p in processes if p.ready.get("tensorflow")), None
    )
    machine = {**machine_info(tf_version), "loadavg_before": list(loadavg)}
    summary = summarise(rows, settings)
    print(format_table(rows, summary))
    print(f"machine: {machine['cpu_model']}, {machine['cores_available']} cores available")
    if settings.json_path is not None:
        write_json(settings.json_path, settings, machine, rows, summary)
        log(f"wrote {settings.json_path}")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (also the entry point of the contender processes)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.contender is not None:
        return serve_contender(json.loads(args.contender))
    run(settings_from_args(args, parser))
    return 0


if __name__ == "__main__":
    sys.exit(main())
