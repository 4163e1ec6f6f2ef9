"""Parts of ``h5feed bench`` on their own: the failure paths of the runner, fast.

The end-to-end runs are in test_bench_smoke.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import sys
import time

import numpy as np
import pytest

from h5feed.bench import contender as registry
from h5feed.bench.child import ContenderFailed, ContenderProcess
from h5feed.bench.contender import Setup
from h5feed.bench.measure import Window
from h5feed.bench.runner import (
    Plan,
    Row,
    run_row,
    validate_check,
)
from h5feed.bench.workload import (
    CLIP_SHAPE,
    QUICK_SPEC,
    ClipReader,
    epoch_plan,
    index_videos,
    prepare_dataset,
)


@pytest.fixture(scope="module")
def bench_paths(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return prepare_dataset(tmp_path_factory.mktemp("bench"), QUICK_SPEC)


def test_epoch_plan_is_every_video_once(bench_paths: list[str]) -> None:
    videos = index_videos(bench_paths)
    plan = epoch_plan(videos, seed=0, epoch=0)
    assert sorted((c.file_index, c.video) for c in plan) == sorted(
        (v.file_index, v.name) for v in videos
    )
    assert [c.video for c in epoch_plan(videos, 0, 1)] != [c.video for c in plan]


def test_reader_reopens_files_after_pickling(bench_paths: list[str]) -> None:
    import pickle

    videos = index_videos(bench_paths)
    reader = ClipReader(bench_paths)
    clip = epoch_plan(videos, 0, 0)[0]
    first = reader.clip(clip)
    copy = pickle.loads(pickle.dumps(reader))  # what a loader does to reach its workers
    assert first.shape == CLIP_SHAPE and first.dtype == np.uint8
    assert np.array_equal(copy.clip(clip), first)
    reader.close()
    copy.close()


def row_with_check(clips: int, kinds: list[list[object]]) -> Row:
    row = Row(registry.by_key(["h5feed"])[0], 1)
    row.check = {
        "clips": clips,
        "kinds": kinds,
        "ok_shape": kinds == [[[16, 112, 112, 3], "uint8"]],
    }
    return row


def test_a_contender_with_another_epoch_size_fails() -> None:
    with pytest.raises(ContenderFailed, match="one epoch gave 7 clips, h5feed gives 8"):
        validate_check(row_with_check(7, [[[16, 112, 112, 3], "uint8"]]), 8)


def test_a_contender_with_other_frames_fails() -> None:
    with pytest.raises(ContenderFailed, match="float32"):
        validate_check(row_with_check(8, [[[16, 112, 112, 3], "float32"]]), 8)


class _Raises(registry.Contender):
    """A contender whose pipeline breaks on its first batch."""

    def next_frames(self) -> object:
        raise OSError("disk on fire")


def test_a_contender_that_raises_is_reported_with_its_error(
    bench_paths: list[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(pathlib.Path(__file__).parent))  # run_one imports us
    videos = index_videos(bench_paths)
    plan = Plan(
        paths=tuple(bench_paths),
        videos=tuple(videos),
        contenders=(),
        workers=(1,),
        window_s=0.2,
        warmup_s=0.0,
        repeats=1,
        seed=0,
        cache_dir=str(tmp_path / "cache"),
    )
    info = registry.Info("raises", "raises", f"{__name__}:_Raises", (), "one", "raises")
    row = Row(info, 1)
    run_row(row, limit=None, plan=plan, step=lambda _: None)  # type: ignore[arg-type]
    assert row.status == "failed"
    assert "OSError: disk on fire" in row.reason
    assert row.windows == []


class _Slow(registry.Contender):
    """Batches that come late (one clip every 0.1 s), for as long as it is asked."""

    def next_frames(self) -> np.ndarray:
        time.sleep(0.1)  # the slowness itself, not a wait for something
        return np.zeros((1, *CLIP_SHAPE), np.uint8)


class _HangsAfterOne(registry.Contender):
    """One batch (so it gets ready), then a hang that says where it is on stderr."""

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.batches = 0

    def next_frames(self) -> np.ndarray:
        self.batches += 1
        if self.batches > 1:
            print("hanging in next_frames", file=sys.stderr, flush=True)
            time.sleep(3600)
        return np.zeros((1, *CLIP_SHAPE), np.uint8)


class _ExitsLeavingAWorker(registry.Contender):
    """Starts a process that keeps its stdout (as a loader's workers do), then exits."""

    def next_frames(self) -> np.ndarray:
        import subprocess

        worker = subprocess.Popen(["sleep", "300"])  # stdout inherited: the pipe stays open
        pathlib.Path(self.setup.cache_dir, "worker.pid").write_text(str(worker.pid))
        os._exit(3)


class _OneEpoch(registry.Contender):
    """One clip per video in a one-epoch instance (it passes the check), endless otherwise."""

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.clips = 0

    def next_frames(self) -> np.ndarray:
        if self.setup.epochs == 1 and self.clips == len(self.setup.videos):
            raise StopIteration
        self.clips += 1
        return np.zeros((1, *CLIP_SHAPE), np.uint8)


def synthetic_process(
    name: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> ContenderProcess:
    """A real run_one child running one of this module's contenders, reporting progress
    every 0.1 s."""
    here = str(pathlib.Path(__file__).parent)  # run_one imports this module
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    spec = {
        "target": f"{__name__}:{name}",
        "check": False,
        "progress_every_s": 0.1,
        "setup": {"paths": [], "videos": [], "workers": 1, "seed": 0, "cache_dir": str(tmp_path)},
    }
    return ContenderProcess(name, spec)


def test_a_slow_child_answering_later_than_the_silence_bound_is_accepted(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    process = synthetic_process("_Slow", tmp_path, monkeypatch)
    try:
        process.receive("ready", silence_s=120)  # start-up: an interpreter and numpy
        began = time.monotonic()
        process.request("window 0 5")
        window = Window.from_dict(process.receive("window", silence_s=2.0))
        assert time.monotonic() - began > 2.0  # late in all, never silent for 2 s
        assert window.clips > 0 and window.wall_s >= 5.0
    finally:
        process.stop()


def test_a_child_that_never_answers_is_reported_in_bounded_time_with_its_stderr(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    process = synthetic_process("_HangsAfterOne", tmp_path, monkeypatch)
    try:
        process.receive("ready", silence_s=120)
        began = time.monotonic()
        process.request("window 0 1")
        with pytest.raises(ContenderFailed) as failed:
            process.receive("window", silence_s=3.0)
        assert time.monotonic() - began < 30.0, "not reported within its silence bound"
        assert "_HangsAfterOne: no answer and no progress for 3 s" in str(failed.value)
        assert "hanging in next_frames" in str(failed.value)  # the stderr's tail
    finally:
        stopping = time.monotonic()
        process.stop()
    assert process.process.returncode is not None
    assert time.monotonic() - stopping < 15.0, "a silent child is terminated, not waited on"


def test_a_child_that_exits_is_reported_with_its_code_while_its_worker_holds_the_pipe(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    process = synthetic_process("_ExitsLeavingAWorker", tmp_path, monkeypatch)
    began = time.monotonic()
    try:
        with pytest.raises(ContenderFailed, match="process exited with code 3"):
            process.receive("ready", silence_s=120)  # no end of file: the worker has stdout
        assert time.monotonic() - began < 60.0, "waited for the pipe, not for the process"
    finally:
        process.stop()
        pid_file = tmp_path / "worker.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_silent_per_core_limit_ends_the_run_instead_of_failing_one_row(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A late answer of the limit would pair with the next row's request: no row after it
    could be judged, so its silence is LimitFailed, which run_row does not swallow."""
    from h5feed.bench import runner
    from h5feed.bench.workload import VideoRef

    limit = synthetic_process("_HangsAfterOne", tmp_path, monkeypatch)
    monkeypatch.setattr(runner, "_WINDOW_SILENCE_S", 2.0)
    plan = Plan(
        paths=(),
        videos=(VideoRef(0, "a", 16), VideoRef(0, "b", 16)),
        contenders=(),
        workers=(1,),
        window_s=0.5,
        warmup_s=0.0,
        repeats=1,
        seed=0,
        cache_dir=str(tmp_path),
    )
    info = registry.Info("one-epoch", "one epoch", f"{__name__}:_OneEpoch", (), "one", "-")
    row = Row(info, 1)
    try:
        limit.receive("ready", silence_s=120)
        with pytest.raises(runner.LimitFailed, match="no answer and no progress for 2 s"):
            run_row(row, limit=limit, plan=plan, step=lambda _: None)
    finally:
        limit.stop()
    assert row.check["clips"] == 2 and row.windows == []  # it got as far as the limit


def test_unknown_contender_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown contenders"):
        registry.by_key(["h5feed", "nope"])


def test_stopped_freezes_a_process_tree_and_always_continues_it() -> None:
    import os
    import subprocess
    import sys
    import time

    from h5feed.bench.child import stopped
    from h5feed.common.system.procstat import descendants, proc_stat

    code = "import subprocess, time; subprocess.Popen(['sleep', '30']); time.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20

        def sleeping_grandchild() -> bool:  # started and exec'd (not a half-made fork)
            for pid in descendants(parent.pid):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as handle:
                        if handle.read().startswith(b"sleep"):
                            return True
                except OSError:  # gone meanwhile
                    continue
            return False

        while not sleeping_grandchild():
            assert time.monotonic() < deadline, "child never started"
            time.sleep(0.01)
        tree = [parent.pid, *descendants(parent.pid)]
        with pytest.raises(RuntimeError), stopped(parent.pid):
            deadline = time.monotonic() + 10  # a signal is delivered asynchronously
            while [proc_stat(p)[0] for p in tree] != [b"T"] * len(tree):
                assert time.monotonic() < deadline, [proc_stat(p)[0] for p in tree]
                time.sleep(0.01)
            raise RuntimeError("the limit's window failed")
        deadline = time.monotonic() + 10
        while any(proc_stat(p)[0] == b"T" for p in tree):
            assert time.monotonic() < deadline, "still stopped after the block"
            time.sleep(0.01)
    finally:
        for pid in descendants(parent.pid):
            os.kill(pid, 9)
        parent.kill()
        parent.wait(timeout=10)


def parallel_setup(paths: list[str], cache_dir: pathlib.Path, copies: int) -> Setup:
    return Setup(
        paths=tuple(paths),
        videos=tuple(index_videos(paths)),
        workers=copies,
        epochs=None,
        seed=0,
        cache_dir=str(cache_dir),
    )


def test_parallel_per_core_limit_runs_every_copy_in_a_child_and_only_counts_in_the_trainer(
    bench_paths: list[str], tmp_path: pathlib.Path
) -> None:
    """The row's columns are honest: "worker CPU" holds every copy (each a descendant of the
    timing process), "trainer CPU" only the counting, and every clip is a copy's."""
    import os

    from h5feed.bench.measure import measure_window
    from h5feed.bench.percore import ParallelPerCore
    from h5feed.common.system.procstat import descendants

    contender = ParallelPerCore(parallel_setup(bench_paths, tmp_path, copies=2))
    contender.start()
    try:
        assert len(contender.next_frames()) == 0  # returns once every copy made a batch
        copies = [child.pid for child in contender._children]
        assert len(copies) == 2 and set(copies) <= descendants(os.getpid())
        before = list(contender._counts)
        assert min(before) > 0
        window = measure_window(contender, 1.0)
        after = list(contender._counts)
        assert all(a > b for a, b in zip(after, before, strict=True)), (before, after)
        assert 0 < window.clips <= sum(after) - sum(before)
        assert window.worker_cpu_s > 0
        # One copy in the timing process would make both columns alike (k = 2).
        assert window.trainer_cpu_ms_per_clip < window.worker_cpu_ms_per_clip / 10, window
    finally:
        contender.close()
    assert not any(child.is_alive() for child in contender._children)


def test_parallel_per_core_limit_reports_a_copy_that_exits(
    bench_paths: list[str], tmp_path: pathlib.Path
) -> None:
    import os
    import signal

    from h5feed.bench.percore import ParallelPerCore

    contender = ParallelPerCore(parallel_setup(bench_paths, tmp_path, copies=2))
    contender.start()
    try:
        contender.next_frames()
        victim = contender._children[1]
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=30)
        with pytest.raises(RuntimeError, match=r"copy 1 of the per-core limit .* code -9"):
            contender.next_frames()
    finally:
        contender.close()


def test_parallel_per_core_limit_checks_as_one_copy_and_needs_two_workers() -> None:
    from h5feed.bench.runner import plan_rows

    plan = Plan(
        paths=(),
        videos=(),
        contenders=(registry.PARALLEL_PER_CORE, *registry.by_key(["h5feed"])),
        workers=(1, 2, 4),
        window_s=1,
        warmup_s=0,
        repeats=1,
        seed=0,
        cache_dir="",
    )
    rows = plan_rows(plan, cores=4)
    assert [(r.info.key, r.workers) for r in rows] == [
        ("per-core-parallel", 2),
        ("per-core-parallel", 4),
        ("h5feed", 1),
        ("h5feed", 2),
        ("h5feed", 4),
    ]


def test_the_soak_benchmark_runs_kills_and_checks_each_epoch(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from h5feed.bench import soak
    from h5feed.cli import main

    small = dataclasses.replace(soak.DATA, files=2, videos_per_file=6, max_frames=24)
    monkeypatch.setattr(soak, "DATA", small)
    out = tmp_path / "soak.json"
    argv = ["--minutes", "0.12", "--kill-every", "2", "--sample-every", "1", "--warmup", "2"]
    assert main(["bench", "soak", *argv, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["kills"] >= 2 and result["workers_replaced"] >= result["kills"] - 1
    assert result["epochs_checked_exactly_once"] >= 1
    assert {"trainer_rss_mb", "trainer_fds", "worker_rss_mb"} <= set(result["samples"][0])


def test_the_dataset_option_reads_files_and_videos_and_refuses_other_shapes() -> None:
    import argparse

    from h5feed.bench.command import parse_dataset_shape

    assert parse_dataset_shape("120x4") == (120, 4)
    assert parse_dataset_shape("3X2") == (3, 2)
    for bad in ("120", "0x4", "ax4", "1x2x3"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"FILESxVIDEOS|>= 1"):
            parse_dataset_shape(bad)
