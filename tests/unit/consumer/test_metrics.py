"""Prometheus metrics and /stats of feeds and producer services, scraped from real runs."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error

import pytest
from conftest import worker_pids
from metrics_helpers import (
    by_worker,
    get,
    metrics_port_of,
    scrape,
    start_producer,
    stats,
    stop,
    value,
)
from ports import free_port

import h5feed

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}


def test_a_feeds_metrics_parse_and_grow_during_a_run(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=4, workers=2, epochs=None,
                          metrics_port=0)  # fmt: skip
    port = feed.metrics_port
    assert port and feed.stats()["metrics_port"] == port
    with feed.stream() as stream:
        for _ in range(3):
            next(stream)
        first = scrape(port)
        for _ in range(5):
            next(stream)
        second = scrape(port)
        names = {w["name"]: w["host"] for w in stream.stats()["workers"]}
    assert value(first, "h5feed_batches_total") == 3 and value(second, "h5feed_batches_total") == 8
    assert value(second, "h5feed_clips_total") == 32
    assert value(second, "h5feed_bytes_total") == 32 * 4 * 40 * 40 * 3
    assert value(second, "h5feed_input_wait_seconds_total") > 0
    assert value(second, "h5feed_running") == 1
    assert value(second, "h5feed_credit_budget_batches") == 4
    assert 0 <= value(second, "h5feed_input_wait_ratio") <= 1
    # Per worker, labelled with the worker's and its host's ids, growing too.
    clips_before = by_worker(first, "h5feed_worker_clips_total")
    clips_after = by_worker(second, "h5feed_worker_clips_total")
    assert set(clips_after) == set(names) and len(names) == 2
    assert sum(clips_after.values()) > sum(clips_before.values())
    for labels, _ in second["h5feed_worker_clips_total"]:
        assert labels["host"] == names[labels["worker"]] == socket.gethostname()
    assert set(by_worker(second, "h5feed_worker_unit_latency_seconds")) == set(names)


def test_stats_json_has_the_shape_of_stats(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=4, workers=2, metrics_port=0)
    port = feed.metrics_port
    assert port is not None
    assert stats(port) == {"running": False, "metrics_port": port}
    with feed.stream() as stream:
        next(stream)
        served, direct = stats(port), feed.stats()
    assert served.keys() == direct.keys()
    assert served["job"] == direct["job"] and served["running"] is True
    assert [w.keys() for w in served["workers"]] == [w.keys() for w in direct["workers"]]
    assert served["hosts"].keys() == direct["hosts"].keys()
    assert served["verdict"].startswith(("input-bound: ", "not input-bound: "))


def test_counters_never_go_back_across_iterations(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=4, workers=1, metrics_port=0)
    port = feed.metrics_port
    assert port is not None
    assert value(scrape(port), "h5feed_clips_total") == 0
    assert sum(1 for _ in feed) == 6
    assert value(scrape(port), "h5feed_clips_total") == 24
    stream = iter(feed)
    next(stream)
    during = scrape(port)
    assert value(during, "h5feed_clips_total") == 28
    assert value(during, "h5feed_iterations_total") == 2
    for _ in stream:
        pass
    after = scrape(port)
    assert value(after, "h5feed_clips_total") == 48 and value(after, "h5feed_batches_total") == 12
    assert value(after, "h5feed_running") == 0


def test_the_port_comes_from_the_environment_at_construction(
    small_dataset: list[pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    monkeypatch.setenv("H5FEED_METRICS_PORT", str(port))  # after `import h5feed`: still read
    train = h5feed.batches(small_dataset, **CLIP, workers=1)
    assert train.metrics_port == port
    # A second feed of the same process (validation) moves on to a free port of its own.
    validation = h5feed.batches(small_dataset, **CLIP, workers=1)
    assert validation.metrics_port not in (None, port)
    assert b"h5feed_clips_total" in get(f"http://127.0.0.1:{validation.metrics_port}/metrics")
    monkeypatch.delenv("H5FEED_METRICS_PORT")
    assert h5feed.batches(small_dataset, **CLIP, workers=1).metrics_port is None


def test_the_server_stops_with_its_feed(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, workers=1, metrics_port=0)
    port = feed.metrics_port
    assert get(f"http://127.0.0.1:{port}/stats")
    del feed  # the feed is garbage collected: its port is freed
    with pytest.raises(urllib.error.URLError):
        get(f"http://127.0.0.1:{port}/stats")


@pytest.mark.parametrize("bad", [-1, 65536, True, "9100", 1.5])
def test_a_bad_metrics_port_is_refused(small_dataset: list[pathlib.Path], bad: object) -> None:
    with pytest.raises(ValueError, match=r"metrics_port must be a port number .* got"):
        h5feed.batches(small_dataset, **CLIP, metrics_port=bad)  # type: ignore[arg-type]


def test_a_bad_metrics_port_variable_is_named(
    small_dataset: list[pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("H5FEED_METRICS_PORT", "nine")
    with pytest.raises(ValueError, match=r"\$H5FEED_METRICS_PORT must be a port number"):
        h5feed.batches(small_dataset, **CLIP)


def test_a_taken_metrics_port_is_named(small_dataset: list[pathlib.Path]) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on port {port}"):
            h5feed.batches(small_dataset, **CLIP, metrics_port=port)


def test_produce_refuses_a_bad_metrics_port(tmp_path: pathlib.Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "h5feed", "produce", "--connect", "tcp://127.0.0.1:1",
         "--metrics-port", "70000"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    assert "H5FEED_METRICS_PORT must be a port number (0..65535" in result.stderr


def scrape_once_counted(
    port: int, clips: int, timeout_s: float = 30.0
) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The producer's metrics, once its workers' clip counters add up to at least ``clips``."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(port)
        counted = sum(by_worker(samples, "h5feed_producer_clips_total").values())
        if counted >= clips:
            return samples
        assert time.monotonic() < deadline, (
            f"{counted} clips counted after {timeout_s} s, not {clips}"
        )
        time.sleep(0.1)


def test_a_producer_services_metrics_carry_worker_labels_and_grow(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    connect = free_port()
    log = tmp_path / "producer.log"
    producer = start_producer(connect, small_dataset[0].parent, "pm", log)
    try:
        port = metrics_port_of(log)
        feed = h5feed.batches(
            [p.name for p in small_dataset], data_root=str(small_dataset[0].parent), workers=0,
            listen=f"tcp://127.0.0.1:{connect}", **CLIP, batch_size=4, epochs=None,
            start_timeout_s=30,
        )  # fmt: skip
        with feed.stream() as stream:
            for _ in range(3):
                next(stream)
            # The workers write their counters every 0.5 s: wait until they count at least the
            # clips this consumer has taken (each was produced before it was taken).
            first = scrape_once_counted(port, stream.stats()["clips"])
            for _ in range(10):
                next(stream)
            second = scrape_once_counted(port, stream.stats()["clips"])
        labels = {tuple(sorted(lab.items())) for lab, _ in second["h5feed_producer_clips_total"]}
        host = socket.gethostname()
        assert labels == {
            (("host", host), ("producer", "pm"), ("worker", f"pm-{i}")) for i in range(2)
        }
        before = by_worker(first, "h5feed_producer_clips_total")
        after = by_worker(second, "h5feed_producer_clips_total")
        assert sum(after.values()) > sum(before.values()) > 0
        assert all(after[w] >= before[w] for w in before)
        assert sum(by_worker(second, "h5feed_producer_units_total").values()) > 0
        assert sum(by_worker(second, "h5feed_producer_busy_seconds_total").values()) > 0
        assert by_worker(second, "h5feed_producer_worker_up") == {"pm-0": 1, "pm-1": 1}
        assert second["h5feed_producer_workers"][0][1] == 2
        served = stats(port)
        assert served["role"] == "producer" and served["producer"] == "pm"
        assert [w["name"] for w in served["workers"]] == ["pm-0", "pm-1"]
        assert sum(w["clips"] for w in served["workers"]) >= sum(after.values())
    finally:
        stop(producer)
    assert producer.returncode == 0, log.read_text()


def test_a_killed_service_worker_is_restarted_and_its_counters_kept(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    connect = free_port()
    log = tmp_path / "producer.log"
    producer = start_producer(connect, small_dataset[0].parent, "pk", log, workers=1)
    try:
        port = metrics_port_of(log)
        feed = h5feed.batches(
            [p.name for p in small_dataset], data_root=str(small_dataset[0].parent), workers=0,
            listen=f"tcp://127.0.0.1:{connect}", **CLIP, batch_size=4, start_timeout_s=30,
        )  # fmt: skip
        assert sum(1 for _ in feed) == 6
        deadline = time.monotonic() + 10
        while by_worker(scrape(port), "h5feed_producer_clips_total").get("pk-0", 0) < 24:
            assert time.monotonic() < deadline, "the worker's counters never reached 24 clips"
            time.sleep(0.2)
        (pid,) = worker_pids(producer.pid)
        os.kill(pid, signal.SIGKILL)
        while by_worker(scrape(port), "h5feed_producer_worker_restarts_total").get("pk-0") != 1:
            assert time.monotonic() < deadline + 10, "the killed worker was not restarted"
            time.sleep(0.2)
        after = scrape(port)
        assert by_worker(after, "h5feed_producer_clips_total") == {"pk-0": 24}
        assert by_worker(after, "h5feed_producer_jobs_total") == {"pk-0": 1}
        assert "worker pk-0 exited (-9) after returning parts; restarting now" in log.read_text()
    finally:
        stop(producer)


def test_metrics_answer_while_idle_connections_are_held() -> None:
    """20 connections that send nothing, each opened again as soon as it is closed: every
    scrape is still answered (issue 38 item 7). Before, 8 such connections starved the
    endpoint (0 of 10 answered; with 5, each scrape waited seconds): each of its 4 threads
    blocked up to 5 s reading one, and the ones opened again queued ahead of the scrapes;
    with 20 the queue was full and a scrape was closed at once."""
    from prometheus_client import CollectorRegistry

    from h5feed.common.metrics_http import MetricsServer

    server = MetricsServer(CollectorRegistry(), lambda: {"ok": 1}, 0)
    address = ("127.0.0.1", server.port)
    idle = [socket.create_connection(address, timeout=10) for _ in range(20)]
    stop = threading.Event()

    def hold() -> None:  # a closed one comes back at once, as a flood would
        while not stop.is_set():
            for i, connection in enumerate(idle):
                connection.setblocking(False)
                try:
                    closed = connection.recv(1) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                if closed:
                    connection.close()
                    idle[i] = socket.create_connection(address, timeout=10)
            time.sleep(0.05)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    answered = 0
    try:
        time.sleep(0.5)
        for _ in range(10):
            with contextlib.suppress(OSError):  # URLError and timeouts included: not answered
                answered += get(f"http://127.0.0.1:{server.port}/stats") == b'{"ok": 1}'
    finally:
        stop.set()
        holder.join(10)
        for connection in idle:
            connection.close()
        server.close()
    assert answered == 10
