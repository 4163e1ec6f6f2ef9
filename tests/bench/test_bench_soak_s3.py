"""``h5feed bench soak --storage s3``: the soak over moto's S3 server on loopback, through the
fault proxy, and its hang guard (h5feed/bench/soak.py).

Behaviour only, never a speed: a short soak kills workers, each kill is answered by a
replacement, every epoch arrives exactly once, and the reads went through the server (the
proxy's counts and the workers' own); a wait past the guard's limit is an AssertionError that
names how long it waited.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import time

import pytest


@pytest.mark.processes
@pytest.mark.timeout(600)  # the soak's ~25 s, the server and the workers' starts, on 2 busy cores
def test_the_soak_over_s3_answers_every_kill_and_reads_every_epoch_once_from_the_server(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from h5feed.bench import soak
    from h5feed.cli import main
    from h5feed.common import storage_config

    small = dataclasses.replace(soak.DATA, files=2, videos_per_file=6, max_frames=24)
    monkeypatch.setattr(soak, "DATA", small)
    monkeypatch.delenv(storage_config.STORAGE_ENV, raising=False)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "soak-s3.json"
    argv = ["--storage", "s3", "--minutes", "0.4", "--kill-every", "6", "--sample-every", "2"]
    argv += ["--warmup", "2", "--fault-every", "20", "--block-kib", "64", "--json", str(out)]
    assert main(["bench", "soak", *argv]) == 0
    result = json.loads(out.read_text())
    assert result["storage"] == "s3" and result["s3"]["url"].startswith("s3://")
    assert result["kills"] >= 2 and result["workers_replaced"] >= result["kills"] - 1
    assert result["epochs_checked_exactly_once"] >= 1
    # Through the server: the proxy saw the requests (and answered some 503, which the reads
    # survived), and the workers counted object-storage requests of their own (a local
    # file costs none).
    assert result["s3"]["requests"] > 0 and result["s3"]["answered_503"] > 0
    assert sum(result["worker_object_requests"]) > 0
    assert any(sum(s["worker_object_requests"]) > 0 for s in result["samples"])
    assert storage_config.STORAGE_ENV not in os.environ  # the bench's own, gone once it ran


def test_the_hang_guard_ends_a_wait_naming_how_long_and_gives_the_alarm_back() -> None:
    from h5feed.bench.soak import hang_guard

    before = signal.getsignal(signal.SIGALRM)
    outer = signal.getitimer(signal.ITIMER_REAL)[0]  # pytest-timeout's alarm, if it set one
    began = time.monotonic()
    with (
        pytest.raises(AssertionError, match=r"no batch for 0\.\d s \(the soak's hang guard"),
        hang_guard(0.5) as batch_arrived,
    ):
        batch_arrived()
        time.sleep(30)  # ended by the guard, not slept through
    assert time.monotonic() - began < 10
    assert signal.getsignal(signal.SIGALRM) is before
    assert (signal.getitimer(signal.ITIMER_REAL)[0] > 0) == (outer > 0)  # set again
