"""The remote producers' sizing gauge (h5feed/consumer/telemetry/sizing.py): the arithmetic on
given figures, and the gauge scraped from a trainer fed by a real producer service, moving with
demand."""

from __future__ import annotations

import http.server
import os
import pathlib
import subprocess
import threading
import time
from typing import Any, ClassVar

import pytest
from docker_helpers import ROOT
from metrics_helpers import by_worker, scrape, start_producer, stop, value
from paths import SUPPORT
from ports import free_port

import h5feed
from h5feed.consumer.core.counters import MeterFigures, Rates
from h5feed.consumer.telemetry.sizing import (
    MOST_WAIT_SHARE,
    WorkerRates,
    fleet_demand,
    replica_capacities,
)


def worker(
    host: str,
    *,
    local: bool = False,
    clips: int = 0,
    busy_s: float = 0.0,
    clips_recent: int = 0,
    busy_s_recent: float = 0.0,
    clips_per_s: float | None = None,
    elapsed_s: float = 600.0,
) -> WorkerRates:
    """A worker as the estimate reads it (its meter's reading, as ``stats()["workers"]``
    shows it): measured by the trainer over the last 10 s (``clips_per_s``: ``clips_recent``
    over them, unless given) and ``elapsed_s`` since it joined, one part of one clip each."""
    recent = clips_recent / 10.0 if clips_per_s is None else clips_per_s
    received = MeterFigures(
        count=clips,
        clips=clips,
        bytes=0,
        busy_s=busy_s,
        per_s_total=Rates(events=clips / elapsed_s, clips=clips / elapsed_s, bytes=0.0),
        per_s_recent=Rates(events=recent, clips=recent, bytes=0.0),
        clips_recent=clips_recent,
        busy_s_recent=busy_s_recent,
        last_seen_s_ago=None,
    )
    return WorkerRates(host, local, received)


def test_a_replicas_capacity_is_clips_per_busy_second_times_its_workers() -> None:
    workers = [
        worker("a", clips_recent=100, busy_s_recent=2.0),  # 50 clips per busy-second
        worker("a", clips_recent=60, busy_s_recent=1.2),
        worker("b", clips_recent=30, busy_s_recent=3.0),  # 10 clips per busy-second, 1 worker
        worker("trainer", local=True, clips_recent=500, busy_s_recent=1.0),  # not a replica
    ]
    assert replica_capacities(workers) == {"a": pytest.approx(100.0), "b": pytest.approx(10.0)}


def test_a_quiet_window_falls_back_to_the_totals_and_silence_on_busy_time_leaves_a_host_out() -> (
    None
):
    workers = [
        worker("a", clips=400, busy_s=4.0),  # nothing recent: the iteration's totals
        worker("v5", clips=400),  # a version-5 worker says no busy time
    ]
    assert replica_capacities(workers) == {"a": pytest.approx(100.0)}


def test_a_producer_claiming_more_busy_time_than_there_was_cannot_inflate_the_gauge() -> None:
    """Two boastful peers say a million busy seconds for the 100 clips the trainer took from
    each in the last 10 s (once: a gauge of 6.45e6, and an autoscaler went 2 -> 16): each
    claim counts at most the 10 s the trainer measured, so a replica is worth at least what
    it delivered, and the gauge is the demand over that: 40 / 10 = 4 (issue 38 item 7)."""
    boastful = [
        worker("a", clips_recent=100, busy_s_recent=1e6, clips=5000, busy_s=1e9),
        worker("b", clips_recent=100, busy_s_recent=1e6, clips=5000, busy_s=1e9),
    ]
    figures = fleet_demand(20.0, 0.5, boastful)
    assert figures["replica_capacity_clips_per_s"] == pytest.approx(10.0)
    assert figures["replicas_needed"] == 4
    # With nothing recent, the totals: capped by the 600 s since each joined.
    quiet = [worker("a", clips=6000, busy_s=1e9), worker("b", clips=6000, busy_s=1e9)]
    assert replica_capacities(quiet) == {"a": pytest.approx(10.0), "b": pytest.approx(10.0)}


