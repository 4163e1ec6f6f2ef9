"""Producers as a service: `h5feed produce` processes serving a `workers=0` consumer over TCP."""

from __future__ import annotations

import collections
import os
import pathlib
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
from conftest import wait_until_gone
from remote_producers import (
    CLIP,
    curve_args,
    curve_setup,
    remote_feed,
    start_producer,
    two_producers,
)

import h5feed
from h5feed.common.config import CLIP_SEMANTICS
from h5feed.common.errors import NoWorkersError
from h5feed.common.protocol.versions import SPOKEN


@pytest.fixture()
def producers(
    port: int, small_dataset: list[pathlib.Path]
) -> Iterator[list[subprocess.Popen[str]]]:
    with two_producers(port, small_dataset[0].parent) as started:
        yield started


def test_two_producer_processes_serve_two_epochs_exactly_once(
    port: int, small_dataset: list[pathlib.Path], producers: list[subprocess.Popen[str]]
) -> None:
    feed = remote_feed(port, small_dataset, epochs=2, batch_size=5, start_timeout_s=30)
    seen: collections.Counter[tuple[int, int]] = collections.Counter()
    for batch in feed:
        seen.update(zip(batch["epoch"].tolist(), batch["sample"].tolist(), strict=True))
        assert {f.decode() for f in batch["file"]} <= {p.name for p in small_dataset}
    assert seen == collections.Counter({(e, s): 1 for e in range(2) for s in range(24)})
    workers = feed.stats()["workers"]
    assert sorted(w["name"].split("-")[0] for w in workers) == ["p0", "p1"]
    assert all(w["clips"] > 0 for w in workers), workers


def test_producers_outlive_the_consumer_and_serve_the_next_one(
    port: int, small_dataset: list[pathlib.Path], producers: list[subprocess.Popen[str]]
) -> None:
    for seed in (1, 2):  # a trainer, then a restarted one on the same address
        feed = remote_feed(port, small_dataset, seed=seed, start_timeout_s=30)
        assert sum(len(b["label"]) for b in feed) == 24
        assert all(p.poll() is None for p in producers)


def test_sigterm_stops_a_producer_within_ten_seconds(
    port: int, small_dataset: list[pathlib.Path], producers: list[subprocess.Popen[str]]
) -> None:
    feed = remote_feed(port, small_dataset, start_timeout_s=30)
    assert sum(len(b["label"]) for b in feed) == 24
    producers[0].send_signal(signal.SIGTERM)
    began = time.monotonic()
    assert producers[0].wait(15) == 0
    assert time.monotonic() - began < 10


def test_no_producer_is_a_clear_error(port: int, small_dataset: list[pathlib.Path]) -> None:
    feed = remote_feed(port, small_dataset, start_timeout_s=1.0)
    with pytest.raises(
        NoWorkersError, match=rf"no producer connected to tcp://127.0.0.1:{port} within 1 s"
    ):
        list(feed)


