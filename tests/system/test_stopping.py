"""A producer asked to stop (SIGTERM) mid-epoch while it holds units, with real `h5feed produce`
processes serving a trainer over TCP: it finishes and sends the unit in hand, hands back the
units it did not start (the trainer counts them in ``units_handed_back`` and makes them
elsewhere, once), and exits 0 — nothing already decoded is made again (``units_remade`` 0).
One that does not finish within its stop wait is killed by its service and its units are made
again (``units_remade``): the epoch is still exactly once.

The unit in hand is held by ``sample_transforms:holds_until_stopped``: the first clip any
worker makes waits for that worker's SIGTERM (then works ``after_stop_s`` more), so the test
knows which producer holds a started unit, and stops it only once it also holds unstarted
ones."""

from __future__ import annotations

import collections
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from paths import SUPPORT
from ports import free_port

import h5feed

TESTS = SUPPORT
CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}
_WAIT_S = 60.0  # the longest any awaited event may take (a loaded 2-core machine)


def wait_for(what: str, done: Callable[[], bool], timeout_s: float = _WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout_s:g} s for {what}"
        time.sleep(0.05)


def start_producer(
    port: int, data_root: pathlib.Path, name: str, extra: Sequence[str] = ()
) -> subprocess.Popen[str]:
    """`h5feed produce` with one worker that may import this directory's sample transforms
    (and logs at INFO: the worker says what it sent after the stop request)."""
    env = {
        **os.environ,
        "H5FEED_CONNECT": f"tcp://127.0.0.1:{port}",
        "H5FEED_LOG_LEVEL": "INFO",
        "PYTHONPATH": os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "h5feed", "produce", "--data-root", str(data_root),
         "--workers", "1", "--name", name, "--allow-code", "sample_transforms:*", *extra],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


class Fleet:
    """Two producers, ``p0`` and ``p1``, with the same stop wait."""

    def __init__(self, port: int, root: pathlib.Path, stop_wait_s: float) -> None:
        extra = ["--stop-wait-s", f"{stop_wait_s:g}"]
        self.processes = {name: start_producer(port, root, name, extra) for name in ("p0", "p1")}

    def by_pid(self, pid: int) -> tuple[str, subprocess.Popen[str]]:
        (found,) = [(n, p) for n, p in self.processes.items() if p.pid == pid]
        return found

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
            process.communicate(timeout=10)


@pytest.fixture()
def port() -> int:
    return free_port()


@pytest.fixture()
def fleet_of(port: int, small_dataset: list[pathlib.Path]) -> Iterator[Callable[[float], Fleet]]:
    made: list[Fleet] = []

    def make(stop_wait_s: float) -> Fleet:
        made.append(Fleet(port, small_dataset[0].parent, stop_wait_s))
        return made[-1]

    try:
        yield make
    finally:
        for fleet in made:
            fleet.close()


def stop_mid_epoch(
    port: int,
    dataset: list[pathlib.Path],
    fleet: Fleet,
    marker: pathlib.Path,
    after_stop_s: float,
) -> tuple[collections.Counter[tuple[int, int]], dict[str, Any], subprocess.Popen[str], int]:
    """One epoch; the producer whose worker holds the first clip gets SIGTERM once that worker
    also holds another unit. (samples seen, stats at the end, the stopped producer, units its
    worker held when the signal was sent)."""
    feed = h5feed.batches(
        [p.name for p in dataset],
        data_root=str(dataset[0].parent),
        workers=0,
        listen=f"tcp://127.0.0.1:{port}",
        **CLIP,  # type: ignore[arg-type]
        batch_size=4,
        max_inflight_batches=6,
        seed=5,
        start_timeout_s=_WAIT_S,
        join_grace_s=3.0,
        transform="sample_transforms:holds_until_stopped",
        transform_args={"marker": str(marker), "after_stop_s": after_stop_s},
    )
    seen: collections.Counter[tuple[int, int]] = collections.Counter()
    with feed.stream() as stream:
        wait_for("a worker to hold the first clip", marker.exists)
        name, victim = fleet.by_pid(int(marker.read_text()))
        held: list[int] = [0]

        def victim_holds_more() -> bool:
            workers = stream.stats()["workers"]
            held[0] = sum(w["outstanding_units"] for w in workers if w["name"] == f"{name}-0")
            return held[0] >= 2  # the one in hand, and at least one not started

        wait_for(f"{name} to hold a unit it has not started", victim_holds_more)
        victim.send_signal(signal.SIGTERM)
        for batch in stream:
            seen.update(zip(batch["epoch"].tolist(), batch["sample"].tolist(), strict=True))
        stats = stream.stats()
    return seen, stats, victim, held[0]


