"""The core benchmark runs end to end (``--quick``) and reports every contender.

Behaviour only: exit status and the JSON's shape, never a speed threshold.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks" / "core_bench.py"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_benchmark_reports_every_contender(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--quick",
            "--max-workers",
            "2",
            "--data-dir",
            str(tmp_path / "data"),
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert "per-core limit" in result.stdout
    assert "target: >= 0.85 x twice the single-process rate" in result.stdout

    report = json.loads(out.read_text())
    contenders = report["contenders"]
    expected = {
        "per-core limit (direct cv2)",
        "per-core limit (ClipWriter)",
        "per-core x2 processes (direct)",
    }
    expected |= {f"h5feed.batches workers={n}" for n in (1, 2)}
    if report["machine"]["tensorflow"] is not None:
        expected |= {f"h5feed.dataset workers={n}" for n in (1, 2)}
    assert expected <= set(contenders)
    for name, entry in contenders.items():
        assert entry["windows"], name
        for window in entry["windows"]:
            assert window["clips"] > 0, name
            assert window["clips_per_s"] > 0, name
        assert entry["median"]["clips_per_s"] > 0, name
        if entry["kind"] in ("dataset", "batches"):
            assert entry["median"]["trainer_cpu_ms_per_clip"] > 0, name
    summary = report["summary"]
    assert summary["per_core_limit_clips_per_s"] > 0
    assert set(summary["h5feed"]) == {"dataset", "batches"} & {
        entry["kind"] for entry in contenders.values()
    }
    for key in ("cpu_model", "cores_available", "python", "numpy", "cv2"):
        assert report["machine"][key], key