@pytest.mark.parametrize(
    ("taken", "wait", "capacity", "needed"),
    [
        (100.0, 0.0, 100.0, 1),  # exactly one replica's worth does not round up
        (100.0, 0.5, 100.0, 2),  # waiting half the time: twice the intake wanted
        (100.0, 0.75, 60.0, 7),  # 400 / 60 = 6.7
        (10.0, 0.0, 100.0, 1),  # never below 1
        (100.0, 1.0, 100.0, round(1 / (1 - MOST_WAIT_SHARE))),  # always waiting: capped at 20x
    ],
)
def test_replicas_needed_is_demand_over_a_replicas_capacity(
    taken: float, wait: float, capacity: float, needed: int
) -> None:
    workers = [worker("a", clips_recent=int(capacity * 10), busy_s_recent=10.0)]
    figures = fleet_demand(taken, wait, workers)
    assert figures["replicas_needed"] == needed
    assert figures["demand_clips_per_s"] == pytest.approx(taken / (1 - min(wait, MOST_WAIT_SHARE)))
    assert figures["replica_capacity_clips_per_s"] == pytest.approx(capacity)
    assert figures["replicas"] == 1


def test_capacity_is_the_mean_over_replicas_and_local_workers_supply_their_part() -> None:
    workers = [
        worker("a", clips_recent=1000, busy_s_recent=10.0),  # 100 clips/s
        worker("b", clips_recent=3000, busy_s_recent=10.0),  # 300 clips/s
        worker("me", local=True, clips_per_s=150.0),
    ]
    # 600 wanted (300 taken, half the time waiting), 150 of it from local workers: 450 / 200.
    figures = fleet_demand(300.0, 0.5, workers)
    assert figures["demand_clips_per_s"] == pytest.approx(450.0)
    assert figures["replica_capacity_clips_per_s"] == pytest.approx(200.0)
    assert figures["replicas_needed"] == 3


def test_unknown_before_the_first_batch_and_without_busy_time() -> None:
    busy = [worker("a", clips_recent=100, busy_s_recent=1.0)]
    assert fleet_demand(0.0, 0.0, busy)["replicas_needed"] is None  # nothing taken yet
    silent = fleet_demand(100.0, 0.5, [worker("v5", clips=100, clips_recent=100)])
    assert silent["replicas_needed"] is None and silent["replica_capacity_clips_per_s"] is None
    assert fleet_demand(100.0, 0.5, [])["replicas"] == 0  # local workers only: none to size


def test_top_says_the_replicas_needed_and_the_figures_behind_them() -> None:
    from h5feed.top import producers_line

    figures = fleet_demand(300.0, 0.5, [worker("a", clips_recent=1000, busy_s_recent=10.0)])
    assert producers_line(figures) == (
        "replicas needed: 6 (demand 600.0 clips/s; a replica makes 100.0 with every worker "
        "busy; 1 measured)"
    )


# -- on real processes ------------------------------------------------------------------------

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}
TESTS = SUPPORT  # sample_transforms, for the producer


def take(stream: Any, batches: int, pause_s: float) -> dict[str, Any]:
    """Take ``batches`` batches, pausing ``pause_s`` after each (a trainer's step), and return
    the feed's stats at once (the recent window is this phase's)."""
    for _ in range(batches):
        next(stream)
        time.sleep(pause_s)
    figures: dict[str, Any] = stream.stats()
    return figures