def test_a_stopped_producer_sends_the_unit_in_hand_and_hands_back_the_rest(
    port: int,
    small_dataset: list[pathlib.Path],
    fleet_of: Callable[[float], Fleet],
    tmp_path: pathlib.Path,
) -> None:
    fleet = fleet_of(30.0)  # ample: the held unit takes 0.2 s more after the signal
    marker = tmp_path / "held"
    seen, stats, victim, held = stop_mid_epoch(port, small_dataset, fleet, marker, 0.2)
    assert seen == collections.Counter({(0, s): 1 for s in range(24)}), "not exactly once"
    assert victim.wait(_WAIT_S) == 0
    _out, errors = victim.communicate(timeout=10)
    assert (marker.parent / "held.finished").exists()  # the unit in hand was finished ...
    assert "asked to stop: sent the 1 unit(s) it had started, then BYE" in errors, errors
    assert stats["units_remade"] == 0, stats  # ... delivered, and not made again
    assert stats["dropped_parts"] == 0, stats  # nor made twice and dropped
    # Every unit it held but the one in hand went back unmade (more may have been sent to it
    # between the count and the signal).
    assert stats["units_handed_back"] >= held - 1 >= 1, (held, stats)
    assert stats["reassigned_units"] == stats["units_handed_back"] + stats["units_remade"]
    assert stats["peers_lost"] == 1 and "did not finish" not in errors
    print(f"held {held}; handed back {stats['units_handed_back']}, re-made 0")


def test_a_producer_that_overruns_its_stop_wait_is_killed_and_its_units_made_again(
    port: int,
    small_dataset: list[pathlib.Path],
    fleet_of: Callable[[float], Fleet],
    tmp_path: pathlib.Path,
) -> None:
    fleet = fleet_of(1.0)  # the held unit needs 120 s more: far past the stop wait
    marker = tmp_path / "held"
    seen, stats, victim, held = stop_mid_epoch(port, small_dataset, fleet, marker, 120.0)
    assert seen == collections.Counter({(0, s): 1 for s in range(24)}), "not exactly once"
    assert victim.wait(_WAIT_S) == 0  # the service itself stopped in order
    _out, errors = victim.communicate(timeout=10)
    assert "did not finish its unit within the stop wait (1 s): killed" in errors, errors
    assert not (marker.parent / "held.finished").exists()
    assert "then BYE" not in errors  # no BYE: nothing was claimed as handed back
    assert stats["units_handed_back"] == 0, stats
    assert stats["units_remade"] >= held >= 2, (held, stats)  # all it held, made elsewhere
    assert stats["reassigned_units"] == stats["units_remade"]
    print(f"held {held}; re-made {stats['units_remade']}")


def test_the_stop_wait_is_an_option_of_the_service_and_its_workers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from h5feed.cli import build_parser
    from h5feed.common.worker_settings import DEFAULT_STOP_WAIT_S, WorkerSettings
    from h5feed.producer.service.server import service_worker

    monkeypatch.setenv("H5FEED_CONNECT", "tcp://127.0.0.1:5555")
    assert build_parser().parse_args(["produce"]).stop_wait_s is None  # the default: 20 s
    assert build_parser().parse_args(["produce", "--stop-wait-s", "7.5"]).stop_wait_s == 7.5
    monkeypatch.setenv("H5FEED_STOP_WAIT_S", "45")
    assert build_parser().parse_args(["produce"]).stop_wait_s == 45.0
    for bad in ("0", "-1", "nan", "inf", "soon"):
        monkeypatch.setenv("H5FEED_STOP_WAIT_S", bad)
        with pytest.raises(SystemExit):
            build_parser().parse_args(["produce"])
        assert "--stop-wait-s" in capsys.readouterr().err
    # The service's workers get it on their command line (the default is left off).
    command = service_worker("ipc:///x", "w", stop_wait_s=7.5).command()
    argv = command[command.index("--connect") :]
    assert WorkerSettings.from_argv(argv).process.stop_wait_s == 7.5
    default = service_worker("ipc:///x", "w").command()
    assert "--stop-wait-s" not in default and DEFAULT_STOP_WAIT_S == 20.0


def test_a_refused_producer_service_exits_with_status_2_at_once(port: int) -> None:
    """What a rolling update's rollback needs (deploy/swarm.yml ``failure_action: rollback``):
    a producer the trainer refuses (BYE ``refused: ...``, as for another protocol version)
    ends with a non-zero status within seconds — a failed task inside the update's
    ``monitor`` — instead of restarting its workers (which would look healthy)."""
    import zmq

    from h5feed.common.protocol import messages

    context = zmq.Context()
    trainer = context.socket(zmq.ROUTER)  # a trainer that refuses whoever says hello
    trainer.setsockopt(zmq.LINGER, 0)
    trainer.bind(f"tcp://127.0.0.1:{port}")
    producer = subprocess.Popen(
        [sys.executable, "-m", "h5feed", "produce", "--connect", f"tcp://127.0.0.1:{port}",
         "--workers", "2", "--name", "old"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert trainer.poll(_WAIT_S * 1000), "no hello from the producer"
        identity, *frames = trainer.recv_multipart()
        assert isinstance(messages.decode(frames), messages.Hello)
        refusal = messages.Bye.refusing("the trainer speaks another protocol version")
        trainer.send_multipart([identity, *messages.encode(refusal)])
        assert producer.wait(_WAIT_S) == 2
        _out, errors = producer.communicate(timeout=10)
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.communicate(timeout=10)
        trainer.close()
        context.term()
    assert f"worker {identity.decode()} was refused; stopping" in errors, errors
    assert "restarting" not in errors, errors
