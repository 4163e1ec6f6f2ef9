"""One producer fleet, many trainers (issue 26): ``h5feed produce --listen`` replicas and
trainers with ``fleet=``, all real processes and sockets (h5feed/producer/service/fleet.py,
h5feed/consumer/processes/fleet_announcer.py)."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from fleet_helpers import (
    ATTACH_TIMEOUT_S,
    SPEC,
    batches,
    exactly_once,
    finished,
    fleet_dataset,
    fleet_figures,
    lines,
    rss_kb,
    start_replica,
    start_trainer,
    wait_for,
)
from metrics_helpers import metrics_port_of, scrape, start_producer, stop
from ports import free_port

from h5feed.common.trust.curve import write_key_pair

pytestmark = pytest.mark.xdist_group("shared-fleet")  # several real process trees each

#: Every trainer's epoch ends within this (the slow one's is about 18 s alone).
EPOCH_TIMEOUT_S = 150.0


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, list[str]]:
    directory = tmp_path_factory.mktemp("fleet-data")
    return directory, fleet_dataset(directory)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts: every one still running is stopped at its end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def _all_gone(port: int) -> bool:
    figures = fleet_figures(port)
    return figures["attached"] == 0 and figures["worker_processes"] == 0 and not figures["stopping"]


def test_three_trainers_share_a_fleet_exactly_once_each_as_on_a_fleet_of_their_own(
    data: tuple[pathlib.Path, list[str]],
    tmp_path: pathlib.Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """Two replicas of 2 workers (the second started mid-epoch), three trainers with other
    seeds, clip lengths and files, one slow, and a fourth SIGKILLed mid-epoch: each of the
    three gets its epoch exactly once, from both replicas, byte for byte what it gets from a
    producer of its own; the killed one's workers are gone within the attach timeout."""
    root, files = data
    ports = [free_port(), free_port()]
    logs = [tmp_path / "replica-1.log", tmp_path / "replica-2.log"]
    processes.append(start_replica(ports[0], root, "r1", logs[0]))
    # (name, files, seed, clip_len, batch_size, step_s): 12 batches each, one slow.
    plans = [
        ("slow", files, 1, 4, 2, 1.5),
        ("short-clips", files[:4], 2, 2, 1, 1.0),
        ("other-files", files[4:], 3, 3, 1, 1.0),
    ]
    trainers = {}
    for name, subset, seed, clip_len, batch_size, step_s in plans:
        out = tmp_path / f"{name}.jsonl"
        port = free_port()
        processes.append(
            start_trainer(
                out,
                port,
                root,
                subset,
                ports,
                seed=seed,
                clip_len=clip_len,
                batch_size=batch_size,
                step_s=step_s,
                # Epochs of 12 batches, and a budget grown with the workers would have 8 of
                # them in flight from replica 1 before replica 2 joins: 2 leave the joiner a
                # share of each epoch to show (the trainers' steps, not the workers, set the
                # pace here).
                extra=["--max-inflight-batches", "2"],
            )
        )
        trainers[name] = (out, subset, seed, clip_len, batch_size)
    killed_out = tmp_path / "killed.jsonl"
    killed = start_trainer(killed_out, free_port(), root, files, ports, seed=4, step_s=1.0)
    processes.append(killed)
    all_outs = [*(t[0] for t in trainers.values()), killed_out]
    trainer_logs = [pathlib.Path(f"{out}.log") for out in all_outs]
    wait_for(
        "every trainer took a batch from replica 1",
        lambda: all(batches(out) for out in all_outs),
        60,
        [*logs, *trainer_logs],
    )
    processes.append(start_replica(ports[1], root, "r2", logs[1]))  # a replica added mid-epoch
    wait_for("the fourth trainer took 3 batches", lambda: len(batches(killed_out)) >= 3, 60)
    killed.send_signal(signal.SIGKILL)
    for name, (out, subset, *_) in trainers.items():
        last = wait_for(f"trainer {name} ended", lambda o=out: finished(o), EPOCH_TIMEOUT_S,
                        [*logs, pathlib.Path(f"{out}.log")])  # fmt: skip
        assert "done" in last, last
        exactly_once(out, subset, SPEC.videos_per_file)
        # The replica added mid-epoch joined this trainer's epoch and made some of it.
        stats = last["stats"]
        joined = [w for w in stats["workers"] if w["name"].startswith("r2-") and w["clips"]]
        assert joined, (name, [(w["name"], w["clips"]) for w in stats["workers"]])
        assert stats["producers"]["shared"]["serving"] == 2, stats["producers"]["shared"]
    # Every trainer left: each replica stops their workers within the attach timeout.
    for log in logs:
        port = metrics_port_of(log)
        wait_for(f"{log.name}: no trainer, no worker", lambda p=port: _all_gone(p),
                 ATTACH_TIMEOUT_S + 5 + 5, [log])  # fmt: skip
    # Byte for byte what a producer of its own gives (h5feed produce --connect, 2 workers).
    for name, (out, subset, seed, clip_len, batch_size) in trainers.items():
        own_out = tmp_path / f"{name}-own.jsonl"
        port = free_port()
        producer = start_producer(port, root, f"own-{name}", tmp_path / f"own-{name}.log")
        processes.append(producer)
        trainer = start_trainer(own_out, port, root, subset, seed=seed, clip_len=clip_len,
                                batch_size=batch_size)  # fmt: skip
        processes.append(trainer)
        wait_for(f"{name} on a producer of its own", lambda o=own_out: finished(o), 60)
        stop(producer)
        assert batches(own_out) == batches(out), name


