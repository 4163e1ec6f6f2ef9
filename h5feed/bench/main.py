"""``h5feed bench`` from options to files: dataset, loaders, ceiling, report."""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from h5feed.bench import contender as registry
from h5feed.bench import report
from h5feed.bench.ceiling import default_producers
from h5feed.bench.child import ContenderFailed, ContenderProcess
from h5feed.bench.runner import (
    LimitFailed,
    Plan,
    Row,
    default_workers,
    plan_rows,
    run_loaders,
    steps_of,
)
from h5feed.bench.shapes import DatasetShape, prepare_shape
from h5feed.bench.targets import NONE, Targets
from h5feed.bench.targets import load as load_targets
from h5feed.bench.workload import (
    BATCH_SIZE,
    CLIP_LEN,
    CROP,
    FULL_SPEC,
    QUICK_SPEC,
    RESIZE,
    dataset_dir,
    index_videos,
    prepare_dataset,
)
from h5feed.common.system.procstat import available_cores
from h5feed.producer.sample_data import SampleSpec

_CEILING_TIMEOUT_S = 600.0


@dataclasses.dataclass(frozen=True)
class Options:
    """Everything the command line decided (see ``h5feed bench --help``)."""

    window_s: float
    repeats: int
    warmup_s: float
    workers: list[int] | None
    contenders: list[str] | None
    data_dir: pathlib.Path
    out: pathlib.Path | None
    seed: int
    loaders: bool
    ceiling: bool
    producers: int | None
    quick: bool
    command: str
    date: str
    transports: list[str] = dataclasses.field(default_factory=lambda: ["ipc"])
    io_threads: int = 1  # ZeroMQ I/O threads of the socket ceiling's raw receiver
    #: The dataset shapes (h5feed.bench.shapes); none: FULL_SPEC (QUICK_SPEC with --quick);
    #: more than one: a file-count sweep (h5feed.bench.sweep).
    datasets: tuple[DatasetShape, ...] = ()
    targets: pathlib.Path | None = None  # a targets file (h5feed.bench.targets); None: none

    def __post_init__(self) -> None:
        if self.window_s <= 0 or self.warmup_s < 0 or self.repeats < 1:
            raise ValueError("--window-s must be > 0, --warmup-s >= 0 and --repeats >= 1")
        if self.producers is not None and self.producers < 1:
            raise ValueError("--producers must be >= 1")
        if not (self.loaders or self.ceiling):
            raise ValueError("--ceiling and --no-ceiling together leave nothing to run")
        if not self.transports or set(self.transports) - {"ipc", "tcp", "curve"}:
            raise ValueError("--transports takes ipc, tcp and curve")
        if self.io_threads < 1:
            raise ValueError("--io-threads must be >= 1")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def progress(total: int) -> Iterator[Callable[[str], None]]:
    """A step function: a rich progress bar when stderr is a terminal, else one line per
    step."""
    if sys.stderr.isatty():
        try:
            from rich.progress import Progress
        except ImportError:
            pass
        else:
            with Progress(transient=False) as bar:
                task = bar.add_task("h5feed bench", total=total)

                def advance(text: str) -> None:
                    bar.update(task, advance=1, description=text or "h5feed bench")

                yield advance
                bar.update(task, completed=total)
                return
    done = [0]

    def say(text: str) -> None:
        done[0] += 1
        if text:
            log(f"[{done[0]}/{total}] {text}")

    yield say


def _ceiling_spec(plan: Plan, producers: int, kind: str) -> dict[str, Any]:
    """What a ceiling contender process is told: its kind, the windows, the dataset."""
    return {
        "kind": kind,
        "producers": producers,
        "repeats": plan.repeats,
        "window_s": plan.window_s,
        "warmup_s": plan.warmup_s,
        "setup": {
            "paths": list(plan.paths),
            "videos": [[v.file_index, v.name, v.frames] for v in plan.videos],
            "workers": 0,
            "seed": plan.seed,
            "cache_dir": plan.cache_dir,
        },
    }


