"""Tests of the ``h5feed`` command line: real subprocesses (``python -m h5feed``), real files."""

from __future__ import annotations

import io
import os
import pathlib
import re
import subprocess
import sys
from typing import Any

import cv2
import h5py
import numpy as np
import pytest

import h5feed
from h5feed.demo import Progress
from h5feed.demo_command import SAMPLE_DEFAULTS
from h5feed.producer.sample_data import LAYOUT, LAYOUT_ATTR, SampleSpec

# Small enough that a demo run is a few seconds (most of it importing TensorFlow).
TINY_DEMO = [
    "--files", "2", "--videos-per-file", "4", "--min-frames", "16", "--max-frames", "24",
    "--steps", "8", "--warmup", "3", "--batch-size", "4",
]  # fmt: skip


def _env(tmp_path: pathlib.Path) -> dict[str, str]:
    env = dict(os.environ)
    env["H5FEED_CACHE_DIR"] = str(tmp_path / "index_cache")  # not the user's cache
    return env


def _h5feed(
    *args: str, tmp_path: pathlib.Path, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "h5feed", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env=_env(tmp_path),
    )


def _workers_of(parent_pid: int) -> list[int]:
    """Live worker processes started by ``parent_pid`` (their command line names it)."""
    needle = f"--parent-pid\0{parent_pid}\0".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = pathlib.Path(f"/proc/{entry}/cmdline").read_bytes()
            state = pathlib.Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if b"h5feed.producer.worker" in cmdline and needle in cmdline and state != b"Z":
            found.append(int(entry))
    return found


# --------------------------------------------------------------------------------------------
# Help, version, usage errors, import weight


