"""Trainers sharing a fleet cannot take each other's workers, and a replica holds what it
promises (issue 38 items 2 and 3): fronts in this process on real sockets, with real worker
processes where their lifetimes matter (h5feed/producer/service/fleet.py, connection_guard.py,
worker_group.py, restarts.py)."""

from __future__ import annotations

import logging
import os
import pathlib
import socket
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from conftest import process_alive
from fleet_helpers import wait_for
from stepped_fronts import SteppedFront

from h5feed.common.trust.curve import KeyPair, load_public, write_key_pair
from h5feed.common.worker_settings import WorkerSettings
from h5feed.consumer.processes import fleet_announcer as announcing
from h5feed.consumer.processes.fleet_announcer import Announcer
from h5feed.producer.service.connection_guard import CONNECTIONS_PER_TRAINER, SPARE_CONNECTIONS
from h5feed.producer.service.fleet import SettingsFor
from h5feed.producer.service.restarts import Restarts
from h5feed.producer.service.server import _write_health, check_health
from h5feed.producer.service.worker_group import WorkerGroup

_LOG = logging.getLogger("h5feed.producer")
#: A worker that outlives SIGTERM (a unit that takes long to finish): killed after the wait.
_STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"


class _Command:
    """Stands for a worker's settings: what the group runs is only its command."""

    def __init__(self, *argv: str) -> None:
        self._argv = list(argv)

    def command(self) -> list[str]:
        return self._argv


def _runs(*argv: str) -> SettingsFor:
    def settings_for(worker: str, stats: str, endpoint: str, key: str | None) -> WorkerSettings:
        return cast(WorkerSettings, _Command(*argv))

    return settings_for


@pytest.fixture
def fronts(tmp_path: pathlib.Path) -> Iterator[Callable[..., SteppedFront]]:
    made: list[SteppedFront] = []
    announcers: list[Announcer] = []

    def make(workers: int = 0, **kwargs: Any) -> SteppedFront:
        settings_for = kwargs.pop("settings_for", _runs(sys.executable, "-c", _STUBBORN))
        made.append(SteppedFront(tmp_path, workers, settings_for, os.environ, _LOG, **kwargs))
        return made[-1]

    make.announcers = announcers  # type: ignore[attr-defined]
    yield make
    for announcer in announcers:
        announcer.close()
    for front in made:
        front.close()


def test_a_port_attached_under_one_key_is_refused_to_another_until_the_attach_timeout(
    fronts: Callable[..., SteppedFront], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trainer B names trainer A's port (one host: one address) under its own key: B is
    refused, named, and counted; A keeps its group, the same one. Once A stops attaching,
    the port is B's after the attach timeout. (The old front stopped A's group and started
    one for B at B's first ATTACH: B's refusal never came.)"""
    monkeypatch.setattr(announcing, "ATTACH_EVERY_S", 0.1)
    keys, trainers = tmp_path / "fleet", tmp_path / "trainers"
    keys.mkdir(), trainers.mkdir()
    fleet_public, fleet_secret = write_key_pair(str(keys), "fleet")
    write_key_pair(str(trainers), "a"), write_key_pair(str(trainers), "b")
    front = fronts(keys=(fleet_secret, str(trainers)), attach_timeout_s=1.5).front
    endpoint = [front.endpoint]

    def trainer(name: str) -> Announcer:
        pair = KeyPair.load(str(trainers / f"{name}.key_secret"))
        announcer = Announcer(endpoint, 7100, keys=(pair, load_public(fleet_public)), name=name)
        fronts.announcers.append(announcer)  # type: ignore[attr-defined]
        return announcer

    a = trainer("a")
    wait_for("A attached", lambda: a.status()["serving"] == 1, 10)
    (first,) = front.attached.values()
    b = trainer("b")
    why = wait_for("B refused", b.refusal, 10)
    assert "port 7100 of 127.0.0.1 is attached under another CURVE key" in why, why
    assert "--attach-timeout-s" in why
    time.sleep(1.0)  # B goes on saying ATTACH: A keeps its place and its group
    assert list(front.attached.values()) == [first] and a.refusal() is None
    assert front.refused >= 1 and front.snapshot()["refused"] >= 1
    a.close()
    wait_for("B attached once A left", lambda: b.status()["serving"] == 1, 10)
    (second,) = front.attached.values()
    assert second is not first and second.key == KeyPair.load(str(trainers / "b.key_secret")).public


def test_a_group_still_stopping_counts_toward_the_trainer_limit(
    fronts: Callable[..., SteppedFront], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--max-trainers 1``: the first trainer leaves, and its worker (one that outlives
    SIGTERM) takes the stop wait to go. A second trainer is refused, naming the group
    stopping, until that process is gone, then served: never two groups' processes at once
    (the old front started the second group at once: 2 x --workers processes)."""
    monkeypatch.setattr(announcing, "ATTACH_EVERY_S", 0.1)
    running = fronts(workers=1, max_trainers=1, attach_timeout_s=1.0, stop_wait_s=2.0)
    front = running.front
    first = Announcer([running.endpoint], 7110, name="first")
    fronts.announcers.append(first)  # type: ignore[attr-defined]
    wait_for("the first group runs", lambda: front.running == 1, 20)
    (attachment,) = front.attached.values()
    (pid,) = (p.pid for p in attachment.group.processes.values())
    first.close()
    wait_for("the first trainer detached", lambda: not front.attached, 10)
    assert process_alive(pid) and front.snapshot()["stopping"] == 1
    second = Announcer([running.endpoint], 7111, name="second")
    fronts.announcers.append(second)  # type: ignore[attr-defined]
    why = wait_for("the second trainer refused", second.refusal, 10)
    assert "at most 1 trainers at once" in why and "1 that left are stopping" in why, why
    wait_for("the second trainer served", lambda: second.status()["serving"] == 1, 30)
    assert not process_alive(pid)  # its group started once the first group's process was gone


