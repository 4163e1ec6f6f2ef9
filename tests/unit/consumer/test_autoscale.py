"""``workers="auto"``: the controller on given verdicts with an injected clock (grow, shrink,
hysteresis, 10 s spacing, the cap, a generator never grows), its driver on fake workers, the
option's validation, and on real processes: every epoch exactly once while it grows."""

from __future__ import annotations

import collections
import itertools
import json
import os
import pathlib
from typing import Any, ClassVar

import pytest
from conftest import wait_until_gone
from paths import SUPPORT

import h5feed
import h5feed.consumer.stream as stream_module
from h5feed.common.system.cpus import available_cpus
from h5feed.consumer.config.groups import FeedOptions, ProcessOptions
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.processes.autoscale import (
    GROW_AFTER,
    MIN_SPACING_S,
    SHRINK_AFTER,
    Autoscaler,
    AutoWorkers,
    Reading,
)
from h5feed.consumer.processes.local_workers import LocalWorkers, local_worker
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

BOUND = Reading(wait_share=0.6, idle_workers=0)  # input-bound
IDLE = Reading(wait_share=0.0, idle_workers=1)  # nothing waits, a worker has nothing
MIDDLE = Reading(wait_share=0.05, idle_workers=1)  # between the thresholds


def run(
    controller: Autoscaler,
    readings: list[Reading],
    current: int,
    start: float = 0.0,
    step_s: float = 1.0,
    can_grow: bool = True,
) -> tuple[list[int], float]:
    """Feed one reading per ``step_s`` seconds; the counts decided, and the next time."""
    counts = []
    now = start
    for reading in readings:
        current = controller.decide(now, reading, current, can_grow)
        counts.append(current)
        now += step_s
    return counts, now


def test_grows_after_a_streak_of_input_bound_checks_only() -> None:
    controller = Autoscaler(cap=4)
    counts, _ = run(controller, [BOUND] * GROW_AFTER, current=1)
    assert counts == [1] * (GROW_AFTER - 1) + [2]
    assert controller.changes == [(GROW_AFTER - 1.0, 1, 2)]


def test_no_growth_while_a_worker_has_nothing_to_do() -> None:
    """Input-bound with an idle worker: another would not help (e.g. fewer files than
    workers), so nothing grows."""
    controller = Autoscaler(cap=4)
    counts, _ = run(controller, [Reading(wait_share=0.9, idle_workers=1)] * 30, current=2)
    assert set(counts) == {2} and controller.changes == []


def test_a_broken_streak_starts_over() -> None:
    """Hysteresis: a check between the thresholds (or an idle one) resets the grow streak."""
    controller = Autoscaler(cap=4)
    readings = [BOUND] * (GROW_AFTER - 1) + [MIDDLE] + [BOUND] * (GROW_AFTER - 1)
    counts, now = run(controller, readings, current=1)
    assert set(counts) == {1}
    counts, _ = run(controller, [BOUND], current=1, start=now)
    assert counts == [2]


def test_shrinks_only_after_a_longer_idle_streak_and_a_busy_check_resets_it() -> None:
    controller = Autoscaler(cap=4)
    counts, now = run(controller, [IDLE] * (SHRINK_AFTER - 1), current=3)
    assert set(counts) == {3}
    # a low share with no idle worker is no reason to shrink: the streak starts over
    counts, now = run(controller, [Reading(0.0, idle_workers=0)], current=3, start=now)
    counts, now = run(controller, [IDLE] * (SHRINK_AFTER - 1), current=3, start=now)
    assert set(counts) == {3}
    counts, _ = run(controller, [IDLE], current=3, start=now)
    assert counts == [2]


def test_nothing_changes_while_a_started_worker_has_not_joined() -> None:
    controller = Autoscaler(cap=4)
    joining = Reading(wait_share=0.6, idle_workers=0, connected=1)
    counts, now = run(controller, [joining] * 30, current=2)
    assert set(counts) == {2} and controller.changes == []
    counts, _ = run(controller, [Reading(0.6, 0, connected=2)], current=2, start=now)
    assert counts == [3]  # the streak went on meanwhile: the change comes once it joined