def test_main_help(tmp_path: pathlib.Path) -> None:
    result = _h5feed("--help", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    for text in ("demo", "make-sample", "--version", "--verbose", "examples:"):
        assert text in result.stdout


@pytest.mark.parametrize(
    ("command", "options"),
    [
        (
            "demo",
            [
                "--data", "--steps", "--workers", "--batch-size", "--clip-len", "--seed",
                "--warmup", "--files", "--videos-per-file", "--verbose", "clips/s",
                "input wait", "examples:", "Guarantees:",
            ],
        ),
        (
            "make-sample",
            [
                "DIR", "--files", "--videos-per-file", "--min-frames", "--max-frames", "--seed",
                "--height", "--width", "examples:", "Guarantees:",
            ],
        ),
    ],
)  # fmt: skip
def test_command_help(tmp_path: pathlib.Path, command: str, options: list[str]) -> None:
    result = _h5feed(command, "--help", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    for option in options:
        assert option in result.stdout, option


def test_no_help_line_runs_past_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prose written as one long line is wrapped; laid-out examples keep their breaks."""
    import argparse

    from h5feed.cli import build_parser

    monkeypatch.setenv("COLUMNS", "100")
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {"h5feed": parser.format_help()}
    helps |= {name: sub.format_help() for name, sub in commands.choices.items()}
    too_long = [(name, line) for name, text in helps.items() for line in text.splitlines()
                if len(line) > 100]  # fmt: skip
    assert too_long == []
    assert "Guarantees: NAME.key_secret is created mode 0600" in helps["keys"]


def test_version(tmp_path: pathlib.Path) -> None:
    script = pathlib.Path(sys.executable).with_name("h5feed")  # the console script, if installed
    command = [str(script)] if script.exists() else [sys.executable, "-m", "h5feed"]
    result = subprocess.run(
        [*command, "--version"], capture_output=True, text=True, timeout=30, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"h5feed {h5feed.__version__}"


@pytest.mark.parametrize(
    "args",
    [[], ["demo", "--steps", "0"], ["make-sample"], ["make-sample", "x", "--files", "two"]],
)
def test_usage_errors_exit_2(tmp_path: pathlib.Path, args: list[str]) -> None:
    result = _h5feed(*args, tmp_path=tmp_path)
    assert result.returncode == 2
    assert "usage: h5feed" in result.stderr


def test_bad_spec_is_reported_with_exit_1(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "bad"
    result = _h5feed(
        "make-sample", str(out), "--min-frames", "9", "--max-frames", "3", tmp_path=tmp_path
    )
    assert result.returncode == 1
    assert "error:" in result.stderr and "max_frames" in result.stderr
    assert "Traceback" not in result.stderr


def test_import_cli_is_light(tmp_path: pathlib.Path) -> None:
    code = (
        "import sys, h5feed.cli, h5feed.__main__\n"
        "heavy = ('tensorflow', 'keras', 'cv2', 'h5py', 'numpy', 'zmq')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_sample_defaults_are_sample_spec_defaults() -> None:
    spec = SampleSpec()
    assert {name: getattr(spec, name) for name in SAMPLE_DEFAULTS} == SAMPLE_DEFAULTS


def test_progress_off_a_terminal_writes_only_the_final_line() -> None:
    stream = io.StringIO()
    bar = Progress("work", 4, stream)
    for done in range(1, 5):
        bar.update(done, f"step {done}")
    bar.close()
    bar.close()
    assert stream.getvalue() == "work [####################] 4/4  step 4\n"


# --------------------------------------------------------------------------------------------
# make-sample


def test_make_sample_writes_valid_files(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "data"
    args = [
        "make-sample", str(out), "--files", "2", "--videos-per-file", "3",
        "--min-frames", "2", "--max-frames", "4", "--height", "32", "--width", "48",
        "--seed", "5",
    ]  # fmt: skip
    result = _h5feed(*args, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "2 written" in result.stdout and "6 videos" in result.stdout
    files = sorted(out.iterdir())
    assert [p.name for p in files] == ["sample_000.h5", "sample_001.h5"]
    for path in files:
        with h5py.File(path, "r") as f:
            assert f.attrs[LAYOUT_ATTR] == LAYOUT
            assert list(f.keys()) == ["video_000", "video_001", "video_002"]
            for group in f.values():
                frames = group["frames"][()]
                assert 2 <= len(frames) <= 4
                assert 0 <= int(group.attrs["label"]) < SampleSpec().num_classes
                image = cv2.imdecode(np.asarray(frames[0], dtype=np.uint8), cv2.IMREAD_COLOR)
                assert image is not None and image.shape == (32, 48, 3)
    before = [p.read_bytes() for p in files]

    again = _h5feed(*args, tmp_path=tmp_path)  # idempotent: the files are kept as they are
    assert again.returncode == 0, again.stderr
    assert "0 written, 2 already there" in again.stdout
    assert [p.read_bytes() for p in files] == before


# --------------------------------------------------------------------------------------------
# demo


def test_demo_runs_reports_and_leaves_no_worker(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "demo_data"
    process = subprocess.Popen(
        [sys.executable, "-m", "h5feed", "demo", "--data", str(data), *TINY_DEMO],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=_env(tmp_path),
    )
    try:
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert not _workers_of(process.pid), "worker processes outlived the demo"
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    rate = re.search(r"throughput: ([0-9.]+) clips/s over steps 4-8", stdout)
    share = re.search(r"step wait: ([0-9.]+)%", stdout)
    assert rate and float(rate.group(1)) > 0, stdout
    assert share and 0.0 <= float(share.group(1)) <= 100.0, stdout
    assert re.search(r"validation accuracy: [0-9.]+ on 8 clips", stdout), stdout
    assert "workers left running: 0" in stdout
    assert sorted(p.name for p in data.iterdir()) == ["sample_000.h5", "sample_001.h5"]


def test_run_demo_returns_consistent_numbers(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from h5feed.demo import run_demo

    monkeypatch.setenv("H5FEED_CACHE_DIR", str(tmp_path / "index_cache"))
    spec = SampleSpec(files=1, videos_per_file=4, min_frames=16, max_frames=20)
    out, progress = io.StringIO(), io.StringIO()
    result: dict[str, Any] = run_demo(
        tmp_path / "data", steps=6, workers=1, batch_size=2, clip_len=8, seed=1,
        spec=spec, warmup=2, out=out, progress_stream=progress,
    )  # fmt: skip
    assert result["warmup_steps"] == 2 and result["measured_steps"] == 4
    assert result["measured_clips"] == 4 * 2  # 4 videos, batches of 2: every batch is full
    assert result["val_clips"] == 4
    assert 0.0 <= result["val_accuracy"] <= 1.0
    assert result["wait_s"] >= 0 and result["compute_s"] > 0
    wait, compute = result["wait_s"], result["compute_s"]
    assert result["input_wait_share"] == pytest.approx(wait / (wait + compute))
    assert result["clips_per_s"] == pytest.approx(result["measured_clips"] / result["measured_s"])
    assert result["measured_s"] >= wait + compute - 1e-6
    assert result["workers_left"] == 0
    assert not _workers_of(os.getpid())
    assert "clips/s" in out.getvalue() and "train [" in progress.getvalue()


def test_worker_scan_sees_live_workers(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The /proc scans the tests above rely on do find running workers."""
    from h5feed.demo import worker_children
    from h5feed.producer.sample_data import make_sample_dataset

    monkeypatch.setenv("H5FEED_CACHE_DIR", str(tmp_path / "index_cache"))
    spec = SampleSpec(files=1, videos_per_file=2, min_frames=2, max_frames=3, height=32, width=48)
    files = make_sample_dataset(tmp_path / "data", spec)
    stream = h5feed.batches(files, clip_len=2, batch_size=1, workers=2).stream()
    try:
        next(stream)
        assert sorted(_workers_of(os.getpid())) == sorted(stream.worker_pids)
        assert sorted(worker_children()) == sorted(stream.worker_pids)
    finally:
        stream.close()
    assert not _workers_of(os.getpid()) and not worker_children()
