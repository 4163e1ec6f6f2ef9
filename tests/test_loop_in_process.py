"""The loop's failure rules, pinned in process: the real FeedLoop, session, recovery and
schedulers on a real ROUTER socket, with fake producers on DEALER sockets in the test's thread
(tests/wire_peers.py says why the socket is real). Each test names the guarantee it pins:
losses (a local worker killed, a remote producer gone), a join during the iteration, a
worker's ERROR, refused peers, and a loss with nobody left; HDF5 (fake INDEX and DATA) and a
map source. No worker processes: each test takes well under a second of its own."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import msgpack
import pytest
from fake_peers import (
    FakeLocalWorkers,
    FakeSource,
    FakeWorker,
    hdf_config,
    make_peer,
    map_element,
    planned_batches,
    source_config,
)
from test_schedulers import (
    FILES,
    HDF_OPTIONS,
    INDEX,
    LENGTH,
    VIDEOS,
    check_hdf_batch,
    expected_items,
    map_ids,
)
from wire_peers import LoopDriver, WirePeer, short_ipc_address

from h5feed.common import messages, wire
from h5feed.common.errors import FileReadError, NoWorkersError, WorkerError
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.loop import END, FAILED
from h5feed.consumer.core.scheduler import Scheduler
from h5feed.consumer.hdf5.scheduler import HdfScheduler
from h5feed.consumer.options import FeedConfig, HdfConfig
from h5feed.consumer.plan import Cursor
from h5feed.consumer.sources.options import SourceConfig
from h5feed.consumer.sources.scheduler import SourceScheduler
from h5feed.consumer.stats import Counters

JOB = "job-loop"
EPOCHS = (0, 1)
#: The map source's batch size (its test defaults in tests/test_schedulers.py).
MAP_BATCH = 4
WORK = (messages.Unit, messages.Items, messages.Pull, messages.Job, messages.Source)


class Kind:
    """One input kind as these tests run it: its config, scheduler, fake workers, and the
    check that every batch of ``EPOCHS`` came exactly once, in plan order."""

    def __init__(self, name: str, **options: Any) -> None:
        self.name = name
        self.config: FeedConfig
        if name == "hdf":
            self.config = hdf_config(FILES, **{**HDF_OPTIONS, **options})
        else:
            self.config = source_config(**{"batch_size": MAP_BATCH, "seed": 11, **options})

    def scheduler(self, counters: Counters, gate: CreditGate) -> Scheduler:
        epochs = iter(EPOCHS)
        config = self.config
        if isinstance(config, HdfConfig):
            return HdfScheduler(config, JOB, epochs, Cursor(), counters)
        assert isinstance(config, SourceConfig)
        return SourceScheduler(config, JOB, epochs, Cursor(), counters, gate)

    def worker(self, name: str, pid: int, local: bool) -> FakeWorker:
        peer = make_peer(name, local=local, pid=pid)
        if self.name == "hdf":
            return FakeWorker(peer, VIDEOS)
        return FakeWorker(peer, source=FakeSource("map", LENGTH, map_element))

    def assert_exactly_once_in_plan_order(self, taken: Sequence[Batch]) -> None:
        if self.name == "hdf":
            assert [check_hdf_batch(b) for b in taken] == planned_batches(
                self.config, INDEX, EPOCHS
            )  # type: ignore[arg-type]
        else:
            got = [(b.epoch, b.index, map_ids(b)) for b in taken]
            assert got == expected_items(self.config, LENGTH, MAP_BATCH, EPOCHS)


@pytest.fixture
def address() -> Iterator[str]:
    """Where the test's ROUTER binds (and listens, for the tests with remote producers)."""
    with short_ipc_address() as address:
        yield address


@pytest.fixture
def rig(address: str) -> Iterator[Callable[..., LoopDriver]]:
    """Makes the test's driver of ``kind`` (with ``local`` workers), closed at its end."""
    made: list[LoopDriver] = []

    def make(kind: Kind, local: FakeLocalWorkers | None = None) -> LoopDriver:
        options = kind.config.options
        driver = LoopDriver(address, options, kind.scheduler, JOB, local, kind.worker)
        made.append(driver)
        return driver

    yield make
    for driver in made:
        driver.close()