def test_a_share_between_thresholds_changes_nothing_ever() -> None:
    controller = Autoscaler(cap=4)
    counts, _ = run(controller, [MIDDLE] * 100, current=2)
    assert set(counts) == {2} and controller.changes == []


def test_at_most_one_change_per_10_s() -> None:
    controller = Autoscaler(cap=8)
    counts, _ = run(controller, [BOUND] * 60, current=1)
    times = [at for at, _old, _new in controller.changes]
    assert len(times) >= 4
    assert all(b - a >= MIN_SPACING_S for a, b in itertools.pairwise(times))
    # a change needs a fresh streak after the last one, and the spacing: every 10 s here
    assert [b - a for a, b in itertools.pairwise(times)] == [MIN_SPACING_S] * (len(times) - 1)
    assert counts[-1] == 1 + len(times)


def test_the_spacing_holds_from_grow_to_shrink_too() -> None:
    controller = Autoscaler(cap=4)
    counts, now = run(controller, [BOUND] * GROW_AFTER, current=1)
    assert counts[-1] == 2
    grown_at = controller.changes[-1][0]
    # idle from now on: the shrink streak would be complete after SHRINK_AFTER checks
    counts, _ = run(controller, [IDLE] * (SHRINK_AFTER + 5), current=2, start=now)
    shrunk_at = controller.changes[-1][0]
    assert controller.changes[-1][1:] == (2, 1)
    assert shrunk_at - grown_at >= MIN_SPACING_S


def test_checks_count_once_per_interval_however_often_it_is_asked() -> None:
    controller = Autoscaler(cap=4)
    # 100 calls within 0.99 s are one check
    counts, _now = run(controller, [BOUND] * 100, current=1, step_s=0.0099)
    assert set(counts) == {1}
    counts, _ = run(controller, [BOUND] * (GROW_AFTER - 1), current=1, start=1.0)
    assert counts[-1] == 2


def test_never_above_the_cap_nor_under_one() -> None:
    controller = Autoscaler(cap=2)
    counts, _now = run(controller, [BOUND] * 100, current=1)
    assert max(counts) == 2 and controller.changes == [(GROW_AFTER - 1.0, 1, 2)]
    controller = Autoscaler(cap=2)
    counts, _ = run(controller, [IDLE] * 100, current=1)
    assert set(counts) == {1} and controller.changes == []
    with pytest.raises(ValueError, match="cap must be >= 1"):
        Autoscaler(cap=0)


def test_a_generator_source_never_grows_mid_iteration() -> None:
    controller = Autoscaler(cap=4)
    counts, now = run(controller, [BOUND] * 50, current=1, can_grow=False)
    assert set(counts) == {1} and controller.changes == []
    # it may still shrink (a retired worker hands its shard back as a lost one does)
    counts, _ = run(controller, [IDLE] * SHRINK_AFTER, current=2, start=now, can_grow=False)
    assert counts[-1] == 1


class FakeWorkers:
    """Names only: what :class:`AutoWorkers` asks of the local workers."""

    def __init__(self, names: list[str], running: int) -> None:
        self.names, self.count = names, running
        self.reaped = 0

    @property
    def running(self) -> list[str]:
        return self.names[: self.count]

    def grow(self) -> str | None:
        if self.count >= len(self.names):
            return None
        self.count += 1
        return self.names[self.count - 1]

    def retire(self) -> str | None:
        if self.count <= 1:
            return None
        self.count -= 1
        return self.names[self.count]

    def reap(self) -> None:
        self.reaped += 1


def local_peer(name: str, outstanding: int) -> Peer:
    peer = Peer(name.encode(), name, 1, "localhost")
    peer.local = True
    for unit in range(outstanding):
        peer.outstanding[unit] = 0.0
    return peer


