"""``h5feed bench`` runs end to end (``--quick``) and reports every contender.

Behaviour only: exit status and the JSON's shape, never a speed threshold. Each run uses
windows of 0.3 s after a 0.1 s warm-up (``--quick`` alone: 1 s and 0.5 s; the socket test's
since it began): a window still takes at least one batch (h5feed/bench/measure.py), so every
contender still starts, delivers, is timed and reported; only figures that mean nothing in a
smoke run get noisier.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from paths import REPO

pytestmark = pytest.mark.bench  # h5feed bench end to end (tests/support/tiers.py)


# --------------------------------------------------------------------------------------------
# h5feed bench (the benchmark against the alternatives)

CONTENDERS_IN_TEST_VENV = {  # key -> packages: the tf extra is always there in CI
    "h5feed": ("tensorflow",),
    "h5feed-numpy": (),
    "tf-interleave": ("tensorflow",),
    "tf-interleave-parallel": ("tensorflow",),
    "tf-map-py-function": ("tensorflow",),
    "tf-decode-jpeg": ("tensorflow",),
    "keras": ("tensorflow", "keras"),
    "torch": ("torch",),
    "grain": ("grain",),
}


def run_h5feed_bench(tmp_path: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "h5feed",
            "bench",
            "--quick",
            "--window-s",
            "0.3",
            "--warmup-s",
            "0.1",
            "--data-dir",
            str(tmp_path / "data"),
            "--out",
            str(tmp_path / "out" / "smoke"),
            *args,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=540,
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_h5feed_bench_quick_reports_every_contender(tmp_path: pathlib.Path) -> None:
    import importlib.util

    result = run_h5feed_bench(tmp_path, "--workers", "1", "--no-ceiling")
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    report = json.loads((tmp_path / "out" / "smoke.json").read_text())
    markdown = (tmp_path / "out" / "smoke.md").read_text()
    assert "| per-core limit (one process, no IPC) |" in markdown
    assert "tf.data service" in markdown and "not run" in markdown

    limit = report["per_core_limit"]
    assert limit["status"] == "ok" and limit["median"]["clips_per_s"] > 0
    videos = 2 * 4  # the quick dataset
    assert limit["check"]["clips"] == videos
    by_contender = {entry["contender"]: entry for entry in report["contenders"]}
    assert set(by_contender) == set(CONTENDERS_IN_TEST_VENV)
    for key, entry in by_contender.items():
        installed = all(importlib.util.find_spec(p) for p in CONTENDERS_IN_TEST_VENV[key])
        if not installed:
            assert entry["status"] == "not installed", key
            assert "pip install 'h5feed[bench]'" in entry["reason"], key
            continue
        # Every installed contender runs here: a failure is a bug of its module.
        assert entry["status"] == "ok", f"{key}: {entry['reason']}"
        assert entry["check"]["clips"] == videos, key
        assert entry["check"]["kinds"] == [[[16, 112, 112, 3], "uint8"]], key
        assert len(entry["windows"]) == 1 and len(entry["limit_windows"]) == 1, key
        median = entry["median"]
        assert median["clips_per_s"] > 0 and median["trainer_cpu_ms_per_clip"] > 0, key
        assert entry["peak_pss_mb_tree"] > 0 and median["trainer_maxrss_mb"] > 0, key
        assert entry["ratio_to_k_times_limit"] > 0, key
        if entry["parallelism"] == "workers":  # the work happens in other processes
            assert median["worker_cpu_ms_per_clip"] > 0, key
    png = tmp_path / "out" / "smoke.png"
    if importlib.util.find_spec("matplotlib") is None:
        assert not png.exists()
        assert "matplotlib is not installed" in result.stderr
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "![throughput vs workers](smoke.png)" in markdown


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_h5feed_bench_reports_the_parallel_limit_for_scale(tmp_path: pathlib.Path) -> None:
    result = run_h5feed_bench(
        tmp_path, "--workers", "2", "--contenders", "per-core-parallel,h5feed-numpy", "--no-ceiling"
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    report = json.loads((tmp_path / "out" / "smoke.json").read_text())
    (entry,) = [e for e in report["contenders"] if e["contender"] == "per-core-parallel"]
    assert entry["status"] == "ok" and entry["workers"] == 2, entry["reason"]
    assert entry["check"]["clips"] == 2 * 4
    median = entry["median"]
    # Every copy is a child process: the worker column holds them all, and the timing
    # process only counts (one copy in it made both columns alike).
    assert median["worker_cpu_ms_per_clip"] > 0
    assert median["trainer_cpu_ms_per_clip"] < median["worker_cpu_ms_per_clip"] / 10, median
    summary = report["summary"]
    assert summary["parallel_limit_vs_twice_limit"] > 0
    assert summary["judged"] == "h5feed-numpy" and "best_alternative" not in summary
    markdown = (tmp_path / "out" / "smoke.md").read_text()
    assert "independent copies of the per-core limit at once" in markdown


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_h5feed_bench_ceiling_reports_gb_per_s_and_memcpy(tmp_path: pathlib.Path) -> None:
    result = run_h5feed_bench(tmp_path, "--ceiling", "--producers", "1")
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "## Consumer ceiling" in result.stdout
    assert "| memcpy (np.copyto, one batch) |" in result.stdout
    ceiling = json.loads((tmp_path / "out" / "smoke.json").read_text())["ceiling"]
    assert "error" not in ceiling, ceiling
    for api in ("dataset", "batches", "memcpy"):
        assert ceiling[api]["gb_per_s"] > 0, api
    for api in ("dataset", "batches"):
        assert ceiling[api]["batches_per_s"] > 0, api
        assert ceiling[api]["trainer_cpu_ms_per_clip"] > 0, api
    assert ceiling["producers"] == 1
