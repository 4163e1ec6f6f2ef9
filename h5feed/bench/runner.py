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

import contextlib
import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from h5feed.bench.contender import PARALLEL_PER_CORE, PER_CORE, Info
from h5feed.bench.measure import Window
from h5feed.bench.procstat import descendants, process_cpu_s, tree_memory_mb
from h5feed.bench.run_one import PROGRESS, TAG
from h5feed.bench.workload import VideoRef

#: The longest silence allowed while a contender starts: TensorFlow's import and the start of
#: its pipeline on a busy machine (no batch comes then, so no ``progress`` either).
_START_SILENCE_S = 600.0
#: The longest silence allowed during a window, counted from the request or the last
#: ``progress``: longer than any wait of a contender's own failure detection (h5feed's
#: ``unit_timeout_s`` is 120 s, a replaced worker's ``start_timeout_s`` 60 s), so that those
#: end with the contender's own error, and short enough that a hung child ends the row.
_WINDOW_SILENCE_S = 300.0
#: How often a wait for a message also checks that the child lives: a child that exits while
#: its own children hold its stdout gives no end of file.
_EXIT_POLL_S = 1.0
#: How long a child asked to stop may take before it is terminated.
_STOP_GRACE_S = 30.0
_MEMORY_EVERY_S = 0.5  # the shortest pause between two memory samples
_MEMORY_MAX_LOAD = 0.005  # the share of one core the memory sampler may use
_STDERR_TAIL_CHARS = 2000


class ContenderFailed(Exception):
    """A contender process reported an error, exited, or did not answer in time."""


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


class ContenderProcess:
    """A ``run_one`` child process, spoken to by lines; its stderr goes to a temporary file
    (TensorFlow's logs), whose tail explains a failure.

    Slow is not hung: a child sends ``progress`` after a batch (at most every
    ``run_one.PROGRESS_EVERY_S``), and :meth:`receive` fails only after a *silence* of its
    ``silence_s``, however long the answer takes in all. So a loaded machine gives a slow
    figure, and a child that truly hangs (no message at all) is reported within
    ``silence_s``, with its stderr's tail, and terminated without being asked again. One
    that exits is reported with its exit code within ``_EXIT_POLL_S``, even while processes
    it started still hold its stdout (no end of file comes then). (A deadline fixed at the
    request, the warm-up plus the window plus 120 s, used to fail contenders whose batches
    merely came late on a loaded machine.)"""

    def __init__(self, label: str, spec: dict[str, Any]) -> None:
        self.label = label
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        self.process = subprocess.Popen(
            [sys.executable, "-m", "h5feed.bench.run_one", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        self._pending = b""
        self._silent = False  # it let a receive time out: stop() does not wait on it

    @property
    def pid(self) -> int:
        return self.process.pid

    def request(self, line: str) -> None:
        if self.process.stdin is None:
            raise RuntimeError("no stdin")
        try:
            self.process.stdin.write(line.encode() + b"\n")
            self.process.stdin.flush()
        except OSError as exc:
            tail = self.stderr_tail()
            raise ContenderFailed(f"{self.label}: process gone ({exc}){tail}") from exc

    def receive(self, kind: str, silence_s: float) -> dict[str, Any]:
        """The next message of ``kind``; ContenderFailed on an error message, an exit, or
        ``silence_s`` without any message (``progress`` restarts the count)."""
        deadline = time.monotonic() + silence_s
        while True:
            line, newline, rest = self._pending.partition(b"\n")
            if newline:
                self._pending = rest
                text = line.decode(errors="replace")
                if not text.startswith(TAG):
                    continue
                got, _, payload = text[len(TAG) :].partition(" ")
                message: dict[str, Any] = json.loads(payload)
                if got == "error":
                    raise ContenderFailed(f"{message['type']}: {message['message']}")
                if got == kind:
                    return message
                if got == PROGRESS:
                    deadline = time.monotonic() + silence_s
                continue
            self._read_more(deadline, silence_s)

    def _read_more(self, deadline: float, silence_s: float) -> None:
        stdout = self.process.stdout
        if stdout is None:
            raise RuntimeError("no stdout")
        left = deadline - time.monotonic()
        if left <= 0:
            self._silent = True
            raise ContenderFailed(
                f"{self.label}: no answer and no progress for {silence_s:.0f} s{self.stderr_tail()}"
            )
        readable, _, _ = select.select([stdout], [], [], min(left, _EXIT_POLL_S))
        if not readable and self.process.poll() is not None:
            # Exited; its workers may still hold the pipe, so no end of file would come.
            # Whatever it wrote before exiting is in the pipe now: read it first.
            readable, _, _ = select.select([stdout], [], [], 0)
            if not readable:
                self._exited()
        if readable:
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                self._exited()
            self._pending += chunk

    def _exited(self) -> NoReturn:
        code = self.process.wait()
        raise ContenderFailed(f"{self.label}: process exited with code {code}{self.stderr_tail()}")

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace")
        lines = [
            ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("I0000", "W0000"))
        ]
        tail = "\n".join(lines)[-_STDERR_TAIL_CHARS:]
        return f"\n{tail}" if tail else ""

    def stop(self) -> None:
        """Ask the process to stop, then make sure it has (terminate, kill). One that let a
        receive time out is not asked: it is terminated at once."""
        if not self._silent:
            with contextlib.suppress(OSError, RuntimeError, ContenderFailed):
                self.request("stop")
        try:
            self.process.wait(timeout=0 if self._silent else _STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._stderr.close()


class MemorySampler:
    """Peak RSS and PSS (MB) of a process tree, sampled in a thread of this process.

    A sample is not free: reading ``smaps_rollup`` of a TensorFlow process costs ~10 ms of
    CPU, and on a small machine that CPU is taken from the contender being timed (sampled
    every 0.5 s it was 1-2 % of a 2-core machine). So the pause after each sample is at least
    ``_MEMORY_EVERY_S`` and at least ``1 / _MEMORY_MAX_LOAD`` times what the sample cost:
    the sampler never uses more than ``_MEMORY_MAX_LOAD`` of one core."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_rss_mb = 0.0
        self.peak_pss_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-memory", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pause = _MEMORY_EVERY_S
        while not self._stop.wait(pause):
            began = time.thread_time()
            rss, pss = tree_memory_mb(self.pid)
            self.peak_rss_mb = max(self.peak_rss_mb, rss)
            self.peak_pss_mb = max(self.peak_pss_mb, pss)
            pause = max(_MEMORY_EVERY_S, (time.thread_time() - began) / _MEMORY_MAX_LOAD)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants."""
    return sum(process_cpu_s(p) for p in {pid} | descendants(pid))


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """``pid`` and all its descendants stopped (SIGSTOP) for the duration; continued
    (SIGCONT) afterwards, whatever happens."""
    frozen = []
    for target in [pid, *sorted(descendants(pid))]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGSTOP)
            frozen.append(target)
    try:
        yield
    finally:
        for target in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGCONT)


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