def test_the_driver_starts_and_retires_workers_on_the_controller_s_word() -> None:
    workers = FakeWorkers(["w-0", "w-1", "w-2"], running=1)
    shares: collections.deque[float | None] = collections.deque([None] * 5 + [0.9] * GROW_AFTER)
    lines: list[str] = []
    driver = AutoWorkers(
        Autoscaler(cap=3), workers, lambda: shares.popleft(), lambda: True, lines.append
    )
    busy = [local_peer("w-0", outstanding=2)]
    for now in range(5 + GROW_AFTER):  # no figures before the first batch: no decision
        driver.step(float(now), busy)
    assert workers.running == ["w-0", "w-1"] and driver.grown == 1
    assert "started worker w-1" in lines[-1]
    # idle: w-1 holds nothing; retired after the idle streak, spaced from the growth
    shares.extend([0.0] * (SHRINK_AFTER + 10))
    peers = [local_peer("w-0", outstanding=1), local_peer("w-1", outstanding=0)]
    for now in range(5 + GROW_AFTER, 5 + GROW_AFTER + SHRINK_AFTER + 10):
        driver.step(float(now), peers)
    assert workers.running == ["w-0"] and driver.retired == 1
    assert "retiring worker w-1" in lines[-1]


def test_workers_auto_is_validated() -> None:
    assert ProcessOptions(workers="auto").auto
    assert ProcessOptions(workers="auto").start_workers == 1
    assert ProcessOptions(workers="auto").inflight_batches == max(4, 2 * available_cpus())
    assert not ProcessOptions(workers=3).auto and ProcessOptions(workers=3).start_workers == 3
    for bad in ("Auto", "2", "", 2.0, True, None):
        with pytest.raises(ValueError, match=r'workers must be >= 1, "auto"'):
            ProcessOptions(workers=bad)  # type: ignore[arg-type]
    assert FeedOptions.of({"workers": "auto"}).processes.auto


# -- real processes ------------------------------------------------------------------------

CLIP = {"clip_len": 2, "stride": 1, "resize": (24, 32)}
VIDEOS = 60
EPOCHS = 2