def test_the_gauge_is_scraped_from_the_trainer_and_moves_with_demand(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    """One producer replica of one worker whose transform costs 20 ms a clip (sleeping: the
    cost holds on a loaded machine), so the producer is the limit. A trainer that steps slowly
    (0.5 s a batch of 4) waits for nothing and needs one replica; one that takes batches as
    fast as they come waits most of the time and needs more. Each phase is its own iteration
    (its own 10 s window)."""
    connect = free_port()
    log = tmp_path / "producer.log"
    producer = start_producer(
        connect, small_dataset[0].parent, "fs", log, workers=1,
        extra=["--allow-code", "sample_transforms:*"], pythonpath=TESTS,
    )  # fmt: skip
    metrics_port = free_port()
    try:
        feed = h5feed.batches(
            [p.name for p in small_dataset], data_root=str(small_dataset[0].parent), workers=0,
            listen=f"tcp://127.0.0.1:{connect}", **CLIP, batch_size=4, epochs=None,
            start_timeout_s=30, metrics_port=metrics_port,
            transform="sample_transforms:slow", transform_args={"seconds": 0.02},
        )  # fmt: skip
        with feed.stream() as stream:
            slow = take(stream, 6, pause_s=0.5)
            slow_scraped = scrape(metrics_port)
        with feed.stream() as stream:
            fast = take(stream, 40, pause_s=0.0)
            fast_scraped = scrape(metrics_port)
    finally:
        stop(producer)
    report = f"slow: {slow['producers']}, wait {slow['wait_share_recent']:.2f}; " + (
        f"fast: {fast['producers']}, wait {fast['wait_share_recent']:.2f}"
    )
    print(report)
    assert slow["producers"]["replicas"] == fast["producers"]["replicas"] == 1, report
    assert slow["producers"]["replicas_needed"] == 1, report
    assert fast["producers"]["replicas_needed"] >= 2, report
    # The scrape says what stats() said (read moments apart: the same whole replicas).
    assert value(slow_scraped, "h5feed_producers_replicas_needed") == 1, report
    assert value(fast_scraped, "h5feed_producers_replicas_needed") >= 2, report
    capacity = value(fast_scraped, "h5feed_producers_replica_capacity_clips_per_second")
    assert 0 < capacity < 1 / 0.02, report  # at most what 20 ms a clip allows
    busy = by_worker(fast_scraped, "h5feed_worker_busy_seconds_total")
    assert list(busy) == ["fs-0"] and busy["fs-0"] >= 40 * 4 * 0.02, busy
    assert producer.returncode == 0, log.read_text()


# -- the Swarm loop (deploy/swarm-autoscale.sh) -------------------------------------------------

FAKE_DOCKER = """#!/usr/bin/env bash
# Stands in for the docker CLI: the service's replicas in a file, each scale call recorded.
case "$1 $2" in
  "service inspect")  # fails once where the .fail file is: a manager not answering
    if [ -e "$FAKE_DOCKER_STATE.fail" ]; then rm "$FAKE_DOCKER_STATE.fail"; exit 1; fi
    cat "$FAKE_DOCKER_STATE" ;;
  "service scale") echo "${4#*=}" >"$FAKE_DOCKER_STATE"; echo "$4" >>"$FAKE_DOCKER_STATE.calls" ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
"""


class GaugeSequence(http.server.BaseHTTPRequestHandler):
    """Serves ``/metrics`` with the next of ``readings`` (None: the gauge absent)."""

    readings: ClassVar[list[int | None]] = []

    def do_GET(self) -> None:
        reading = self.readings.pop(0) if self.readings else None
        body = "# HELP h5feed_running 1 while an iteration runs\nh5feed_running 1.0\n"
        if reading is not None:
            body += f"h5feed_producers_replicas_needed {float(reading)}\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


def test_the_swarm_loop_scales_up_at_once_down_after_steady_readings_and_within_bounds(
    tmp_path: pathlib.Path,
) -> None:
    """The loop's decisions on a sequence of gauge readings, against a stand-in for the docker
    CLI (the real ``docker service scale`` is Swarm's; the stack itself is tested in
    tests/deploy/test_swarm.py): up at once, down one step after 3 lower readings in a row, clamped
    to [MIN, MAX], nothing while the gauge is absent or the manager does not answer."""
    readings: list[int | None] = [None, 3, 3, 3, 1, 1, 2, 1, 1, 1, 9, None]
    handler = type("Readings", (GaugeSequence,), {"readings": list(readings)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    state = tmp_path / "replicas"
    state.write_text("2\n")
    (tmp_path / "replicas.fail").touch()  # the first read of the replicas fails
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_DOCKER_STATE": str(state),
        "METRICS_URL": f"http://127.0.0.1:{server.server_address[1]}/metrics",
        "SERVICE": "h5feed_producer", "MIN": "1", "MAX": "4", "EVERY_S": "0.05",
        "DOWN_AFTER": "3", "ROUNDS": str(len(readings)),
    }  # fmt: skip
    try:
        done = subprocess.run(
            ["bash", str(ROOT / "deploy" / "swarm-autoscale.sh")],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "replicas.calls").read_text().split()
    assert calls == [f"h5feed_producer={n}" for n in (3, 2, 1, 4)], done.stdout
    assert state.read_text().strip() == "4"
    assert "cannot read the replicas of h5feed_producer" in done.stderr