def test_a_trainer_past_the_fleets_limit_is_refused_naming_it(
    data: tuple[pathlib.Path, list[str]],
    tmp_path: pathlib.Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    root, files = data
    fleet_port, log = free_port(), tmp_path / "replica.log"
    processes.append(start_replica(fleet_port, root, "r", log, workers=1,
                                   extra=["--max-trainers", "1"]))  # fmt: skip
    first_out, second_out = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    processes.append(start_trainer(first_out, free_port(), root, files, [fleet_port], epochs=0,
                                   step_s=0.2))  # fmt: skip
    wait_for("the first trainer is served", lambda: batches(first_out), 60, [log])
    processes.append(start_trainer(second_out, free_port(), root, files, [fleet_port]))
    # Refused at once, not after start_timeout_s (60 s): well within 30 s.
    last = wait_for("the second trainer ended", lambda: finished(second_out), 30, [log])
    assert "NoWorkersError" in last["error"], last
    assert "at most 1 trainers at once (h5feed produce --max-trainers)" in last["error"], last
    metrics_port = metrics_port_of(log)
    samples = scrape(metrics_port)
    assert samples["h5feed_fleet_refused_total"][0][1] >= 1
    assert samples["h5feed_fleet_trainers"][0][1] == 1
    assert fleet_figures(metrics_port)["trainers"][0]["running"] == 1
    # h5feed top shows the replica's trainers (its stats are the same endpoint's).
    result = subprocess.run(
        [sys.executable, "-m", "h5feed", "top", "--once", "--timeout", "5",
         f"127.0.0.1:{metrics_port}"],
        capture_output=True, text=True, timeout=30, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "trainers: 1 of at most 1 (refused " in result.stdout
    (trainer,) = fleet_figures(metrics_port)["trainers"]
    assert trainer["trainer"] in result.stdout


def test_twenty_trainers_killed_in_turn_leave_nothing_behind(
    data: tuple[pathlib.Path, list[str]],
    tmp_path: pathlib.Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """20 cycles of a trainer that attaches (the first and last also take a batch) and is
    SIGKILLed: within the attach
    timeout (+5 s) of the last, no trainer, worker process or stopping group is left, and the
    replica's RSS grew less than 10 MB over the cycles."""
    root, files = data
    fleet_port, log = free_port(), tmp_path / "replica.log"
    replica = start_replica(fleet_port, root, "r", log, workers=1)
    processes.append(replica)
    metrics_port = metrics_port_of(log)
    rss = []
    for cycle in range(20):
        out, port = tmp_path / f"cycle-{cycle}.jsonl", free_port()
        trainer = start_trainer(out, port, root, files[:1], [fleet_port], epochs=0,
                                step_s=0.05)  # fmt: skip
        processes.append(trainer)
        if cycle in (0, 19):  # served: it took a batch
            wait_for(f"cycle {cycle}: a batch", lambda o=out: batches(o), 60, [log])
        else:  # attached: the replica started its workers (killed as they start, or later)
            wait_for(
                f"cycle {cycle}: attached",
                lambda p=port: any(
                    t["trainer"].endswith(f":{p}") and t["running"]
                    for t in fleet_figures(metrics_port)["trainers"]
                ),
                60,
                [log],
            )
        trainer.send_signal(signal.SIGKILL)
        trainer.wait(10)
        if cycle in (0, 19):
            wait_for(f"cycle {cycle}: all gone", lambda: _all_gone(metrics_port),
                     ATTACH_TIMEOUT_S + 5, [log])  # fmt: skip
            rss.append(rss_kb(replica.pid))
    grown_mb = (rss[1] - rss[0]) / 1024
    print(f"replica RSS after cycle 1: {rss[0] / 1024:.1f} MB, after 20: {rss[1] / 1024:.1f} MB "
          f"({grown_mb:+.1f} MB)")  # fmt: skip
    assert grown_mb < 10, rss
    started = len([line for line in log.read_text().splitlines() if " attached: " in line])
    assert started == 20


def test_shares_of_a_replicas_cpu_follow_demand(
    data: tuple[pathlib.Path, list[str]],
    tmp_path: pathlib.Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """Shares in the replica's own figures: two hungry trainers get 0.5 ± 0.1 each of its
    workers' CPU seconds and of their busy seconds; with one slowed to an eighth of the rate a
    hungry one had, the other gets at least 0.8 of the CPU seconds (its busy share is
    reported: busy wall time also counts a slowed trainer's units waiting for the CPU the
    other holds). Rates are reported, not gated (trainers and workers share 2 cores).

    An eighth, not a quarter: the slowed pace is fixed from the first phase's rate, and the
    hungry trainer's rate in the second phase moves with the machine's load. At a quarter the
    ideal share is about 0.89 (twice the rate against a quarter), and a loaded run measured
    0.79 (`pytest -n 3` on 2 cores); at an eighth it is about 0.94, and the test still fails
    if shares do not follow demand (an even split gives 0.5)."""
    root, files = data
    fleet_port, log = free_port(), tmp_path / "replica.log"
    processes.append(start_replica(fleet_port, root, "r", log, workers=2))
    metrics_port = metrics_port_of(log)

    def shares(
        outs: list[pathlib.Path], ports: list[int], window_s: float
    ) -> tuple[list[float], list[float], list[float]]:
        """Each trainer's share of the CPU seconds and of the busy seconds of the replica's
        workers over ``window_s`` (a trainer is known by its listen port), and its batches a
        second."""
        wait_for("both served", lambda: all(len(batches(o)) >= 5 for o in outs), 60, [log])
        wait_for("both attached", lambda: len(fleet_figures(metrics_port)["trainers"]) == 2, 10)

        def sample() -> tuple[list[tuple[float, float]], list[int]]:
            by_port = {
                int(t["trainer"].rsplit(":", 1)[1]): (t["cpu_s"], t["busy_s"])
                for t in fleet_figures(metrics_port)["trainers"]
            }
            return [by_port[p] for p in ports], [len(batches(o)) for o in outs]

        (used0, taken0), start = sample(), time.monotonic()
        time.sleep(window_s)
        (used1, taken1), elapsed = sample(), time.monotonic() - start
        cpu = [b[0] - a[0] for a, b in zip(used0, used1, strict=True)]
        busy = [b[1] - a[1] for a, b in zip(used0, used1, strict=True)]
        rates = [(b - a) / elapsed for a, b in zip(taken0, taken1, strict=True)]
        return [c / sum(cpu) for c in cpu], [b / sum(busy) for b in busy], rates

    # Units of 8 clips of 8 frames: the workers' CPU goes to clips, not to per-message costs.
    units = {"clip_len": 8, "batch_size": 8}
    hungry = [tmp_path / "hungry-a.jsonl", tmp_path / "hungry-b.jsonl"]
    ports = [free_port(), free_port()]
    pair = [
        start_trainer(out, port, root, files, [fleet_port], epochs=0, **units)
        for out, port in zip(hungry, ports, strict=True)
    ]
    processes.extend(pair)
    even, busy, rates = shares(hungry, ports, 8.0)
    print(f"two hungry trainers: CPU shares {even[0]:.2f} / {even[1]:.2f}, busy shares "
          f"{busy[0]:.2f} / {busy[1]:.2f}, {rates[0]:.1f} / {rates[1]:.1f} batches/s")  # fmt: skip
    assert all(abs(share - 0.5) <= 0.1 for share in even), even
    assert all(abs(share - 0.5) <= 0.1 for share in busy), busy
    for trainer in pair:
        trainer.kill()
        trainer.wait(10)
    wait_for("the pair left", lambda: _all_gone(metrics_port), ATTACH_TIMEOUT_S + 5, [log])
    # One hungry trainer, one at an eighth of the rate a hungry one had.
    step_s = 8 / (sum(rates) / 2)
    outs = [tmp_path / "fast.jsonl", tmp_path / "slowed.jsonl"]
    ports = [free_port(), free_port()]
    processes.append(start_trainer(outs[0], ports[0], root, files, [fleet_port], epochs=0,
                                   **units))  # fmt: skip
    processes.append(start_trainer(outs[1], ports[1], root, files, [fleet_port], epochs=0,
                                   step_s=step_s, **units))  # fmt: skip
    uneven, busy, rates = shares(outs, ports, 8.0)
    print(f"one slowed to {step_s:.2f} s a batch: CPU shares {uneven[0]:.2f} / {uneven[1]:.2f}, "
          f"busy shares {busy[0]:.2f} / {busy[1]:.2f}, "
          f"{rates[0]:.1f} / {rates[1]:.1f} batches/s")  # fmt: skip
    assert uneven[0] >= 0.8, uneven
    assert lines(outs[1]) and rates[1] < rates[0]


def test_with_keys_only_listed_trainers_attach_and_the_workers_check_the_trainer(
    data: tuple[pathlib.Path, list[str]],
    tmp_path: pathlib.Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """``--key`` and ``--trainer-keys``: a listed trainer (``fleet_key=``, ``curve_key=``) is
    served its epoch exactly once over CURVE both ways; an unlisted one never gets in (its
    connections refused and counted) and its iteration ends when ``start_timeout_s`` runs out."""
    root, files = data
    keys, trainers, authorized = tmp_path / "keys", tmp_path / "trainers", tmp_path / "authorized"
    for directory in (keys, trainers, authorized):
        directory.mkdir()
    fleet_public, fleet_secret = write_key_pair(str(keys), "fleet")
    trainer_public, trainer_secret = write_key_pair(str(keys), "trainer")
    _, intruder_secret = write_key_pair(str(keys), "intruder")
    shutil.copy(trainer_public, trainers)
    shutil.copy(fleet_public, authorized)  # the trainer admits the fleet's workers
    fleet_port, log = free_port(), tmp_path / "replica.log"
    keys_flags = ["--key", fleet_secret, "--trainer-keys", str(trainers)]
    processes.append(start_replica(fleet_port, root, "r", log, workers=2, extra=keys_flags))
    keyed = ["--fleet-key", fleet_public, "--curve-authorized", str(authorized)]
    listed_out, intruder_out = tmp_path / "listed.jsonl", tmp_path / "intruder.jsonl"
    processes.append(start_trainer(listed_out, free_port(), root, files[:2], [fleet_port],
                                   extra=[*keyed, "--curve-key", trainer_secret]))  # fmt: skip
    processes.append(start_trainer(intruder_out, free_port(), root, files[:2], [fleet_port],
                                   extra=[*keyed, "--curve-key", intruder_secret,
                                          "--start-timeout-s", "4"]))  # fmt: skip
    last = wait_for("the listed trainer ended", lambda: finished(listed_out), 60, [log])
    assert "done" in last, last
    exactly_once(listed_out, files[:2], SPEC.videos_per_file)
    last = wait_for("the intruder ended", lambda: finished(intruder_out), 60, [log])
    assert "no producer connected" in last["error"], last
    figures = fleet_figures(metrics_port_of(log))
    assert figures["refused"] >= 1
    assert "CURVE clients: refused (key not listed)" in log.read_text()