@pytest.fixture()
def importable_transforms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers import ``sample_transforms`` by path: put tests/ on their PYTHONPATH."""
    tests = str(SUPPORT)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (tests, os.environ.get("PYTHONPATH")) if p)
    )


@pytest.fixture(scope="module")
def tiny_videos(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """4 files of tiny videos: a worker that joins takes files from the others (an HDF5
    feed's work moves by file)."""
    directory = tmp_path_factory.mktemp("auto")
    spec = SampleSpec(
        files=4, videos_per_file=VIDEOS // 4, min_frames=3, max_frames=5, height=24, width=32,
        seed=1,
    )  # fmt: skip
    make_sample_dataset(directory, spec)
    return directory


def auto_epochs(directory: pathlib.Path) -> tuple[dict[int, list[int]], dict[str, Any], list[int]]:
    """``EPOCHS`` epochs with ``workers="auto"`` and a slow transform, taken as fast as they
    come (input-bound): the samples of each epoch, the final stats, every worker pid seen."""
    feed = h5feed.batches(
        [directory], **CLIP, batch_size=2, workers="auto", epochs=EPOCHS, seed=3,
        transform="sample_transforms:slow", start_timeout_s=30, unit_timeout_s=30,
    )  # fmt: skip
    samples: dict[int, list[int]] = collections.defaultdict(list)
    pids: set[int] = set()
    with feed.stream() as stream:
        for batch in stream:
            for epoch, sample in zip(batch["epoch"], batch["sample"], strict=True):
                samples[int(epoch)].append(int(sample))
            pids |= set(stream.worker_pids)
        stats = stream.stats()
    return samples, stats, sorted(pids)


@pytest.mark.usefixtures("importable_transforms")
def test_auto_grows_when_input_bound_and_every_epoch_arrives_once(
    tiny_videos: pathlib.Path,
) -> None:
    """1 worker at 0.05 s a clip: ~3 s an epoch, the trainer waits nearly all the time. The
    controller grows after 3 checks (one a second) when the cores allow it; no speed is
    asserted."""
    samples, stats, pids = auto_epochs(tiny_videos)
    assert {e: sorted(s) for e, s in samples.items()} == {
        e: list(range(VIDEOS)) for e in range(EPOCHS)
    }
    assert stats["workers_replaced"] == 0 and stats["peers_lost"] == 0
    if available_cpus() >= 2:
        assert stats["peers_joined"] >= 1 and len(pids) >= 2
        assert sum(worker["clips"] > 0 for worker in stats["workers"]) >= 2  # it took work
    else:  # never above the cores: one core, one worker
        assert stats["peers_joined"] == 0 and len(pids) == 1
    assert wait_until_gone(pids) == []


class Scripted(Autoscaler):
    """The controller's word given in advance: grow at the first check after the first
    batch, retire at the fifth (checks every 0.2 s), whatever the figures: the path from a
    decision to the workers is the one ``workers="auto"`` takes."""

    made: ClassVar[list[tuple[int, int]]] = []  # (old, new) of every change, across instances

    def __init__(self, cap: int) -> None:
        super().__init__(max(cap, 2), check_every_s=0.2)
        self.checks = 0

    def decide(self, now: float, reading: Reading, current: int, can_grow: bool = True) -> int:
        if not self.due(now):
            return current
        self._next_check = now + 0.2
        self.checks += 1
        # the grown worker joined and works (it holds a unit: it owns files to hand back)
        joined = reading.connected == current and reading.idle_workers == 0
        if self.checks == 1:
            target = current + 1
        elif self.checks >= 5 and joined and Scripted.made == [(1, 2)]:
            target = current - 1
        else:
            target = current
        if target != current:
            Scripted.made.append((current, target))
        return target


@pytest.mark.usefixtures("importable_transforms")
def test_a_retired_worker_hands_its_units_back_and_every_epoch_arrives_once(
    tiny_videos: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Grow then retire, mid-epoch, on real processes: the retired worker (SIGTERM) sends
    the unit in hand and hands the rest back with its BYE; nothing is lost, nothing is taken
    twice, and it is never replaced."""
    Scripted.made = []
    monkeypatch.setattr(stream_module, "Autoscaler", Scripted)
    samples, stats, pids = auto_epochs(tiny_videos)
    assert Scripted.made == [(1, 2), (2, 1)]  # both happened, in the iteration
    assert {e: sorted(s) for e, s in samples.items()} == {
        e: list(range(VIDEOS)) for e in range(EPOCHS)
    }
    assert stats["peers_joined"] == 1 and stats["peers_lost"] == 1
    assert stats["workers_replaced"] == 0  # retired, not replaced
    assert len(pids) == 2
    assert wait_until_gone(pids) == []


def test_bench_auto_reports_every_configuration(tmp_path: pathlib.Path) -> None:
    """``h5feed bench auto``: behaviour only (each configuration measured and written), no
    speed judged."""
    from h5feed.cli import main

    out = tmp_path / "auto.json"
    argv = ["--files", "1", "--videos-per-file", "4", "--epochs", "2", "--workers", "1,auto"]
    assert main(["bench", "auto", *argv, "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert set(results["summary"]) == {"1", "auto"}
    for row in results["summary"].values():
        assert row["clips_per_s"] > 0 and 0 <= row["wait_share"] <= 1
        assert 1 <= row["workers_at_end"] <= max(1, results["cores"])
    assert results["summary"]["1"]["workers_started"] == 0


def test_local_workers_grow_retire_and_never_replace_a_retired_one(tmp_path: pathlib.Path) -> None:
    """Real processes, no consumer: the reserved names, growth up to them, retirement from
    the last (never under one), a retired worker killed on demand and never an exit to
    replace, and every process reaped by stop()."""
    workers = LocalWorkers(1, local_worker(f"ipc://{tmp_path}/nobody.sock", "t"), reserve=3)
    seen: list[int] = []
    try:
        assert workers.names == ["t-0", "t-1", "t-2"] and workers.running == ["t-0"]
        assert (workers.grow(), workers.grow(), workers.grow()) == ("t-1", "t-2", None)
        seen = list(workers.pids)
        assert len(set(seen)) == 3 and workers.running == ["t-0", "t-1", "t-2"]
        assert workers.retire() == "t-2"
        assert seen[2] not in workers.pids and seen[2] in workers.retired
        workers.kill_retired(seen[2])  # its units move now: it must never write again
        assert wait_until_gone([seen[2]], timeout_s=5) == []
        assert workers.exited() == []  # a retired worker is no exit to replace
        assert workers.retire() == "t-1"
        assert workers.retire() is None and workers.running == ["t-0"]
    finally:
        workers.stop(grace_s=0)
    assert wait_until_gone(seen) == []
