"""Helpers of the shared-fleet tests: replicas (``h5feed produce --listen``), trainer processes
(``tests/support/fleet_trainer.py``), their output, and waits that end in an assertion, never a
hang."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from metrics_helpers import stats
from paths import SUPPORT

from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

TRAINER = SUPPORT / "fleet_trainer.py"
#: The replicas' --attach-timeout-s in these tests (trainers say ATTACH every second).
ATTACH_TIMEOUT_S = 3.0
#: Small videos: decoding is cheap, so 2 cores run several replicas and trainers at once.
SPEC = SampleSpec(files=8, videos_per_file=3, min_frames=8, max_frames=12, height=48, width=64)


def fleet_dataset(directory: pathlib.Path) -> list[str]:
    """The sample files (names relative to ``directory``, the data root)."""
    return [path.name for path in make_sample_dataset(directory, SPEC)]


def start_replica(
    port: int,
    data_root: pathlib.Path,
    name: str,
    log: pathlib.Path,
    workers: int = 2,
    extra: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """``h5feed -v produce --listen tcp://127.0.0.1:PORT`` with its metrics on a free port."""
    with open(log, "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "h5feed", "-v", "produce", "--listen",
             f"tcp://127.0.0.1:{port}", "--data-root", str(data_root), "--workers",
             str(workers), "--name", name, "--metrics-port", "0", "--attach-timeout-s",
             str(ATTACH_TIMEOUT_S), "--stop-wait-s", "5", *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip


def start_trainer(
    out: pathlib.Path,
    port: int,
    data_root: pathlib.Path,
    files: Sequence[str],
    fleet: Sequence[int] = (),
    *,
    seed: int = 0,
    clip_len: int = 4,
    batch_size: int = 2,
    epochs: int = 1,
    step_s: float = 0.0,
    extra: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """A trainer process (``tests/support/fleet_trainer.py``) listening at ``port``, attached to the
    replicas at ``fleet`` (ports on 127.0.0.1); its stderr next to ``out``."""
    with open(f"{out}.log", "wb") as err:
        return subprocess.Popen(
            [sys.executable, str(TRAINER), "--port", str(port), "--data-root", str(data_root),
             "--files", *files, "--seed", str(seed), "--clip-len", str(clip_len),
             "--batch-size", str(batch_size), "--epochs", str(epochs), "--step-s", str(step_s),
             "--out", str(out), *(f"--fleet=tcp://127.0.0.1:{p}" for p in fleet), *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip


def lines(out: pathlib.Path) -> list[dict[str, Any]]:
    """The trainer's lines so far (a half-written last line left out)."""
    if not out.exists():
        return []
    found = []
    for line in out.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return found


def batches(out: pathlib.Path) -> list[dict[str, Any]]:
    return [line for line in lines(out) if "rows" in line]


def wait_for(
    what: str, check: Callable[[], Any], timeout_s: float, logs: Sequence[pathlib.Path] = ()
) -> Any:
    """``check()``'s first true value within ``timeout_s``, else AssertionError naming ``what``
    with the tails of ``logs``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    tails = "\n".join(f"--- {log}:\n{log.read_text()[-3000:]}" for log in logs if log.exists())
    raise AssertionError(f"{what}: not within {timeout_s:g} s\n{tails}")


def finished(out: pathlib.Path) -> dict[str, Any] | None:
    """The trainer's last line once it ended (done, or an error)."""
    found = lines(out)
    return found[-1] if found and ("done" in found[-1] or "error" in found[-1]) else None


def exactly_once(out: pathlib.Path, files: Sequence[str], videos: int) -> None:
    """The trainer's epoch held every (file, video) of ``files`` once (clips_per_video=1)."""
    seen = Counter((row[0], row[1]) for batch in batches(out) for row in batch["rows"])
    assert set(seen.values()) == {1}, {k: n for k, n in seen.items() if n != 1}
    assert {file for file, _ in seen} == set(files)
    assert len(seen) == len(files) * videos


def fleet_figures(metrics_port: int) -> dict[str, Any]:
    figures: dict[str, Any] = stats(metrics_port)["fleet"]
    return figures


def rss_kb(pid: int) -> int:
    """VmRSS of process ``pid`` in KiB."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")
