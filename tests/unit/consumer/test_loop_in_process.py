"""The loop's failure rules, pinned in process: the real FeedLoop, session, recovery and
schedulers on a real ROUTER socket, with fake producers on DEALER sockets in the test's thread
(tests/support/wire_peers.py says why the socket is real). Each test names the guarantee it pins:
losses (a local worker killed, a remote producer gone, one stuck past ``unit_timeout_s``, a
poison unit), a join during the iteration, a worker's ERROR, refused peers, and a loss with
nobody left; HDF5 (fake INDEX and DATA) and a map source. No worker processes: each test takes
about a second or less."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeGuard

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
from scheduler_data import (
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

from h5feed.common.errors import FileReadError, NoWorkersError, PoisonUnitError, WorkerError
from h5feed.common.protocol import messages, wire
from h5feed.common.protocol.versions import OLDEST_VERSION
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.loop import END, FAILED
from h5feed.consumer.core.scheduler import Scheduler
from h5feed.consumer.hdf5.scheduler import HdfScheduler
from h5feed.consumer.options import FeedConfig, HdfConfig
from h5feed.consumer.plan.epoch_plan import Cursor
from h5feed.consumer.sources.options import SourceConfig
from h5feed.consumer.sources.scheduler import SourceScheduler

JOB = "job-loop"
EPOCHS = (0, 1)
#: The map source's batch size (its test defaults in tests/unit/consumer/test_schedulers.py).
MAP_BATCH = 4


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
        if isinstance(self.config, HdfConfig):
            planned = planned_batches(self.config, INDEX, EPOCHS)
            assert [check_hdf_batch(b) for b in taken] == planned
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


def work_of(message: messages.Message) -> TypeGuard[messages.Unit | messages.Items | messages.Pull]:
    """Whether ``message`` asks for a unit of work (of any input kind)."""
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


def answered_its_share(peer: WirePeer) -> bool:
    """Whether ``peer`` was given a share of the work (a JOB, a SOURCE) and answered it."""
    return bool(peer.got(messages.Job) or peer.got(messages.Source)) and bool(peer.sent)


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
    driver.pump(lambda: answered_its_share(replacement), "the replacement's answer to its share")
    driver.taking = True
    assert driver.finish() is END, driver.error
    kind.assert_exactly_once_in_plan_order(driver.taken)
    assert any(work_of(m) for m in replacement.received), "the replacement got no work"
    counters = driver.counters
    assert (counters.peers_lost, counters.workers_replaced, counters.peers_joined) == (1, 1, 1)
    assert counters.reassigned_units >= len(held)


@pytest.mark.parametrize("kind_name", KINDS)
def test_a_remote_producer_gone_mid_epoch_hands_its_units_to_the_others(
    rig: Callable[..., LoopDriver],
    address: str,
    caplog: pytest.LogCaptureFixture,
    kind_name: str,
) -> None:
    kind = Kind(kind_name, workers=1, max_inflight_batches=3, listen=address, join_grace_s=0.5)
    local = local_workers(1)
    driver = rig(kind, local)
    [w0] = connect_locals(driver, kind, local)
    remote = driver.connect(kind.worker("p0", 77, False))
    dies_at_its_unit(driver, remote, 2)  # its socket closes, no BYE: as a SIGKILL does

    def lost_as_vanished() -> bool:
        # Lost as a vanished connection is: a send or a liveness PING to it failed, whichever
        # the loop tried first (a credit's unit, or the probe of a silent peer: under load
        # either may come first). The loop thread logs the loss after it counts it, so the
        # wait is on the line itself.
        vanished = ("stopped answering heartbeats", "cannot send to it")
        return any(
            "p0 (pid 77" in r.getMessage() and any(why in r.getMessage() for why in vanished)
            for r in caplog.records
        )

    with caplog.at_level(logging.WARNING, logger="h5feed"):
        driver.start()
        driver.pump(lambda: remote.closed, "the remote producer's second unit")
        driver.pump(lost_as_vanished, "the loss of the remote producer, logged")
    assert driver.counters.peers_lost == 1
    driver.taking = True
    assert driver.finish() is END, driver.error
    kind.assert_exactly_once_in_plan_order(driver.taken)
    counters = driver.counters
    assert counters.workers_replaced == 0 and counters.reassigned_units >= 1
    assert not local.replacements and len(driver.peers) == 2
    assert any(work_of(m) for m in w0.received)


@pytest.mark.parametrize("kind_name", KINDS)
def test_a_producer_stuck_past_unit_timeout_is_lost_and_its_late_parts_are_dropped(
    rig: Callable[..., LoopDriver], address: str, kind_name: str
) -> None:
    kind = Kind(
        kind_name, workers=1, max_inflight_batches=3, listen=address, join_grace_s=0.5,
        unit_timeout_s=1.0,
    )  # fmt: skip
    local = local_workers(1)
    driver = rig(kind, local)
    connect_locals(driver, kind, local)
    stuck = driver.connect(kind.worker("p0", 77, False))
    held: list[messages.Message] = []

    def respond(message: messages.Message) -> list[messages.Message]:
        if held or (work_of(message) and len(stuck.got(type(message))) == 2):
            held.append(message)  # stuck in user code: it answers nothing, its socket lives
            driver.taking = False
            return []
        return stuck.worker.answer(message)

    stuck.respond = respond
    driver.start()
    driver.pump(lambda: driver.counters.peers_lost == 1, "the stuck producer's deadline")
    late = [reply for message in held if work_of(message) for reply in stuck.worker.answer(message)]
    assert late
    for part in late:  # it comes back to life: every part it owed arrives after all
        stuck.send(part)
    driver.pump(lambda: driver.counters.dropped_parts == len(late), "the late parts dropped")
    driver.taking = True
    assert driver.finish() is END, driver.error
    kind.assert_exactly_once_in_plan_order(driver.taken)
    assert driver.counters.reassigned_units >= 1 and driver.counters.workers_replaced == 0


def test_a_unit_whose_holder_dies_max_unit_attempts_times_ends_the_iteration_naming_its_samples(
    rig: Callable[..., LoopDriver],
) -> None:
    kind = Kind("hdf", workers=1, max_inflight_batches=1, max_unit_attempts=2)
    local = local_workers(1)
    driver = rig(kind, local)
    assert isinstance(kind.config, HdfConfig)
    poison = planned_batches(kind.config, INDEX, EPOCHS)[2][0]  # a sample of the 3rd batch
    killed: list[WirePeer] = []

    def kills_its_worker(peer: WirePeer) -> None:
        def respond(message: messages.Message) -> list[messages.Message]:
            if isinstance(message, messages.Unit) and poison in [r.sample for r in message.rows]:
                killed.append(peer)
                driver.kill(peer)  # a sample that crashes the decoder, every time
                return []
            return peer.worker.answer(message)

        peer.respond = respond

    driver.on_connect = kills_its_worker  # w0 and each of its replacements
    connect_locals(driver, kind, local)
    driver.start()
    assert driver.finish() is FAILED
    error = driver.error
    assert isinstance(error, PoisonUnitError), repr(error)
    assert len(killed) == 2 and "(max_unit_attempts=2)" in str(error)
    assert f"(sample {poison} of epoch 0)" in str(error)
    assert len(driver.taken) == 2  # the batches before it, once each


@pytest.mark.parametrize("kind_name", KINDS)
def test_a_local_worker_that_starts_over_on_a_broken_connection_is_not_killed(
    rig: Callable[..., LoopDriver], kind_name: str
) -> None:
    # Session rule 1 and recovery rule 1: the same process (name and pid) says hello with a
    # new nonce, as a worker whose connection broke does (h5feed/producer/worker/
    # connection.py): the unit lost with the old connection goes to the others at once, not
    # after unit_timeout_s (an hour here), and the process is not killed nor replaced: it
    # joins again and gets work.
    kind = Kind(kind_name, workers=2, max_inflight_batches=3, unit_timeout_s=3600)
    local = local_workers(2)
    driver = rig(kind, local)
    w0, w1 = connect_locals(driver, kind, local)
    units, held = 0, []

    def starts_over(message: messages.Message) -> list[messages.Message]:
        nonlocal units
        units += work_of(message)
        if units >= 2:  # from its second unit on, what it is sent is lost on the way
            driver.taking = False
            return []
        return w0.worker.answer(message)

    def holds_while_w0_is_away(message: messages.Message) -> list[messages.Message]:
        # The consumer sends nothing while w0 reconnects, as after a pause of the whole job
        # (a send in that window finds no connection and loses w0 as unreachable, killed
        # and replaced: what a failed send must still do).
        if units >= 2 and (held or not driver.counters.peers_joined):
            held.append(message)
            return []
        return w1.worker.answer(message)

    w0.respond, w1.respond = starts_over, holds_while_w0_is_away
    driver.start()
    driver.pump(lambda: units >= 2, "w0's second unit")
    # What was on the way lands; no credit comes back, so the loop sends nothing more. Its
    # connection closes, and once the consumer has dropped it the worker says hello on a new
    # one: all within PROBE_EVERY_S of its last DATA, so no liveness PING is due meanwhile.
    driver.pump_for(0.05)
    w0.close()
    driver.pump_for(0.05)
    # A new nonce, on a new socket under its own routing id, as the real worker's.
    again = driver.connect(kind.worker("w0", local.pid("w0"), True), routing_id=b"w0~1")
    driver.pump(lambda: driver.counters.peers_joined == 1, "w0 back as a new session")
    assert driver.counters.peers_lost == 1  # the old session, handed over
    for message in held:
        for reply in w1.worker.answer(message):
            w1.send(reply)
    held.clear()
    driver.taking = True
    assert driver.finish() is END, driver.error
    kind.assert_exactly_once_in_plan_order(driver.taken)
    counters = driver.counters
    assert (counters.workers_replaced, counters.peers_joined) == (0, 1)
    assert not local.replacements and counters.reassigned_units >= 1
    assert any(work_of(m) for m in again.received), "the worker got no work after it rejoined"


# -- joins ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind_name", KINDS)
def test_a_producer_joining_mid_iteration_gets_a_share_and_every_batch_arrives_once(
    rig: Callable[..., LoopDriver], address: str, kind_name: str
) -> None:
    kind = Kind(kind_name, workers=1, max_inflight_batches=2, listen=address, join_grace_s=0)
    local = local_workers(1)
    driver = rig(kind, local)
    connect_locals(driver, kind, local)
    driver.take_until = 1  # the rest of the run waits for the joiner's answer
    driver.start()
    driver.pump(lambda: len(driver.taken) == 1, "the first batch")
    joiner = driver.connect(kind.worker("late", 78, False))
    driver.pump(lambda: answered_its_share(joiner), "the joiner's answer to its share")
    driver.take_until = None
    assert driver.finish() is END, driver.error
    kind.assert_exactly_once_in_plan_order(driver.taken)
    assert any(work_of(m) for m in joiner.received), "the joiner got no work"
    assert (driver.counters.peers_joined, driver.counters.peers_lost) == (1, 0)


# -- a worker's ERROR -------------------------------------------------------------------------


def answers_its_first_unit_with(peer: WirePeer, error: BaseException) -> None:
    def respond(message: messages.Message) -> list[messages.Message]:
        if work_of(message) and not peer.got(messages.Error):
            return [messages.Error.of(JOB, message.unit, error)]
        return peer.worker.answer(message)

    peer.respond = respond


@pytest.mark.parametrize("kind_name", KINDS)
def test_a_worker_error_ends_the_iteration_and_reaches_the_trainer_naming_worker_and_unit(
    rig: Callable[..., LoopDriver], kind_name: str
) -> None:
    kind = Kind(kind_name, workers=2)
    local = local_workers(2)
    driver = rig(kind, local)
    w0, w1 = connect_locals(driver, kind, local)
    try:
        raise ValueError("the transform raised on purpose")
    except ValueError as exc:  # raised, so its traceback is a real one
        answers_its_first_unit_with(w0, exc)
    driver.start()
    assert driver.finish() is FAILED
    error = driver.error
    assert isinstance(error, WorkerError), repr(error)
    assert error.error_type == "ValueError"
    assert error.worker_message == "the transform raised on purpose"
    assert error.worker.startswith("w0 (pid 11 ") and " in " in error.worker  # names its unit
    assert "raise ValueError(" in error.worker_traceback
    assert "--- worker traceback ---" in str(error)
    # The loop said BYE to every worker on its way out (none is left holding work).
    driver.pump(lambda: bool(w0.got(messages.Bye) and w1.got(messages.Bye)), "BYE to both")


def test_a_file_one_worker_cannot_read_moves_to_another_and_every_batch_arrives_once(
    rig: Callable[..., LoopDriver],
) -> None:
    kind = Kind("hdf", workers=2)
    local = local_workers(2)
    driver = rig(kind, local)
    peers = connect_locals(driver, kind, local)
    failed: list[WirePeer] = []

    def blind_to_file_0(peer: WirePeer) -> None:
        def respond(message: messages.Message) -> list[messages.Message]:
            unit = message if isinstance(message, messages.Unit) and not failed else None
            if unit is not None and any(row.file == 0 for row in unit.rows):
                failed.append(peer)
                error = FileReadError("no such file", file=FILES[0], host="h", number=0)
                return [messages.Error.of(JOB, unit.unit, error)]
            return peer.worker.answer(message)

        peer.respond = respond

    for peer in peers:
        blind_to_file_0(peer)
    driver.start()
    assert driver.finish() is END, driver.error
    kind.assert_exactly_once_in_plan_order(driver.taken)
    [blind] = failed
    [heir] = [peer for peer in peers if peer is not blind]
    assert 0 in heir.worker.files  # it was sent a JOB of the file, and answered its INDEX
    assert driver.counters.unreadable_files == 1 and driver.counters.peers_lost == 0


# -- refusals ---------------------------------------------------------------------------------


def hello_of_version(name: str, version: int) -> list[Any]:
    """A HELLO of protocol ``version`` (one this side does not speak), packed by hand."""
    fields = {"worker": name, "pid": 5, "host": "elsewhere", "package": "old", "nonce": "n"}
    return [msgpack.packb([wire.MAGIC, version, "hello", fields, []], use_bin_type=True)]


def test_refused_peers_never_get_work_and_the_others_finish_the_epoch_exactly_once(
    rig: Callable[..., LoopDriver], address: str
) -> None:
    kind = Kind("hdf", workers=1, listen=address, join_grace_s=0)
    local = local_workers(1)
    driver = rig(kind, local)
    # Before the good worker: their hellos wait on the socket when the loop starts.
    older = driver.connect(
        kind.worker("older", 90, False),
        hello_of_version("older", OLDEST_VERSION - 1),
    )
    garbled = driver.connect(
        kind.worker("garbled", 91, False),
        [msgpack.packb([wire.MAGIC, wire.PROTOCOL_VERSION, "hello", {"worker": "x"}, []])],
    )
    connect_locals(driver, kind, local)
    driver.start()
    driver.taking = False  # the iteration lasts until both were seen
    driver.pump(
        lambda: bool(older.received) and driver.counters.malformed_messages >= 2,
        "the refusal of the older peer and two garbled hellos",
    )
    driver.taking = True
    assert driver.finish() is END, driver.error
    kind.assert_exactly_once_in_plan_order(driver.taken)
    [bye] = older.received  # told once, not to retry; nothing else, ever
    assert isinstance(bye, messages.Bye) and bye.refused and "version" in bye.reason
    assert not garbled.received
    assert len(driver.session.refused) == 1 and driver.session.refused[0].startswith("older: ")
    assert driver.counters.peers_joined == 0  # neither ever became a peer


# -- nobody left ------------------------------------------------------------------------------


def waiting_logged(caplog: pytest.LogCaptureFixture) -> bool:
    return any("gone: waiting" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kind_name", KINDS)
def test_with_every_worker_gone_the_work_waits_for_a_joiner_that_finishes_it_exactly_once(
    rig: Callable[..., LoopDriver],
    address: str,
    caplog: pytest.LogCaptureFixture,
    kind_name: str,
) -> None:
    kind = Kind(kind_name, workers=0, listen=address, join_grace_s=0, start_timeout_s=30)
    driver = rig(kind)
    only = driver.connect(kind.worker("p0", 80, False))
    dies_at_its_unit(driver, only, 3)
    with caplog.at_level(logging.WARNING, logger="h5feed"):
        driver.start()
        driver.pump(lambda: waiting_logged(caplog), "the loop to wait for a worker")
        driver.pump_for(0.5)  # the loop's passes go on: the work still waits
    assert driver.counters.peers_lost == 1
    assert driver.error is None and not driver.loop.stopped  # still waiting, not failed
    joiner = driver.connect(kind.worker("p1", 81, False))
    driver.taking = True
    assert driver.finish() is END, driver.error
    kind.assert_exactly_once_in_plan_order(driver.taken)
    assert any(work_of(m) for m in joiner.received)
    assert driver.counters.peers_joined == 1


def test_with_every_worker_gone_and_nobody_joining_the_iteration_ends_after_start_timeout_s(
    rig: Callable[..., LoopDriver], address: str, caplog: pytest.LogCaptureFixture
) -> None:
    kind = Kind("hdf", workers=0, listen=address, join_grace_s=0, start_timeout_s=1.0)
    driver = rig(kind)
    only = driver.connect(kind.worker("p0", 80, False))
    dies_at_its_unit(driver, only, 3)
    with caplog.at_level(logging.WARNING, logger="h5feed"):
        driver.start()
        driver.pump(lambda: only.closed, "the only producer's third unit")
        driver.taking = True
        assert driver.finish() is FAILED
    assert waiting_logged(caplog)
    error = driver.error
    assert isinstance(error, NoWorkersError), repr(error)
    waited = "work waited 1 s (start_timeout_s) for a worker after its workers were lost"
    assert str(error) == f"{waited}; 0 connected"
    # What came before the failure came once each, in plan order.
    assert isinstance(kind.config, HdfConfig)
    planned = planned_batches(kind.config, INDEX, EPOCHS)
    assert [check_hdf_batch(b) for b in driver.taken] == planned[: len(driver.taken)]


# -- the join grace ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind_name", KINDS)
def test_a_producer_lost_in_the_join_grace_is_a_lost_producer_and_a_joiner_finishes_exactly_once(
    rig: Callable[..., LoopDriver], address: str, kind_name: str
) -> None:
    """The grace after the first hello waits for more producers; one that says BYE inside it
    (a rolling update, a scale-down) leaves nobody to share the work with: the loop waits
    again, up to ``start_timeout_s``, instead of starting the plan with no worker."""
    kind = Kind(kind_name, workers=0, listen=address, join_grace_s=1.0, start_timeout_s=30)
    driver = rig(kind)
    leaver = driver.connect(kind.worker("p0", 80, False))
    driver.start()
    driver.pump(lambda: bool(driver.session.peers), "p0's hello to be seen")
    leaver.send(messages.Bye("scaled down"))
    driver.pump(lambda: not driver.session.peers, "p0's BYE to be seen")
    driver.pump_for(1.5)  # past the grace: still waiting, not failed
    assert driver.error is None and not driver.loop.stopped, driver.error
    joiner = driver.connect(kind.worker("p1", 81, False))
    assert driver.finish() is END, driver.error
    kind.assert_exactly_once_in_plan_order(driver.taken)
    assert any(work_of(m) for m in joiner.received)
    assert not any(work_of(m) for m in leaver.received)


def test_with_everyone_lost_in_the_join_grace_and_nobody_joining_the_wait_ends_naming_it(
    rig: Callable[..., LoopDriver], address: str
) -> None:
    kind = Kind("hdf", workers=0, listen=address, join_grace_s=0.5, start_timeout_s=1.0)
    driver = rig(kind)
    leaver = driver.connect(kind.worker("p0", 80, False))
    driver.start()
    driver.pump(lambda: bool(driver.session.peers), "p0's hello to be seen")
    leaver.send(messages.Bye("scaled down"))
    assert driver.finish() is FAILED
    error = driver.error
    assert isinstance(error, NoWorkersError), repr(error)
    assert "no producer connected" in str(error) and "lost 1 in the join grace" in str(error)
