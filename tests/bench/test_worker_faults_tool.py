"""``tools/worker_faults.py`` (where a feed's CPU goes, per clip; it measured
h5feed/common/system/allocator.py) runs on a user's files and prints its figures: rate, CPU
and page faults per clip, and the CPU per clip of each side's threads."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest
from paths import REPO

_TIMEOUT_S = 120


@pytest.mark.parametrize("mode", ["batches", "dataset"])
def test_the_tool_prints_the_rate_and_the_per_clip_costs(
    small_dataset: list[pathlib.Path], mode: str
) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "tools" / "worker_faults.py"), *map(str, small_dataset),
         "--mode", mode, "--warmup-s", "1", "--window-s", "2"],
        capture_output=True, text=True, timeout=_TIMEOUT_S, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    rate = re.search(rf"^{mode}, 2 workers: ([\d.]+) clips/s", out, re.M)
    assert rate and float(rate.group(1)) > 0, out
    assert re.search(
        r"^workers: [\d.]+ ms CPU per clip \([\d.]+ system\), [\d.]+ page faults", out, re.M
    ), out
    assert re.search(r"^trainer: [\d.]+ ms CPU per clip, [\d.]+ page faults per clip", out, re.M), (
        out
    )
    # The workers' main threads decode: they used CPU in the window, whatever else did.
    threads = re.search(r"^workers' threads, ms CPU per clip: (.*)$", out, re.M)
    assert threads and re.search(r"\bmain ([\d.]+)", threads.group(1)), out
    assert float(re.search(r"\bmain ([\d.]+)", threads.group(1)).group(1)) > 0, out
    assert re.search(r"^trainer's threads, ms CPU per clip: ", out, re.M), out