def refused_worker(
    port: int, dataset: list[pathlib.Path], name: str, patch: str, refusal: str
) -> str:
    """Run a worker whose module constants ``patch`` changes before it imports its handshake
    (a release that differs from this one), check the trainer refuses it with ``refusal``
    (a regex) and that it exits with status 2; its stderr."""
    script = textwrap.dedent(
        f"""
        import sys
        {patch}
        from h5feed.producer.worker.process import main
        print("imported", flush=True)
        sys.exit(main(["--connect", "tcp://127.0.0.1:{port}", "--worker-id", "{name}",
                       "--persistent"]))
        """
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # Its imports take seconds on a loaded machine: the feed's 4 s start from here, when
        # the worker is about to connect (it says hello at once, then is refused).
        ready, _, _ = select.select([worker.stdout], [], [], 60)
        assert ready and worker.stdout is not None, f"worker {name} did not start in 60 s"
        assert worker.stdout.readline() == "imported\n"
        feed = remote_feed(port, dataset, start_timeout_s=4.0)
        with pytest.raises(NoWorkersError, match=rf"refused: .*{refusal}"):
            list(feed)
        _, stderr = worker.communicate(timeout=10)
        assert worker.returncode == 2
    finally:
        if worker.poll() is None:
            worker.kill()
    assert wait_until_gone([worker.pid], 5) == []
    return stderr


def test_a_producer_of_another_protocol_version_is_refused(
    port: int, small_dataset: list[pathlib.Path]
) -> None:
    # A worker of a future release, which speaks none of this side's versions.
    patch = (
        "import h5feed.common.protocol.versions as versions; "
        "versions.PROTOCOL_VERSION = versions.OLDEST_VERSION = 99; "
        "versions.SPOKEN = versions.VersionRange(99, 99)"
    )
    stderr = refused_worker(port, small_dataset, "future", patch, rf"version 99.*speaks {SPOKEN}")
    # Told in the oldest version the trainer speaks, which it does not speak either.
    assert f"version {SPOKEN.lowest}, this side speaks 99" in stderr, stderr


def test_a_producer_of_other_clip_semantics_is_refused_naming_both(
    port: int, small_dataset: list[pathlib.Path]
) -> None:
    """A producer that would cut other pixels from the same plan row (a release whose decode
    or crop changed) never serves the job: refused at its hello, naming both semantics."""
    other = CLIP_SEMANTICS + 1
    patch = f"import h5feed.common.config as config; config.CLIP_SEMANTICS = {other}"
    refusal = rf"semantics {other}; this trainer needs {CLIP_SEMANTICS}"
    stderr = refused_worker(port, small_dataset, "other", patch, refusal)
    assert f"needs {CLIP_SEMANTICS}" in stderr, stderr


def test_the_consumer_need_not_see_the_files(
    port: int, small_dataset: list[pathlib.Path], producers: list[subprocess.Popen[str]]
) -> None:
    feed = h5feed.batches(
        [p.name for p in small_dataset],
        data_root="/nonexistent/on/the/trainer",  # only the producers have the files
        workers=0,
        listen=f"tcp://127.0.0.1:{port}",
        start_timeout_s=30,
        **CLIP,  # type: ignore[arg-type]
    )
    assert sum(len(b["label"]) for b in feed) == 24


def test_a_missing_file_is_reported_with_host_and_path(
    port: int, small_dataset: list[pathlib.Path], producers: list[subprocess.Popen[str]]
) -> None:
    feed = h5feed.batches(
        ["missing.h5"],
        data_root="/nonexistent/on/the/trainer",
        workers=0,
        listen=f"tcp://127.0.0.1:{port}",
        start_timeout_s=30,
        **CLIP,  # type: ignore[arg-type]
    )
    where = str(small_dataset[0].parent / "missing.h5")
    with pytest.raises(h5feed.WorkerError, match=rf"on {socket.gethostname()}.*{where}"):
        list(feed)


def test_a_new_consumer_after_an_abandoned_one_gets_its_epoch_exactly_once(
    port: int, small_dataset: list[pathlib.Path], producers: list[subprocess.Popen[str]]
) -> None:
    first = remote_feed(port, small_dataset, epochs=None, batch_size=2, start_timeout_s=30)
    stream = first.stream()
    for _ in range(3):
        next(stream)
    stream.close()  # the trainer stops mid-epoch, producers busy: their parts are of that job
    feed = remote_feed(port, small_dataset, batch_size=2, start_timeout_s=30)
    samples = sorted(s for b in feed for s in b["sample"].tolist())
    assert samples == list(range(24))


def test_health_reports_a_live_producer_and_a_stale_file(
    port: int, tmp_path: pathlib.Path, small_dataset: list[pathlib.Path]
) -> None:
    health = tmp_path / "producer.health"
    producer = subprocess.Popen(
        [sys.executable, "-m", "h5feed", "produce", "--connect", f"tcp://127.0.0.1:{port}",
         "--workers", "1", "--health-file", str(health)],
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        ok = None
        while time.monotonic() < deadline:
            ok = subprocess.run([sys.executable, "-m", "h5feed", "health", str(health)], timeout=30)
            if ok.returncode == 0:
                break
            time.sleep(0.5)
        assert ok is not None and ok.returncode == 0
    finally:
        producer.send_signal(signal.SIGTERM)
        assert producer.wait(15) == 0
    stale = subprocess.run(
        [sys.executable, "-m", "h5feed", "health", str(health), "--max-age", "0"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert stale.returncode == 1 and "old" in stale.stderr


def test_a_producer_whose_worker_crash_loops_fails_its_health_check(
    tmp_path: pathlib.Path,
) -> None:
    from h5feed.producer.service.server import check_health

    health = tmp_path / "producer.health"
    producer = subprocess.Popen(  # every worker dies at start: a bad --connect address
        [sys.executable, "-m", "h5feed", "produce", "--connect", "tcp://127.0.0.1:notaport",
         "--workers", "1", "--health-file", str(health), "--max-restarts", "1"],
        stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        problem = None
        while not (problem or "").startswith("crash loop"):
            assert time.monotonic() < deadline, f"no crash loop reported: {problem}"
            time.sleep(0.2)
            problem = check_health(str(health), max_age_s=60)
        assert "died 2 times within 60 s, each time before returning any data" in problem
        assert "(max_restarts=1)" in problem
        failed = subprocess.run(
            [sys.executable, "-m", "h5feed", "health", str(health), "--max-age", "60"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert failed.returncode == 1 and "crash loop" in failed.stderr
    finally:
        producer.send_signal(signal.SIGTERM)
        _out, errors = producer.communicate(timeout=20)
    assert "before returning any part; restarting in 1 s" in errors  # then 2 s, 4 s, ...


def test_default_worker_count_honours_the_cgroup_quota(tmp_path: pathlib.Path) -> None:
    from h5feed.producer.service.cpus import available_cpus, cgroup_cpu_quota

    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs
    assert cgroup_cpu_quota(str(tmp_path)) == 1.5
    assert available_cpus(str(tmp_path)) == min(2, len(os.sched_getaffinity(0)))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(str(tmp_path)) is None
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert available_cpus(str(tmp_path)) == 1


def test_sigterm_to_a_producer_mid_epoch_hands_its_work_over(
    port: int, small_dataset: list[pathlib.Path], producers: list[subprocess.Popen[str]]
) -> None:
    feed = remote_feed(port, small_dataset, batch_size=2, seed=5, start_timeout_s=30)
    samples: list[int] = []
    with feed.stream() as stream:
        for i, batch in enumerate(stream):
            samples.extend(batch["sample"].tolist())
            if i == 2:  # units are in flight at both producers now
                producers[0].send_signal(signal.SIGTERM)
        stats = stream.stats()
    assert sorted(samples) == list(range(24)), "lost or repeated clips after a producer left"
    assert producers[0].wait(15) == 0
    assert [w["name"].split("-")[0] for w in stats["workers"]] == ["p1"]
    print("reassigned units:", stats["reassigned_units"], "dropped parts:", stats["dropped_parts"])


def test_curve_admits_only_listed_producers(
    port: int, tmp_path: pathlib.Path, small_dataset: list[pathlib.Path]
) -> None:
    keys, authorized = curve_setup(tmp_path, "good")  # the stranger's key is not listed
    root = small_dataset[0].parent
    started = [  # both with valid key pairs; one listed
        start_producer(port, root, name, curve_args(keys, name)) for name in ("good", "stranger")
    ]
    try:
        feed = h5feed.batches(
            [p.name for p in small_dataset],
            data_root=str(root),
            workers=1,  # a local worker too: it gets this iteration's own keys
            listen=f"tcp://127.0.0.1:{port}",
            curve_key=str(keys / "trainer.key_secret"),
            curve_authorized=str(authorized),
            join_grace_s=3.0,
            start_timeout_s=30,
            **CLIP,  # type: ignore[arg-type]
        )
        samples = sorted(s for b in feed for s in b["sample"].tolist())
        stats = feed.stats()
    finally:
        for process in started:
            process.terminate()
            process.communicate(timeout=15)
    assert samples == list(range(24))
    names = sorted(w["name"].split("-")[0] for w in stats["workers"])
    assert names[0] == "good" and len(names) == 2 and names[1].startswith("w"), names
    assert stats["malformed_messages"] == 0  # the stranger's messages never got in
    assert stats["refused_keys"] >= 1  # its connection was refused, and counted


def test_curve_without_a_listed_producer_gets_no_work(
    port: int, tmp_path: pathlib.Path, small_dataset: list[pathlib.Path]
) -> None:
    keys, authorized = curve_setup(tmp_path, "listed")
    stranger = start_producer(
        port, small_dataset[0].parent, "stranger", curve_args(keys, "stranger")
    )
    try:
        feed = remote_feed(
            port,
            small_dataset,
            curve_key=str(keys / "trainer.key_secret"),
            curve_authorized=str(authorized),
            start_timeout_s=4.0,
        )
        with pytest.raises(NoWorkersError, match="no producer connected"):
            list(feed)
    finally:
        stranger.terminate()
        stranger.communicate(timeout=15)


def test_listening_beyond_loopback_without_keys_warns(
    port: int, small_dataset: list[pathlib.Path], caplog: pytest.LogCaptureFixture
) -> None:
    # insecure=True: the port is open for the seconds of one epoch of test data, no more
    # (tests/system/test_trust_network.py checks that it is refused without it).
    with pytest.warns(h5feed.InsecureWarning, match="without CURVE keys"):
        feed = h5feed.batches(
            small_dataset, **CLIP, workers=1, listen=f"tcp://0.0.0.0:{port}", insecure=True
        )
    with caplog.at_level("WARNING", logger="h5feed.consumer"):
        assert sum(len(b["label"]) for b in feed) == 24
    assert any("without CURVE keys" in r.getMessage() for r in caplog.records)
    caplog.clear()
    loopback = h5feed.batches(small_dataset, **CLIP, workers=1, listen=f"tcp://127.0.0.1:{port}")
    with caplog.at_level("WARNING", logger="h5feed.consumer"):
        assert sum(len(b["label"]) for b in loopback) == 24
    assert not any("without CURVE keys" in r.getMessage() for r in caplog.records)


def test_producers_serve_a_new_trainer_after_one_was_killed(
    port: int, small_dataset: list[pathlib.Path], producers: list[subprocess.Popen[str]]
) -> None:
    script = textwrap.dedent(
        f"""
        import h5feed
        feed = h5feed.batches({[p.name for p in small_dataset]!r},
                              data_root={str(small_dataset[0].parent)!r}, workers=0,
                              listen="tcp://127.0.0.1:{port}", clip_len=4, epochs=None,
                              start_timeout_s=30)
        for i, _ in enumerate(feed):
            if i == 3:
                print("running", flush=True)
        """
    )
    trainer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert trainer.stdout is not None
        assert trainer.stdout.readline().strip() == "running"
        trainer.kill()  # no BYE: the producers still hold its job
        trainer.wait(10)
    finally:
        if trainer.poll() is None:
            trainer.kill()
    feed = remote_feed(port, small_dataset, start_timeout_s=30)
    assert sorted(s for b in feed for s in b["sample"].tolist()) == list(range(24))
    assert all(p.poll() is None for p in producers)