def test_a_connection_flood_is_shed_to_a_bound_and_a_trainer_still_attaches(
    fronts: Callable[..., SteppedFront], monkeypatch: pytest.MonkeyPatch
) -> None:
    """400 held TCP connections (no handshake, no key): the front sheds the oldest down to
    its bound, and a trainer arriving after them is attached."""
    monkeypatch.setattr(announcing, "ATTACH_EVERY_S", 0.1)
    running = fronts(max_trainers=1)
    limit = CONNECTIONS_PER_TRAINER + SPARE_CONNECTIONS
    flood = []
    try:
        for _ in range(400):
            flood.append(socket.create_connection(("127.0.0.1", running.port), timeout=5))
        wait_for(
            "the flood shed",
            lambda: running.front.snapshot()["connections_shed"] >= 400 - limit,
            20,
        )
        assert running.front.snapshot()["connections"] <= limit
        trainer = Announcer([running.endpoint], 7120, name="late")
        fronts.announcers.append(trainer)  # type: ignore[attr-defined]
        wait_for("the trainer attached", lambda: trainer.status()["serving"] == 1, 20)
        assert running.front.snapshot()["connections"] <= limit
    finally:
        for connection in flood:
            connection.close()


@pytest.mark.processes  # WorkerGroup starts (or tries to start) worker processes
def test_a_worker_that_cannot_start_is_retried_with_a_backoff_and_reported(
    tmp_path: pathlib.Path,
) -> None:
    """A start that raises (here: no such program; EMFILE at a descriptor limit alike) is
    counted and tried again after 1 s, then 2 s; past ``max_restarts`` in a minute the
    health check names the error. ``poll`` never raises it (it once ended the replica)."""
    restarts = Restarts(max_restarts=1)
    missing = str(tmp_path / "no-such-python")
    group = WorkerGroup(
        ["w0"], lambda worker, stats: cast(WorkerSettings, _Command(missing)), {},
        str(tmp_path), restarts, _LOG,
    )  # fmt: skip
    assert group.poll() and restarts.start_failures == 1 and not group.processes
    assert group.poll() and restarts.start_failures == 1  # not due yet: its backoff
    assert restarts.crash_loop(time.monotonic()) is None
    time.sleep(1.1)
    assert group.poll() and restarts.start_failures == 2
    report = restarts.crash_loop(time.monotonic())
    assert report is not None and "worker w0 could not start" in report, report
    assert "No such file or directory" in report
    health = str(tmp_path / "health")
    _write_health(health, 0, report, fleet=True)
    assert check_health(health) == report
