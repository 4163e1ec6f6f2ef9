"""The schedule of ``h5feed bench``: every contender in a fresh process, windows interleaved
with the per-core limit's.

Method (what the report states):

1. The dataset is made once under ``--data-dir`` (kept between runs) and indexed.
2. The per-core limit runs in a process of its own for the whole run (it is synchronous: idle,
   it uses no CPU). Each other contender, for each worker count, gets a fresh process
   (``python -m h5feed.bench.run_one``), started once; start-up is not timed.
3. In that process the contender first runs one epoch of a one-epoch instance: it must yield
   exactly one clip per video (h5feed's epoch) of shape [16, 112, 112, 3] uint8, else it is
   reported as failed and not timed.
4. Then, ``--repeats`` times: one window of the per-core limit while every process of the
   contender is stopped (SIGSTOP, then SIGCONT: some loaders keep their workers busy while
   the trainer takes nothing, and that work must land neither in the limit's window nor in
   a buffer the contender's window would then drain), then ``--warmup-s`` of untimed
   batches and one ``--window-s`` window of the contender. So every contender window has a
   limit window just before it, and drift of the machine hits both: ratios to the limit
   are paired window by window, and medians are reported.
5. While a contender's process lives, this process samples the memory of its process tree
   (RSS and PSS, every 0.5 s or less often: the sampler uses at most 0.5 % of a core) for
   the peak; the contender's own ``ru_maxrss`` comes with each window.
6. A contender is waited on as long as it makes progress (a batch, reported at most every
   second): on a loaded machine it gives a slow figure, not a failure. One silent for
   ``_WINDOW_SILENCE_S`` (``_START_SILENCE_S`` while it starts) is reported as failed with
   its stderr's tail (:class:`ContenderProcess`). The per-core limit failing ends the run
   (:class:`LimitFailed`): a late answer of it would pair with the next row's request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from h5feed.bench.child import (
    ContenderFailed,
    ContenderProcess,
    MemorySampler,
    stopped,
)
from h5feed.bench.contender import PARALLEL_PER_CORE, PER_CORE, Info
from h5feed.bench.measure import Window
from h5feed.bench.workload import VideoRef

#: The longest silence allowed while a contender starts: TensorFlow's import and the start of
#: its pipeline on a busy machine (no batch comes then, so no ``progress`` either).
_START_SILENCE_S = 600.0
#: The longest silence allowed during a window, counted from the request or the last
#: ``progress``: longer than any wait of a contender's own failure detection (h5feed's
#: ``unit_timeout_s`` is 120 s, a replaced worker's ``start_timeout_s`` 60 s), so that those
#: end with the contender's own error, and short enough that a hung child ends the row.
_WINDOW_SILENCE_S = 300.0


class LimitFailed(Exception):
    """The per-core limit failed during a row: no later window could be paired (a late answer
    would pair with the next request), so the run ends."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a run of the loaders does."""

    paths: tuple[str, ...]
    videos: tuple[VideoRef, ...]
    contenders: tuple[Info, ...]
    workers: tuple[int, ...]
    window_s: float
    warmup_s: float
    repeats: int
    seed: int
    cache_dir: str


@dataclasses.dataclass
class Row:
    """One line of the report: a contender at one worker count."""

    info: Info
    workers: int  # worker processes; for "threads"/"one" contenders, the cores it may use / 1
    status: str = "pending"  # "ok", "failed", "not installed", "cannot run"
    reason: str = ""
    check: dict[str, Any] = dataclasses.field(default_factory=dict)
    ready: dict[str, Any] = dataclasses.field(default_factory=dict)
    windows: list[Window] = dataclasses.field(default_factory=list)
    limit_windows: list[Window] = dataclasses.field(default_factory=list)  # paired, by index
    peak_rss_mb: float = 0.0
    peak_pss_mb: float = 0.0

    @property
    def key(self) -> str:
        if self.info.parallelism == "workers":
            return f"{self.info.key} workers={self.workers}"
        return self.info.key


def setup_spec(plan: Plan, target: str, workers: int, check: bool) -> dict[str, Any]:
    """The JSON spec of a run_one process."""
    return {
        "target": target,
        "check": check,
        "setup": {
            "paths": list(plan.paths),
            "videos": [[v.file_index, v.name, v.frames] for v in plan.videos],
            "workers": workers,
            "seed": plan.seed,
            "cache_dir": plan.cache_dir,
        },
    }


