"""Peers that say hello and nothing else (docs/deploy/security.md, the silent-peer rule).

No peer gets rows of a file before its INDEX of that file, a file goes to a peer that has not
shown it delivers only when no other may take it, and whoever is asked for an INDEX owes it
within ``unit_timeout_s``: the in-memory cases drive the real scheduler and session with fake
peers (tests/support/fake_peers.py); the end-to-end ones run a trainer with real sockets, a real
local
worker SIGKILLed, and silent peers (HELLO and nothing else; one of them CURVE-admitted).
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import trainer_and_producer_keys
from fake_peers import FakeTransport, FakeWorker, Fleet, hello_frames, make_peer
from paths import SUPPORT
from ports import free_port
from scheduler_data import (
    INDEX,
    JOB,
    VIDEOS,
    check_hdf_batch,
    hdf_fleet,
    job_files,
)

import h5feed
from h5feed.common.protocol import messages
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.events import PeerLost
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.session import PeerSession
from h5feed.consumer.hdf5.scheduler import HdfScheduler

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}
#: Every wait of the end-to-end tests is bounded by this.
WAIT_S = 120.0
SILENT = SUPPORT.joinpath("silent_peers.py")


def fleet_of(peers: list[Peer], budget: int = 4) -> tuple[Fleet, HdfScheduler]:
    fleet, scheduler, _config = hdf_fleet(peers, epochs=1, budget=budget)
    return fleet, scheduler


def silent_joiners(fleet: Fleet, count: int) -> list[Peer]:
    """``count`` remote peers that join and never answer anything."""
    silent = []
    for i in range(count):
        worker = FakeWorker(make_peer(f"silent-{i:04d}"), VIDEOS)
        fleet.join(worker)
        fleet.live.remove(worker.peer)  # still a peer of the scheduler; it never answers
        silent.append(worker.peer)
    return silent


def rows_sent_to(fleet: Fleet, peers: list[Peer]) -> int:
    chosen = set(peers)
    return sum(
        len(s.message.rows)
        for s in fleet.posted
        if s.peer in chosen and isinstance(s.message, messages.Unit)
    )


# -- in memory: the scheduler ---------------------------------------------------------------


@pytest.mark.parametrize("silent_count", [1, 2000])
def test_a_lost_local_workers_files_go_to_its_replacement_not_to_silent_peers(
    silent_count: int,
) -> None:
    local = make_peer("w0", local=True)
    fleet, scheduler = fleet_of([local])
    fleet.handshake()
    fleet.dispatch()
    fleet.answer_one(local)
    silent = silent_joiners(fleet, silent_count)
    moved = fleet.lose(local, "exited", "was killed by signal 9")  # only silent peers are live
    assert moved.unmovable is None
    # With nobody else, silent peers take the files over (those a joiner was taking over
    # already stay with it; the rest spread, lowest load first): each owes its INDEX ...
    takers = {scheduler.owners.taker(f) for f in (0, 1, 2)}
    assert None not in takers and takers <= set(silent)
    assert all(asked.owes_since is not None for asked in takers)
    # ... but gets no row before its INDEX: they wait.
    assert scheduler.parked_batches and rows_sent_to(fleet, silent) == 0
    # The replacement (a local worker) takes over every file still waiting for that INDEX.
    replacement = FakeWorker(make_peer("w0", local=True, pid=2), VIDEOS)
    sends = fleet.join(replacement)
    assert sorted(job_files(sends)) == [0, 1, 2]
    assert all(peer.owes_since is None for peer in silent)  # nothing of them waited for
    taken = fleet.run(random.Random(5))
    samples = sorted(s for b in taken for s in check_hdf_batch(b))
    assert samples == list(range(INDEX.num_videos * 2))  # exactly once
    assert rows_sent_to(fleet, silent) == 0


def test_a_file_goes_to_a_peer_that_delivered_before_one_that_has_not() -> None:
    a, b = make_peer("a"), make_peer("b")
    fleet, _scheduler = fleet_of([a, b])
    fleet.handshake()  # a and b both indexed their files: both delivered
    [newcomer] = silent_joiners(fleet, 1)  # owns no file: the fewest
    moved = fleet.lose(a)
    askers = {s.peer for s in moved.sends if isinstance(s.message, messages.Job)}
    assert askers == {b}  # not the newcomer, which has shown nothing
    assert rows_sent_to(fleet, [newcomer]) == 0


def test_an_index_ends_the_debt_and_each_index_renews_its_deadline() -> None:
    a = make_peer("a")
    fleet, scheduler = fleet_of([a])
    fleet.post(scheduler.start([a]))
    assert a.owes_since is not None  # asked for 3 files
    assert len(fleet.inbox[a]) == 1
    fleet.answer_one(a)  # one JOB, three INDEX answers
    assert scheduler.ready and a.owes_since is None


def test_a_peer_lost_while_owing_an_index_hands_the_files_on() -> None:
    a, b = make_peer("a"), make_peer("b")
    fleet, scheduler = fleet_of([a, b])
    fleet.post(scheduler.start([a, b]))
    fleet.answer_all(a)  # b says nothing
    assert not scheduler.ready and b.owes_since is not None
    b_files = sorted(scheduler.owners.files_of(b))
    moved = fleet.lose(b, "deadline", "sent no INDEX it was asked for in 121 s")
    assert sorted(job_files(moved.sends)) == b_files
    assert all(s.peer is a for s in moved.sends)
    fleet.answer_all(a)
    assert scheduler.ready
    taken = fleet.run()
    assert sorted(s for batch in taken for s in check_hdf_batch(batch)) == list(range(24))


# -- in memory: the session's deadline ------------------------------------------------------


def test_a_peer_owing_an_index_past_unit_timeout_is_lost_whatever_it_holds() -> None:
    counters = Counters()
    session = PeerSession(JOB, FakeTransport(), None, 5.0, counters)
    session.receive(b"quiet", hello_frames("quiet"))
    session.events.clear()
    peer = session.peers[b"quiet"]
    now = time.monotonic()
    session.check(now + 100)  # holds nothing, owes nothing: no deadline applies
    assert not session.events
    peer.owes_since = now
    session.check(now + 4.9)
    assert not session.events
    session.check(now + 5.1)
    [lost] = list(session.events)
    assert isinstance(lost, PeerLost) and lost.cause == "deadline"
    assert "sent no INDEX" in lost.reason


# -- end to end -----------------------------------------------------------------------------


class SilentPeers:
    """``count`` peers that say hello and nothing else, in a process of their own
    (tests/support/silent_peers.py); with ``keys`` (secret key file, server's public key file), as
    CURVE clients."""

    def __init__(self, address: str, count: int, keys: tuple[str, str] | None = None) -> None:
        command = [sys.executable, str(SILENT), address, str(count), *(keys or ())]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.kinds: collections.Counter[str] | None = None
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()  # bounded: the test's own timeout kills it
        assert ready.strip() == "ready", f"silent peers did not start: {ready!r}"

    def received(self) -> collections.Counter[str]:
        """The kinds of message the silent peers were sent (they stop and say)."""
        if self.kinds is None:
            out, _err = self.process.communicate(input="", timeout=WAIT_S)
            self.kinds = collections.Counter(json.loads(out.strip().splitlines()[-1]))
        return self.kinds

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.received()
            except (subprocess.TimeoutExpired, ValueError):
                self.process.kill()
                self.process.wait(10)


@pytest.fixture()
def silent() -> Iterator[list[SilentPeers]]:
    made: list[SilentPeers] = []
    yield made
    for peers in made:
        peers.close()


def wait_for(stream: Any, counter: str, at_least: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while stream.stats()[counter] < at_least:  # stats() of 2,000 peers takes a while
        assert time.monotonic() < deadline, f"{counter} stayed below {at_least}"
        time.sleep(0.5)


@pytest.mark.parametrize("count", [1, 2000])
def test_silent_joiners_and_a_killed_local_worker_end_the_epoch_exactly_once(
    small_dataset: list[pathlib.Path], silent: list[SilentPeers], count: int
) -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    # Generous: 2,000 heartbeats each way, and a replacement that starts on a busy host.
    unit_timeout_s, peer_timeout_s = 10.0, 20.0
    feed = h5feed.batches(
        small_dataset, **CLIP, batch_size=1, workers=1, seed=2, listen=address,
        unit_timeout_s=unit_timeout_s, peer_timeout_s=peer_timeout_s, join_grace_s=0.0,
        max_inflight_batches=2,
    )  # fmt: skip
    samples: list[int] = []
    with feed.stream() as stream:
        for i, batch in enumerate(stream):
            samples += batch["sample"].tolist()
            if i == 1:
                silent.append(SilentPeers(address, count))
                wait_for(stream, "peers_joined", count)
                killed_at = time.monotonic()
                os.kill(stream.worker_pids[0], signal.SIGKILL)
        ended = time.monotonic() - killed_at
        stats = stream.stats()
    assert sorted(samples) == list(range(24))  # exactly once
    assert stats["workers_replaced"] == 1
    assert ended < peer_timeout_s + unit_timeout_s, f"{ended:.1f} s after the kill"
    assert silent[0].received()["Unit"] == 0  # no row went to a silent peer


def test_a_curve_admitted_producer_silent_after_hello_is_lost_and_its_files_move(
    small_dataset: list[pathlib.Path], silent: list[SilentPeers], tmp_path: pathlib.Path
) -> None:
    trainer_public, trainer_secret, _, producer_secret, authorized = trainer_and_producer_keys(
        tmp_path
    )
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    unit_timeout_s = 4.0
    feed = h5feed.batches(
        small_dataset, **CLIP, batch_size=4, workers=1, seed=3, listen=f"tcp://*:{port}",
        curve_key=trainer_secret, curve_authorized=str(authorized), join_grace_s=3.0,
        unit_timeout_s=unit_timeout_s, start_timeout_s=30.0,
    )  # fmt: skip
    joined = threading.Event()

    def join_while_the_trainer_collects_producers() -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:  # the port is bound when the iteration starts
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.02)
        silent.append(SilentPeers(address, 1, (producer_secret, trainer_public)))
        joined.set()

    helper = threading.Thread(target=join_while_the_trainer_collects_producers, daemon=True)
    helper.start()
    began = time.monotonic()
    with feed.stream() as stream:
        samples = [s for batch in stream for s in batch["sample"].tolist()]
        stats = stream.stats()
    took = time.monotonic() - began
    helper.join(WAIT_S)
    assert joined.is_set()
    assert sorted(samples) == list(range(24))
    # It was given files at the start, owed their INDEX, and was lost by its deadline.
    assert stats["peers_lost"] == 1 and silent[0].received()["Job"] == 1
    assert took < unit_timeout_s + 30, f"{took:.1f} s"
