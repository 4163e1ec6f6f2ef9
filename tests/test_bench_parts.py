"""Parts of ``h5feed bench`` on their own: the failure paths of the runner, fast.

The end-to-end runs are in test_bench_smoke.py.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np
import pytest

from h5feed.bench import contender as registry
from h5feed.bench.runner import ContenderFailed, Plan, Row, run_row, validate_check
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
    monkeypatch.setenv("PYTHONPATH", str(pathlib.Path(__file__).parent))  # for run_one
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


def test_unknown_contender_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown contenders"):
        registry.by_key(["h5feed", "nope"])


def test_stopped_freezes_a_process_tree_and_always_continues_it() -> None:
    import os
    import subprocess
    import sys
    import time

    from h5feed.bench.procstat import descendants, proc_stat
    from h5feed.bench.runner import stopped

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


def test_parallel_per_core_limit_counts_the_clips_of_its_copies_and_stops_them(
    bench_paths: list[str], tmp_path: pathlib.Path
) -> None:
    import time

    from h5feed.bench.contender import Setup
    from h5feed.bench.measure import measure_window
    from h5feed.bench.percore import ParallelPerCore

    setup = Setup(
        paths=tuple(bench_paths),
        videos=tuple(index_videos(bench_paths)),
        workers=2,
        epochs=None,
        seed=0,
        cache_dir=str(tmp_path),
    )
    contender = ParallelPerCore(setup)
    contender.start()
    try:
        deadline = time.monotonic() + 60
        while contender.clips_elsewhere() == 0:  # the copy is a spawned interpreter
            assert time.monotonic() < deadline, "the second copy made no clip in 60 s"
            time.sleep(0.05)
        made: list[int] = []
        own = contender.next_frames

        def counted() -> np.ndarray:
            frames = own()
            made.append(len(frames))
            return frames

        contender.next_frames = counted  # type: ignore[method-assign]
        before = contender.clips_elsewhere()
        window = measure_window(contender, 1.0)
        after = contender.clips_elsewhere()
        # The window holds this process's clips and the copy's made meanwhile, and their CPU.
        assert 0 < window.clips - sum(made) <= after - before
        assert window.worker_cpu_s > 0
    finally:
        contender.close()
    assert contender._children and not any(c.is_alive() for c in contender._children)


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
