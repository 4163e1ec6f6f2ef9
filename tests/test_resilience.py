"""Exactly once whatever fails: many SIGKILLs of local workers over several epochs, remote
producers killed without a BYE or restarted by their supervisor, a producer added mid-epoch.

Real processes, sockets and files. Nothing depends on timing luck: failures are triggered by
batches received (a seeded schedule), and every wait is bounded."""

from __future__ import annotations

import contextlib
import os
import pathlib
import random
import signal
import subprocess
import time

import pytest
from conftest import _alive, wait_until_gone, worker_pids
from test_producers import CLIP, free_port, remote_feed, start_producer

import h5feed

KILLS = 21


def test_21_sigkills_of_local_workers_over_3_epochs_lose_and_repeat_nothing(
    small_dataset: list[pathlib.Path],
) -> None:
    rng = random.Random(2026)
    batches_per_epoch = 24  # 24 samples, batch_size 1
    schedule = sorted(rng.sample(range(1, 3 * batches_per_epoch - 12), KILLS))
    feed = h5feed.batches(
        small_dataset, **CLIP, batch_size=1, workers=2, epochs=3, seed=9, max_restarts=KILLS
    )
    per_epoch: dict[int, list[int]] = {0: [], 1: [], 2: []}
    seen: set[int] = set()
    killed: set[int] = set()
    with feed.stream() as stream:
        for i, batch in enumerate(stream):
            per_epoch[int(batch["epoch"][0])] += batch["sample"].tolist()
            seen |= set(stream.worker_pids)
            if schedule and i == schedule[0]:
                schedule.pop(0)
                for pid in rng.sample(stream.worker_pids, 2):  # one not killed yet
                    if pid in killed or not _alive(pid):
                        continue  # its replacement is starting
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                        killed.add(pid)
                    break
        stats = stream.stats()
    kills = len(killed)
    assert not schedule and kills >= 20
    for epoch, samples in per_epoch.items():
        assert sorted(samples) == list(range(24)), f"epoch {epoch}"
    assert stats["workers_replaced"] == kills
    assert wait_until_gone(sorted(seen)) == []


@pytest.fixture()
def port() -> int:
    return free_port()


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.communicate(timeout=10)


def test_a_remote_producer_killed_without_bye_is_reassigned_within_peer_timeout(
    port: int, small_dataset: list[pathlib.Path]
) -> None:
    producers = [start_producer(port, small_dataset[0].parent, f"p{i}") for i in range(2)]
    try:
        feed = remote_feed(port, small_dataset, batch_size=2, seed=5, peer_timeout_s=3.0)
        samples: list[int] = []
        killed_at = 0.0
        took_after: list[float] = []
        with feed.stream() as stream:
            for i, batch in enumerate(stream):
                samples += batch["sample"].tolist()
                if i == 2:  # units are in flight at both producers
                    producers[0].kill()  # the service and ...
                    for pid in worker_pids(producers[0].pid):  # ... its worker: no BYE
                        os.kill(pid, signal.SIGKILL)
                    killed_at = time.monotonic()
                elif killed_at:
                    took_after.append(time.monotonic() - killed_at)
            stats = stream.stats()
        assert sorted(samples) == list(range(24)), "lost or repeated clips after a kill"
        assert stats["peers_lost"] >= 1 and stats["reassigned_units"] >= 1
        assert took_after and took_after[-1] < 3.0 + 10  # peer_timeout_s + a few seconds
    finally:
        for process in producers:
            _stop(process)


def test_a_producer_worker_restarted_by_its_supervisor_rejoins(
    port: int, small_dataset: list[pathlib.Path]
) -> None:
    producers = [start_producer(port, small_dataset[0].parent, f"p{i}") for i in range(2)]
    try:
        feed = remote_feed(port, small_dataset, batch_size=1, seed=6, peer_timeout_s=3.0)
        samples: list[int] = []
        with feed.stream() as stream:
            for i, batch in enumerate(stream):
                samples += batch["sample"].tolist()
                if i == 2:
                    for pid in worker_pids(producers[0].pid):  # the service restarts it
                        os.kill(pid, signal.SIGKILL)
                if i == 3:  # hold the epoch open until the restarted worker is back
                    deadline = time.monotonic() + 60
                    while stream.stats()["peers_joined"] < 1:
                        assert time.monotonic() < deadline, "the restarted worker never rejoined"
                        time.sleep(0.1)
            stats = stream.stats()
        assert sorted(samples) == list(range(24))
        assert stats["peers_lost"] == 1 and stats["peers_joined"] == 1
        assert sorted(w["name"].split("-")[0] for w in stats["workers"]) == ["p0", "p1"]
    finally:
        for process in producers:
            _stop(process)


def test_a_producer_started_mid_epoch_delivers_units_in_that_epoch(
    port: int, small_dataset: list[pathlib.Path]
) -> None:
    first = start_producer(port, small_dataset[0].parent, "first")
    late: subprocess.Popen[str] | None = None
    try:
        feed = remote_feed(port, small_dataset, batch_size=1, seed=7, max_inflight_batches=2)
        samples: list[int] = []
        with feed.stream() as stream:
            for i, batch in enumerate(stream):
                samples += batch["sample"].tolist()
                if i == 1:
                    late = start_producer(port, small_dataset[0].parent, "late")
                if i == 2:  # hold the epoch open until "late" has joined (its share follows)
                    deadline = time.monotonic() + 60
                    while stream.stats()["peers_joined"] < 1:
                        assert time.monotonic() < deadline, "the late producer never joined"
                        time.sleep(0.1)
            stats = stream.stats()
        assert sorted(samples) == list(range(24))
        assert stats["peers_joined"] == 1 and _delivered(stats, "late")
    finally:
        for process in (first, late):
            if process is not None:
                _stop(process)


def _delivered(stats: dict[str, object], name: str) -> bool:
    workers = stats["workers"]
    assert isinstance(workers, list)
    return any(w["name"].startswith(name) and w["clips"] > 0 for w in workers)