def _run_contender(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``spec`` in a process of its own; its result, or ``{"error": ...}``."""
    process = ContenderProcess(name, spec)
    try:
        return process.receive(spec["kind"], _CEILING_TIMEOUT_S)
    except ContenderFailed as exc:
        return {"error": str(exc)}
    finally:
        process.stop()


def run_ceiling(plan: Plan, producers: int) -> dict[str, Any]:
    """The consumer ceiling in a process of its own (see :mod:`h5feed.bench.ceiling`)."""
    return _run_contender("ceiling", _ceiling_spec(plan, producers, "ceiling"))


def run_socket_ceiling(
    plan: Plan, producers: int, transports: list[str], io_threads: int = 1
) -> dict[str, Any]:
    """The consumer ceiling over TCP between network namespaces, in a process of its own
    (see :mod:`h5feed.bench.socket_ceiling`); the namespace is made here and removed before
    this returns."""
    from h5feed.bench.netns import NetnsUnavailable, network_namespace

    try:
        with network_namespace() as net:
            spec = _ceiling_spec(plan, producers, "socket_ceiling")
            spec.update(transports=transports, netns=dataclasses.asdict(net), io_threads=io_threads)
            return _run_contender("socket ceiling", spec)
    except NetnsUnavailable as exc:
        return {"error": str(exc)}


def run_bench(options: Options) -> int:
    """The whole benchmark; returns the exit status (0 even when contenders failed: their
    failure is a result, written in the report). More than one dataset shape: a sweep."""
    if len(options.datasets) > 1:
        from h5feed.bench.sweep import run_sweep

        return run_sweep(options)
    goals = load_targets(options.targets) if options.targets is not None else NONE
    shape = options.datasets[0] if options.datasets else None
    document = measure_dataset(options, shape, goals)
    if document is None:
        return 1
    out = options.out or pathlib.Path("docs/bench") / f"bench-{available_cores()}cores"
    notes = report.write_all(document, out)
    print(report.markdown(document))
    for note in notes:
        log(f"note: {note}")
    log(f"wrote {out}.json, {out}.md" + ("" if notes else f", {out}.png"))
    return 0


def base_spec(options: Options) -> SampleSpec:
    """The sample data of ``--quick`` or of the full run, before ``--dataset``'s shape."""
    return QUICK_SPEC if options.quick else FULL_SPEC


def measure_dataset(
    options: Options, shape: DatasetShape | None, goals: Targets
) -> dict[str, Any] | None:
    """Loaders and ceiling over the dataset of ``shape`` (None: the default one): the report's
    document, or None when the per-core limit failed (then nothing can be judged)."""
    cores = available_cores()
    spec = base_spec(options)
    chosen = registry.by_key(options.contenders) if options.contenders else registry.CONTENDERS
    began = time.monotonic()
    if shape is None:
        paths = prepare_dataset(options.data_dir, spec)
        where = dataset_dir(options.data_dir, spec).name
    else:
        paths = prepare_shape(options.data_dir, spec, shape)
        where = ", ".join(dataset_dir(options.data_dir, s).name for s in shape.specs(spec))
    videos = index_videos(paths)
    log(f"dataset: {len(videos)} videos in {len(paths)} files ({time.monotonic() - began:.1f} s)")
    if options.window_s < 10 and not options.quick:
        log("note: windows under 10 s; these figures are not the method's")
    plan = Plan(
        paths=tuple(paths),
        videos=tuple(videos),
        contenders=tuple(chosen),
        workers=tuple(options.workers or default_workers(cores)),
        window_s=options.window_s,
        warmup_s=options.warmup_s,
        repeats=options.repeats,
        seed=options.seed,
        cache_dir=str(options.data_dir / "index-cache"),
    )
    rows: list[Row] = plan_rows(plan, cores) if options.loaders else []
    limit_row = None
    if options.loaders:
        try:
            with progress(steps_of(rows, plan)) as step:
                limit_row = run_loaders(plan, rows, registry.missing_packages, step)
        except (ContenderFailed, LimitFailed) as exc:  # without the limit no figure is judged
            log(f"h5feed bench: error: the per-core limit failed: {exc}")
            return None
    ceiling = socket_ceiling = None
    sockets = [t for t in options.transports if t != "ipc"]
    if options.ceiling:
        producers = options.producers or default_producers()
        if "ipc" in options.transports:
            log(f"consumer ceiling: {producers} synthetic producer(s) ...")
            ceiling = run_ceiling(plan, producers)
        if sockets:
            log(f"socket ceiling ({', '.join(sockets)}): {producers} sender(s) in a netns ...")
            socket_ceiling = run_socket_ceiling(plan, producers, sockets, options.io_threads)
            if "error" in socket_ceiling:
                log(f"h5feed bench: socket ceiling failed: {socket_ceiling['error']}")
    sizes = (
        f"{len(paths)} HDF5 files" if shape is None else f"{len(paths)} HDF5 files ({shape.text})"
    )
    settings = {
        "command": options.command,
        "date": options.date,
        "quick": options.quick,
        "window_s": plan.window_s,
        "warmup_s": plan.warmup_s,
        "repeats": plan.repeats,
        "workers": list(plan.workers),
        "seed": plan.seed,
        "workload": (
            f"{CLIP_LEN}-frame clips, resize {RESIZE[0]}x{RESIZE[1]}, random crop "
            f"{CROP[0]}x{CROP[1]}, flip, batch {BATCH_SIZE}, one clip per video per epoch, "
            "shuffled"
        ),
        "dataset": (
            f"{len(videos)} videos in {sizes} of {spec.width}x{spec.height} "
            f"JPEG (quality {spec.quality}), {spec.min_frames}-{spec.max_frames} frames "
            f"({where})"
        ),
        "method": (
            f"Each contender in a fresh process; a one-epoch check; {plan.warmup_s:g} s "
            f"warm-up then {plan.repeats} window(s) of {plan.window_s:g} s, each right after "
            "a per-core-limit window; medians. Trainer CPU = the consuming process, all "
            "threads, workers excluded; PSS = proportional memory of the whole process tree "
            "(peak of samples at most every 0.5 s, their reading kept under 0.5 % of a core); "
            "other load = cores busy with anything else."
        ),
    }
    return report.build_document(settings, limit_row, rows, ceiling, socket_ceiling, goals)
