"""Exactly once whatever fails: many SIGKILLs of local workers over several epochs, remote
producers killed without a BYE or restarted by their supervisor, a producer added mid-epoch.

Real processes, sockets and files. Nothing depends on timing luck: failures are triggered by
batches received (a seeded schedule), and every wait is bounded."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import SMALL, process_alive, wait_until_gone, worker_pids
from ports import free_port
from remote_producers import CLIP, curve_args, curve_setup, make_keys, remote_feed, start_producer

import h5feed
from h5feed.bench import netns
from h5feed.common.errors import DataError
from h5feed.producer.sample_data import make_sample_dataset
from h5feed.producer.service.server import check_health

KILLS = 21


def test_21_sigkills_of_local_workers_over_3_epochs_lose_and_repeat_nothing(
    small_dataset: list[pathlib.Path],
) -> None:
    rng = random.Random(2026)
    batches_per_epoch = 24  # 24 samples, batch_size 1
    schedule = sorted(rng.sample(range(1, 3 * batches_per_epoch - 12), KILLS))
    feed = h5feed.batches(
        small_dataset, **CLIP, batch_size=1, workers=2, epochs=3, seed=9, max_restarts=KILLS,
        max_unit_attempts=KILLS,  # kills this close may hit one unit's holders 3 times
    )  # fmt: skip
    per_epoch: dict[int, list[int]] = {0: [], 1: [], 2: []}
    seen: set[int] = set()
    killed: set[int] = set()
    with feed.stream() as stream:
        for i, batch in enumerate(stream):
            per_epoch[int(batch["epoch"][0])] += batch["sample"].tolist()
            seen |= set(stream.worker_pids)
            if schedule and i >= schedule[0]:  # a kill put off stays due (see below)
                for pid in rng.sample(stream.worker_pids, 2):  # one not killed yet
                    if pid in killed or not process_alive(pid):
                        continue  # its replacement is starting
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                        killed.add(pid)
                        schedule.pop(0)
                    break
                # With both gone already (replacements starting), the kill waits for the
                # next batch: the count does not depend on how fast replacements start.
        stats = stream.stats()
    kills = len(killed)
    assert not schedule and kills == KILLS, f"{len(schedule)} kills not made"
    for epoch, samples in per_epoch.items():
        assert sorted(samples) == list(range(24)), f"epoch {epoch}"
    assert stats["workers_replaced"] == kills
    feed.close()  # its workers are kept across iterations until then
    assert wait_until_gone(sorted(seen)) == []


def test_workers_killed_after_they_delivered_are_replaced_every_time_with_defaults(
    small_dataset: list[pathlib.Path],
) -> None:
    """An OOM killer on a host under memory pressure: each kill waits for its victim (the
    worker killed least so far) to have returned a part since its process started (the
    event, read from ``stats()``); 9 kills over 3 epochs, 5 of one worker (past
    max_restarts=3 within a minute, which the run takes on an idle machine), and the defaults
    end nothing: these deaths are no crash loop, and no unit is held through 3 deaths."""
    kills_wanted = 9
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=1, workers=2, epochs=3, seed=11)
    per_epoch: dict[int, list[int]] = {0: [], 1: [], 2: []}
    killed: list[int] = []
    seen: set[int] = set()
    names: set[str] = set()
    per_name: collections.Counter[str] = collections.Counter()
    with feed.stream() as stream:
        for i, batch in enumerate(stream):
            per_epoch[int(batch["epoch"][0])] += batch["sample"].tolist()
            seen |= set(stream.worker_pids)
            if len(killed) == kills_wanted or i < 3 + 7 * len(killed):
                continue  # a kill every 7 batches at most: spread over the 3 epochs
            workers = stream.stats()["workers"]  # one entry per live process that said hello
            names |= {w["name"] for w in workers}
            ready = [w for w in workers if w["count"] > 0 and w["pid"] not in killed]
            if ready:  # else the kill is due at the next batch
                victim = min(ready, key=lambda w: (per_name[w["name"]], w["name"]))
                os.kill(victim["pid"], signal.SIGKILL)
                killed.append(victim["pid"])
                per_name[victim["name"]] += 1
        stats = stream.stats()
    assert len(killed) == kills_wanted, f"only {len(killed)} kills made"
    assert sorted(per_name.values()) == [4, 5]  # each worker died again and again
    for epoch, samples in per_epoch.items():
        assert sorted(samples) == list(range(24)), f"epoch {epoch}"
    assert stats["workers_replaced"] == kills_wanted
    feed.close()
    assert wait_until_gone(sorted(seen)) == []


@pytest.fixture()
def port() -> int:
    return free_port()


def _stop(process: subprocess.Popen[str]) -> str:
    """Kill ``process`` if it runs; what it wrote on stderr."""
    if process.poll() is None:
        process.kill()
    return process.communicate(timeout=10)[1] or ""


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
    port: int, small_dataset: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    # p0's worker is killed once it delivered: restarted at once, and no crash loop even
    # with --max-restarts 0 (its health check stays good).
    health = tmp_path / "p0.health"
    root = small_dataset[0].parent
    extra = ["--max-restarts", "0", "--health-file", str(health)]
    producers = [start_producer(port, root, "p0", extra), start_producer(port, root, "p1")]
    errors: list[str] = []
    try:
        feed = remote_feed(port, small_dataset, batch_size=1, seed=6, peer_timeout_s=3.0)
        samples: list[int] = []
        killed_at = None
        with feed.stream() as stream:
            for i, batch in enumerate(stream):
                samples += batch["sample"].tolist()
                workers = stream.stats()["workers"]
                if killed_at is None and any(
                    w["name"].startswith("p0-") and w["count"] > 0 for w in workers
                ):  # it returned a part: kill it now (else at a later batch)
                    for pid in worker_pids(producers[0].pid):  # the service restarts it
                        os.kill(pid, signal.SIGKILL)
                    killed_at = i
                elif killed_at is not None and i == killed_at + 1:  # hold the epoch open
                    deadline = time.monotonic() + 60  # until the restarted worker is back
                    while stream.stats()["peers_joined"] < 1:
                        assert time.monotonic() < deadline, "the restarted worker never rejoined"
                        time.sleep(0.1)
            stats = stream.stats()
        assert killed_at is not None and killed_at < 20
        assert sorted(samples) == list(range(24))
        assert stats["peers_lost"] == 1 and stats["peers_joined"] == 1
        assert sorted(w["name"].split("-")[0] for w in stats["workers"]) == ["p0", "p1"]
        assert check_health(str(health)) is None  # no crash loop reported
    finally:
        errors = [_stop(process) for process in producers]
    assert "after returning parts; restarting now" in errors[0]


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


def _workers(stream: Any) -> list[dict[str, Any]]:
    workers: list[dict[str, Any]] = stream.stats()["workers"]
    return workers


def _delivered(stats: dict[str, object], name: str) -> bool:
    workers = stats["workers"]
    assert isinstance(workers, list)
    return any(w["name"].startswith(name) and w["clips"] > 0 for w in workers)


@pytest.fixture(scope="module")
def other_copies(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """Files of the same names as small_dataset's, with other videos (another host's copy)."""
    root = tmp_path_factory.mktemp("other-copies")
    make_sample_dataset(root, dataclasses.replace(SMALL, seed=SMALL.seed + 1))
    return root


def test_a_joiner_with_another_copy_of_a_file_is_refused_for_it(
    port: int, small_dataset: list[pathlib.Path], other_copies: pathlib.Path
) -> None:
    first = start_producer(port, small_dataset[0].parent, "first")
    late: subprocess.Popen[str] | None = None
    try:
        feed = remote_feed(port, small_dataset, batch_size=1, seed=8, max_inflight_batches=2)
        samples: list[int] = []
        with feed.stream() as stream:
            for i, batch in enumerate(stream):
                samples += batch["sample"].tolist()
                if i == 1:
                    late = start_producer(port, other_copies, "late")
                if i == 2:  # hold the epoch until the joiner's INDEX was compared
                    deadline = time.monotonic() + 60
                    while stream.stats()["index_mismatches"] < 1:
                        assert time.monotonic() < deadline, "no INDEX of the joiner compared"
                        time.sleep(0.1)
            stats = stream.stats()
        assert sorted(samples) == list(range(24))  # all from the planned copies
        assert stats["index_mismatches"] >= 1 and not _delivered(stats, "late")
    finally:
        for process in (first, late):
            if process is not None:
                _stop(process)


def test_an_heir_with_another_copy_ends_the_run_naming_host_file_and_video(
    port: int, small_dataset: list[pathlib.Path], other_copies: pathlib.Path
) -> None:
    first = start_producer(port, small_dataset[0].parent, "first")
    other = start_producer(port, other_copies, "other")
    try:
        feed = remote_feed(port, small_dataset[:2], batch_size=1, seed=8, join_grace_s=3.0)
        with feed.stream() as stream:
            next(stream)
            owners = {w["name"].split("-")[0]: w["files"] for w in stream.stats()["workers"]}
            assert owners == {"first": 1, "other": 1}  # each indexed one file: its own copy
            # "other" indexed its own copy of its file: that is the plan. When "first" goes,
            # its file must move to "other", whose copy of it differs from the plan.
            first.kill()
            for pid in worker_pids(first.pid):
                os.kill(pid, signal.SIGKILL)
            with pytest.raises(DataError) as caught:
                for _ in stream:
                    pass
        message = str(caught.value)
        assert socket.gethostname() in message and "video" in message
        assert any(p.name in message for p in small_dataset[:2])
    finally:
        for process in (first, other):
            _stop(process)


@pytest.fixture()
def namespace() -> Iterator[tuple[str, str, str]]:
    """A network namespace joined to this one by a veth pair: (its name, the host-side link,
    this side's address); a subnet no other run holds (h5feed/bench/netns.py). Needs root
    (CI runs as root); removed whatever happens."""
    with netns.network_namespace() as net:
        yield net.name, net.host_link, net.host_address


def test_a_producer_whose_link_goes_down_is_reassigned_within_peer_timeout(
    port: int, small_dataset: list[pathlib.Path], namespace: tuple[str, str, str]
) -> None:
    name, host_link, host_ip = namespace
    producer = subprocess.Popen(
        ["ip", "netns", "exec", name, sys.executable, "-m", "h5feed", "produce",
         "--data-root", str(small_dataset[0].parent), "--workers", "1", "--name", "far",
         "--connect", f"tcp://{host_ip}:{port}", "--insecure"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        with pytest.warns(h5feed.InsecureWarning):
            feed = h5feed.batches(
                [p.name for p in small_dataset], data_root=str(small_dataset[0].parent),
                workers=1, listen=f"tcp://{host_ip}:{port}", insecure=True, join_grace_s=5.0,
                **CLIP, batch_size=1, seed=10, peer_timeout_s=3.0, max_inflight_batches=2,
            )  # fmt: skip
        samples: list[int] = []
        cut_at = 0.0
        with feed.stream() as stream:
            for i, batch in enumerate(stream):
                samples += batch["sample"].tolist()
                deadline = time.monotonic() + 60
                while i == 0 and not any(w["name"].startswith("far") for w in _workers(stream)):
                    assert time.monotonic() < deadline, "the producer in the namespace never came"
                    time.sleep(0.1)
                if not cut_at and _delivered(stream.stats(), "far"):
                    subprocess.run(["ip", "link", "set", host_link, "down"], check=True, timeout=30)
                    cut_at = time.monotonic()
                elif cut_at and i < 23:
                    assert time.monotonic() - cut_at < 3.0 + 10, "not reassigned in time"
            stats = stream.stats()
        assert cut_at, "the producer in the namespace never delivered a part"
        assert sorted(samples) == list(range(24))
        assert stats["peers_lost"] == 1 and stats["reassigned_units"] >= 0
    finally:
        _stop(producer)


def test_a_stopped_producer_is_lost_then_rejoins_as_a_new_session_once_continued(
    port: int, small_dataset: list[pathlib.Path]
) -> None:
    # Its connection timed out while it was stopped; continued, its worker sees that the
    # connection broke and starts over (h5feed/producer/worker/connection.py): a new socket,
    # a new nonce. So it is never back with its old nonce (refused, the session unit tests
    # pin that rule for a process that is), and it rejoins at once.
    producers = [start_producer(port, small_dataset[0].parent, f"p{i}") for i in range(2)]
    stopped: list[int] = []
    try:
        feed = remote_feed(port, small_dataset, batch_size=1, seed=11, peer_timeout_s=3.0)
        samples: list[int] = []
        with feed.stream() as stream:
            for i, batch in enumerate(stream):
                samples += batch["sample"].tolist()
                if i == 2:  # alive but silent: no heartbeat answers
                    stopped = worker_pids(producers[0].pid)
                    for pid in stopped:
                        os.kill(pid, signal.SIGSTOP)
                if i == 3:  # lost by liveness; then back, as a new session
                    _wait_for(stream, "peers_lost", 1)
                    for pid in stopped:
                        os.kill(pid, signal.SIGCONT)
                    _wait_for(stream, "peers_joined", 1)
            stats = stream.stats()
        assert sorted(samples) == list(range(24))
        assert stats["refused_reconnects"] == 0 and stats["peers_joined"] == 1
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for process in producers:
            _stop(process)


def _wait_for(stream: Any, counter: str, at_least: int) -> None:
    deadline = time.monotonic() + 60
    while stream.stats()[counter] < at_least:
        assert time.monotonic() < deadline, f"{counter} stayed below {at_least}"
        time.sleep(0.1)


def test_an_identity_cannot_be_taken_over_with_another_curve_key(
    port: int, tmp_path: pathlib.Path, small_dataset: list[pathlib.Path]
) -> None:
    keys, authorized = curve_setup(tmp_path, "good")
    make_keys(keys, "thief")  # a listed key too: admitted, but not as "good"'s identity
    (authorized / "thief.key").write_bytes((keys / "thief.key").read_bytes())
    root = small_dataset[0].parent
    good = start_producer(port, root, "good", curve_args(keys, "good"))
    thief: subprocess.Popen[str] | None = None
    try:
        feed = remote_feed(
            port, small_dataset, batch_size=1, seed=12, peer_timeout_s=3.0,
            curve_key=str(keys / "trainer.key_secret"), curve_authorized=str(authorized),
        )  # fmt: skip
        with feed.stream() as stream:
            next(stream)
            good.kill()
            for pid in worker_pids(good.pid):
                os.kill(pid, signal.SIGKILL)
            _wait_for(stream, "peers_lost", 1)
            # Same name (identity "good-0"), a new nonce, another key: refused.
            thief = start_producer(port, root, "good", curve_args(keys, "thief"))
            _wait_for(stream, "refused_reconnects", 1)
            assert stream.stats()["peers_joined"] == 0
    finally:
        for process in (good, thief):
            if process is not None:
                _stop(process)