def validate_check(row: Row, expected_clips: int) -> None:
    """ContenderFailed unless the one-epoch run gave one clip per video of the right shape."""
    check = row.check
    if check["clips"] != expected_clips:
        raise ContenderFailed(
            f"one epoch gave {check['clips']} clips, h5feed gives {expected_clips} (one per video)"
        )
    if not check["ok_shape"]:
        raise ContenderFailed(
            f"frames of shape/dtype {check['kinds']}, expected [16, 112, 112, 3] uint8"
        )


def window_line(plan: Plan) -> str:
    return f"window {plan.warmup_s} {plan.window_s}"


def limit_window(limit: ContenderProcess, plan: Plan) -> Window:
    """One window of the per-core limit; LimitFailed if it fails or stays silent."""
    try:
        limit.request(window_line(plan))
        return Window.from_dict(limit.receive("window", _WINDOW_SILENCE_S))
    except ContenderFailed as exc:
        raise LimitFailed(str(exc)) from exc


def run_row(row: Row, limit: ContenderProcess, plan: Plan, step: Callable[[str], None]) -> None:
    """Check, then time ``row`` (see the module docstring); the row's failures end up in
    ``row``, the limit's raise LimitFailed."""
    spec = setup_spec(plan, row.info.target, row.workers, check=True)
    process = ContenderProcess(row.key, spec)
    sampler = MemorySampler(process.pid)
    try:
        row.check = process.receive("check", _START_SILENCE_S)
        validate_check(row, len(plan.videos))
        step(f"{row.key}: checked")
        row.ready = process.receive("ready", _START_SILENCE_S)
        for repeat in range(plan.repeats):
            with stopped(process.pid):
                row.limit_windows.append(limit_window(limit, plan))
            step(f"per-core limit (before {row.key}) {repeat + 1}/{plan.repeats}")
            process.request(window_line(plan))
            row.windows.append(Window.from_dict(process.receive("window", _WINDOW_SILENCE_S)))
            step(f"{row.key} {repeat + 1}/{plan.repeats}")
        row.status = "ok"
    except ContenderFailed as exc:
        row.status, row.reason = "failed", str(exc)
    finally:
        process.stop()
        sampler.stop()
        row.peak_rss_mb, row.peak_pss_mb = sampler.peak_rss_mb, sampler.peak_pss_mb


def plan_rows(plan: Plan, cores: int) -> list[Row]:
    """One row per contender and worker count (a single row for contenders without)."""
    rows = []
    for info in plan.contenders:
        if info.key == PARALLEL_PER_CORE.key:  # one copy of the limit is the limit itself
            rows += [Row(info, n) for n in plan.workers if n > 1]
        elif info.parallelism == "workers":
            rows += [Row(info, n) for n in plan.workers]
        else:
            rows.append(Row(info, cores if info.parallelism == "threads" else 1))
    return rows


def steps_of(rows: Sequence[Row], plan: Plan) -> int:
    """Progress steps: the limit's check, then per row a check and two per repeat."""
    return 1 + len(rows) * (1 + 2 * plan.repeats)


def run_loaders(
    plan: Plan,
    rows: Sequence[Row],
    missing: Callable[[Info], list[str]],
    step: Callable[[str], None],
) -> Row:
    """Run every row (in place) and return the per-core limit's row (all its windows)."""
    limit_row = Row(PER_CORE, 1)
    limit = ContenderProcess("per-core limit", setup_spec(plan, PER_CORE.target, 1, True))
    sampler = MemorySampler(limit.pid)
    try:
        limit_row.check = limit.receive("check", _START_SILENCE_S)
        validate_check(limit_row, len(plan.videos))
        limit_row.ready = limit.receive("ready", _START_SILENCE_S)
        step("per-core limit: checked")
        for row in rows:
            absent = missing(row.info)
            if absent:
                row.status = "not installed"
                row.reason = f"needs {', '.join(absent)}: pip install 'h5feed[bench]'"
                step(f"{row.key}: not installed")
                for _ in range(1 + 2 * plan.repeats - 1):
                    step("")
                continue
            run_row(row, limit, plan, step)
            limit_row.windows += row.limit_windows
        limit_row.status = "ok"
    finally:
        limit.stop()
        sampler.stop()
        limit_row.peak_rss_mb, limit_row.peak_pss_mb = sampler.peak_rss_mb, sampler.peak_pss_mb
    return limit_row


def default_workers(cores: int) -> list[int]:
    """1, 2, 4, ... up to ``cores``, and ``cores`` itself."""
    counts = []
    n = 1
    while n < cores:
        counts.append(n)
        n *= 2
    return [*counts, cores]