def local_workers(count: int) -> FakeLocalWorkers:
    return FakeLocalWorkers({f"w{i}": 11 + i for i in range(count)})


def connect_locals(driver: LoopDriver, kind: Kind, local: FakeLocalWorkers) -> list[WirePeer]:
    return [driver.connect(kind.worker(name, local.pid(name), True)) for name in local.names]


def work_of(message: messages.Message) -> bool:
    return isinstance(message, (messages.Unit, messages.Items, messages.Pull))


def dies_at_its_unit(driver: LoopDriver, peer: WirePeer, count: int) -> None:
    """``peer`` dies on receiving its ``count``-th unit, unanswered; the trainer pauses then
    (so the rest of the epoch is still to come when recovery has acted)."""
    units = 0

    def respond(message: messages.Message) -> list[messages.Message]:
        nonlocal units
        units += work_of(message)
        if units == count:
            driver.taking = False
            driver.kill(peer)
            return []
        return peer.worker.answer(message)

    peer.respond = respond


def unanswered(peer: WirePeer) -> list[messages.Message]:
    """The units ``peer`` received and never answered."""
    answered = {m.unit for m in peer.sent if isinstance(m, messages.Data)}
    return [m for m in peer.received if work_of(m) and m.unit not in answered]


KINDS = ["hdf", "map"]


# -- losses -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind_name", KINDS)
def test_a_local_worker_killed_mid_epoch_is_replaced_and_every_batch_arrives_once(
    rig: Callable[..., LoopDriver], kind_name: str
) -> None:
    kind = Kind(kind_name, workers=2, max_inflight_batches=3)
    local = local_workers(2)
    driver = rig(kind, local)
    w0, _w1 = connect_locals(driver, kind, local)
    dies_at_its_unit(driver, w0, 2)
    driver.start()
    driver.pump(lambda: w0.closed, "w0's second unit")
    held = unanswered(w0)
    assert len(held) == 1
    # Recovery kills and replaces it; the replacement says hello and takes a share.
    driver.pump(lambda: len(driver.peers) == 3, "w0's replacement")
    replacement = driver.peers[2]
    assert (replacement.name, local.replacements) == ("w0", [("w0", replacement.worker.peer.pid)])
    driver.pump(
        lambda: bool(replacement.got(messages.Job) or replacement.got(messages.Source))
        and bool(replacement.sent),
        "the replacement's answer to its share of the work",
    )
    driver.taking = True
    assert driver.finish() is END, driver.error
    kind.assert_exactly_once_in_plan_order(driver.taken)
    assert any(work_of(m) for m in replacement.received), "the replacement got no work"
    counters = driver.counters
    assert (counters.peers_lost, counters.workers_replaced, counters.peers_joined) == (1, 1, 1)
    assert counters.reassigned_units >= len(held)


@pytest.mark.parametrize("kind_name", KINDS)
def test_a_remote_producer_gone_mid_epoch_hands_its_units_to_the_others(
    rig: Callable[..., LoopDriver], address: str, kind_name: str
) -> None:
    kind = Kind(kind_name, workers=1, max_inflight_batches=3, listen=address, join_grace_s=0.5)
    local = local_workers(1)
    driver = rig(kind, local)
    [w0] = connect_locals(driver, kind, local)
    remote = driver.connect(kind.worker("p0", 77, False))
    dies_at_its_unit(driver, remote, 2)  # its socket closes, no BYE: as a SIGKILL does
    driver.start()
    driver.pump(lambda: remote.closed, "the remote producer's second unit")
    driver.pump(lambda: driver.counters.peers_lost == 1, "the loss of the remote producer")
    driver.taking = True
    assert driver.finish() is END, driver.error
    kind.assert_exactly_once_in_plan_order(driver.taken)
    counters = driver.counters
    assert (counters.workers_replaced, counters.reassigned_units >= 1) == (0, True)
    assert not local.replacements and len(driver.peers) == 2
    assert any(work_of(m) for m in w0.received)
