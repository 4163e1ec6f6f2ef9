"""`h5feed top`: one snapshot of a live feed and a live producer service, as a user sees it."""

from __future__ import annotations

import pathlib
import socket
import subprocess
import sys
import time

from metrics_helpers import metrics_port_of, start_producer, stats, stop
from ports import free_port

import h5feed
from h5feed.top import producers_line, stats_url

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}
_TOP_TIMEOUT_S = 60


def top_once(*urls: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "h5feed", "top", "--once", "--timeout", "5", *urls],
        capture_output=True, text=True, timeout=_TOP_TIMEOUT_S,
    )  # fmt: skip


def rows(output: str, first_cell: str) -> list[str]:
    """Table rows (rich draws cells between │) whose first cell is ``first_cell``."""
    return [
        line for line in output.splitlines()
        if line.startswith("│") and line.split("│")[1].strip() == first_cell
    ]  # fmt: skip


def test_top_once_shows_each_worker_host_and_the_verdict(
    small_dataset: list[pathlib.Path],
) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=4, workers=2, epochs=None,
                          metrics_port=0)  # fmt: skip
    with feed.stream() as stream:
        for _ in range(5):
            next(stream)
        result = top_once(f"127.0.0.1:{feed.metrics_port}")
        workers = stream.stats()["workers"]
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert len(workers) == 2
    for worker in workers:
        (row,) = rows(out, worker["name"])
        assert worker["host"] in row
    host = socket.gethostname()
    host_rows = [r for r in rows(out, host) if r.split("│")[2].strip() == "2"]
    assert len(host_rows) == 1, out  # the hosts table: this host, 2 workers
    verdicts = [
        line for line in out.splitlines() if line.startswith(("input-bound: ", "not input-bound: "))
    ]
    assert len(verdicts) == 1, out
    assert "consumer job" in out and "batches 5" in out
    # Local workers only: no remote producers to size (tests/unit/consumer/test_fleet_sizing.py has
    # one).
    assert "replicas needed: unknown (no remote producer has said its busy time)" in out


def test_top_once_shows_a_producer_services_workers(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    log = tmp_path / "producer.log"
    producer = start_producer(free_port(), small_dataset[0].parent, "pt", log)
    try:
        port = metrics_port_of(log)
        deadline = time.monotonic() + 30  # the endpoint is up before its workers run
        while (now := stats(port))["running_workers"] < 2:
            assert time.monotonic() < deadline, f"2 workers not running in 30 s: {now}"
            time.sleep(0.05)
        result = top_once(f"http://127.0.0.1:{port}/stats")
    finally:
        stop(producer)
    assert result.returncode == 0, result.stderr
    assert "producer pt on" in result.stdout and "2/2 workers running" in result.stdout
    for name in ("pt-0", "pt-1"):
        (row,) = rows(result.stdout, name)
        assert "yes" in row


def test_top_once_names_an_endpoint_that_does_not_answer() -> None:
    port = free_port()  # nothing listens there
    began = time.monotonic()
    result = top_once(f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert f"http://127.0.0.1:{port}/stats  unreachable:" in result.stdout
    assert time.monotonic() - began < _TOP_TIMEOUT_S


def test_stats_url_accepts_what_users_type() -> None:
    assert stats_url("trainer:9100") == "http://trainer:9100/stats"
    assert stats_url("http://trainer:9100/") == "http://trainer:9100/stats"
    assert stats_url("http://trainer:9100/stats") == "http://trainer:9100/stats"


def test_a_trainer_on_a_shared_fleet_says_so_and_its_share() -> None:
    shared = {
        "endpoints": ["tcp://tasks.h5feed_producer:5556"],
        "replicas": 3,
        "serving": 2,
        "workers": 8,
        "trainers_max": 4,
        "share": 0.3,
        "refused": {"tcp://10.0.0.9:5556": "refused: at most 4 trainers"},
        "bad_replies": 0,
    }
    line = producers_line({"replicas_needed": None, "shared": shared})
    assert line.startswith("replicas needed: unknown")
    assert (
        "shared fleet: 2 of 3 replicas serve this trainer (8 workers), up to 4 trainers a "
        "replica, share 30%; refused by 1"
    ) in line
    assert "shared" not in producers_line({"replicas_needed": None, "shared": None})
