"""The schedulers alone, driven to completion by fake peers in-process
(tests/support/fake_peers.py):
exactly once, plan order, the same batches whatever the number of peers, the credit gate,
duplicates, hand-over of a lost peer's work, and starting at a cursor."""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from fake_peers import (
    FakeSource,
    FakeWorker,
    Fleet,
    batch_of,
    fake_index,
    fake_videos,
    generator_element,
    keras_batch,
    make_peer,
    map_element,
    over_the_wire,
    planned_batches,
    source_config,
)
from scheduler_data import (
    FILES,
    INDEX,
    JOB,
    LENGTH,
    VIDEOS,
    check_hdf_batch,
    epochs_from,
    expected_items,
    hdf_fleet,
    job_files,
    map_ids,
)

from h5feed.common.errors import (
    DataError,
    MalformedPartWarning,
    NondeterministicItemWarning,
    ProtocolError,
    SourceError,
    WorkerTimeoutError,
)
from h5feed.common.protocol import messages
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.scheduler import Send
from h5feed.consumer.hdf5.scheduler import HdfScheduler
from h5feed.consumer.options import FeedConfig
from h5feed.consumer.plan.epoch_plan import Cursor
from h5feed.consumer.sources.scheduler import SourceScheduler

START = Cursor()  # an iteration from the beginning


# -- HDF5 -------------------------------------------------------------------------------


def assert_each_sample_once_per_epoch(batches: Sequence[Batch], epochs: Sequence[int]) -> None:
    by_epoch: dict[int, list[int]] = collections.defaultdict(list)
    for batch in batches:
        by_epoch[batch.epoch] += check_hdf_batch(batch)
    assert sorted(by_epoch) == list(epochs)
    for epoch in epochs:
        assert sorted(by_epoch[epoch]) == list(range(INDEX.num_videos * 2)), f"epoch {epoch}"


@pytest.mark.parametrize("peers", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hdf_every_sample_once_per_epoch_released_in_plan_order(peers: int, seed: int) -> None:
    fleet, scheduler, config = hdf_fleet(peers, epochs=2, budget=3)
    fleet.handshake()
    taken = fleet.run(random.Random(seed))
    assert_each_sample_once_per_epoch(taken, [0, 1])
    assert [check_hdf_batch(b) for b in taken] == planned_batches(config, INDEX, [0, 1])
    assert [(b.epoch, b.index) for b in taken] == [(0, i) for i in range(5)] + [
        (1, i) for i in range(5)
    ]
    assert fleet.most_ahead <= 3
    assert not fleet.counters.dropped_parts and not fleet.counters.malformed_messages
    assert scheduler.finished


def test_hdf_batches_are_the_same_whatever_the_number_of_peers() -> None:
    runs = []
    for peers in (1, 2, 3):
        fleet, _scheduler, _config = hdf_fleet(peers, epochs=2, deterministic=False)
        fleet.handshake()
        taken = fleet.run(random.Random(peers))
        runs.append(sorted((b.epoch, b.index, check_hdf_batch(b)) for b in taken))
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0]) == 10


def test_hdf_files_are_shared_out_and_units_go_to_the_owners() -> None:
    # Units go to the files' owners, and to a file's extra readers once confirmed (files of
    # 4, 5 and 3 videos on 2 workers: 5 and 7 owned; the first dispatch deals one of the 7 to
    # the other worker too, as a JOB ahead of its units: hdf5/sharing.py).
    fleet, scheduler, _config = hdf_fleet(2)
    fleet.handshake()
    a, b = fleet.live
    assert sorted(scheduler.owners.files_of(a) + scheduler.owners.files_of(b)) == [0, 1, 2]
    assert scheduler.owners.files_of(a) and scheduler.owners.files_of(b)
    fleet.dispatch()
    for peer in (a, b):
        for message in fleet.inbox[peer]:
            if isinstance(message, messages.Job):  # an extra read: rows once its INDEX matches
                assert all(scheduler.readers.pending(f.number, peer) for f in message.files)
                continue
            assert isinstance(message, messages.Unit)
            assert {row.file for row in message.rows} <= set(scheduler.owners.files_of(peer))
    assert scheduler.index is not None and scheduler.index.num_videos == 12


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hdf_a_batch_goes_whole_to_a_peer_that_reads_all_its_files(seed: int) -> None:
    # Dispatch guarantee 7: once each of the 3 files has its second reader confirmed (on 2
    # peers, each then reads all three), every batch is one unit, to the peer with fewer rows
    # in flight: one message per batch, not one per file's reader; both peers get batches.
    fleet, scheduler, _config = hdf_fleet(2, epochs=3)
    fleet.handshake()
    taken = fleet.run(random.Random(seed))
    assert_each_sample_once_per_epoch(taken, [0, 1, 2])
    files = range(len(FILES))
    assert all(len(scheduler.readers.confirmed(f)) == 1 for f in files)
    peers_of: dict[int, list[Peer]] = collections.defaultdict(list)
    for send in fleet.posted:
        if isinstance(send.message, messages.Unit) and send.message.epoch > 0:
            peers_of[send.message.batch].append(send.peer)
    assert len(peers_of) == 10 and all(len(peers) == 1 for peers in peers_of.values())
    assert {peers[0] for peers in peers_of.values()} == set(fleet.live)


def _ring_of_three_confirmed() -> tuple[Fleet, HdfScheduler]:
    """3 files on 3 peers (8 epochs, a budget of 3), run until every file's second reader
    (the ring) is confirmed and nothing is in flight, the run not yet finished: (fleet,
    scheduler)."""
    fleet, scheduler, _config = hdf_fleet(3, epochs=8, budget=3)
    fleet.handshake()
    files = range(len(FILES))
    for _ in range(1000):
        if all(scheduler.readers.confirmed(f) for f in files) and not fleet.gate.inflight:
            break
        fleet.dispatch()
        for peer in fleet.pending():
            fleet.answer_all(peer)
        while fleet.released:
            fleet.take()
    assert all(scheduler.readers.confirmed(f) for f in files) and not scheduler.finished
    return fleet, scheduler


def test_hdf_a_whole_batch_never_goes_to_a_peer_in_doubt_when_its_files_have_others() -> None:
    # 3 files on 3 peers, each file with a second reader (the ring): once they are confirmed,
    # a peer put in doubt (another worker of its host lost as unreachable) is passed over
    # for every file, even for a batch of which it is the only peer reading all the files.
    fleet, scheduler = _ring_of_three_confirmed()
    doubted = fleet.live[1]
    doubted.host_doubted = time.monotonic() + 60  # not heard from since: in doubt
    fleet.gate.grow_to(40)  # the rest of the run at once: batches of files 0 and 1 among them
    sent = fleet.dispatch()
    assert all(isinstance(send.message, messages.Unit) for send in sent)
    batch_files: dict[int, set[int]] = collections.defaultdict(set)
    for send in sent:
        batch_files[send.message.batch] |= {row.file for row in send.message.rows}

    def reader(peer: Peer, file: int) -> bool:
        return scheduler.owners.owner(file) is peer or peer in scheduler.readers.confirmed(file)

    only = [
        b
        for b, fs in batch_files.items()
        if [p for p in fleet.live if all(reader(p, f) for f in fs)] == [doubted]
    ]
    assert only, "no batch of which only the doubted peer reads every file: nothing tested"
    assert all(send.peer is not doubted for send in sent), [s.peer.name for s in sent]


def test_hdf_an_index_from_a_peer_that_does_not_own_the_file_is_dropped() -> None:
    fleet, scheduler, _config = hdf_fleet(2)
    sends = scheduler.start(fleet.live)
    owner_of_0 = next(s.peer for s in sends if 0 in job_files([s]))
    other = next(p for p in fleet.live if p is not owner_of_0)
    assert scheduler.on_control(other, messages.Index(JOB, 0, VIDEOS[FILES[0]])) == []
    assert scheduler.handshake_answers == 0
    assert fleet.counters.malformed_messages == 1
    assert "f0.h5" in scheduler.handshake_waiting()


def test_hdf_index_batches_build_the_same_index_as_one_index_per_file() -> None:
    """INDEX_BATCH (columns, several files) gives the Index that INDEX messages give."""
    fleet, scheduler, _config = hdf_fleet(2)
    sends = scheduler.start(fleet.live)
    for send in sends:
        owned = job_files([send])
        batch = messages.IndexBatch.of(JOB, [(f, VIDEOS[FILES[f]]) for f in owned])
        assert scheduler.on_control(send.peer, over_the_wire(batch)) == []
    index = scheduler.index
    assert index is not None and fleet.counters.malformed_messages == 0
    for name in ("file_of_video", "video_in_file", "frames", "labels", "names", "file_names"):
        assert getattr(index, name).tolist() == getattr(INDEX, name).tolist(), name


def test_hdf_an_index_batch_naming_a_file_of_another_peer_is_dropped_whole() -> None:
    fleet, scheduler, _config = hdf_fleet(2)
    sends = scheduler.start(fleet.live)
    mine, theirs = job_files([sends[0]]), job_files([sends[1]])
    files = [(f, VIDEOS[FILES[f]]) for f in [*mine, theirs[0]]]
    assert scheduler.on_control(sends[0].peer, messages.IndexBatch.of(JOB, files)) == []
    assert scheduler.handshake_answers == 0  # not even its own files are taken
    assert fleet.counters.malformed_messages == 1


def test_hdf_the_credit_gate_bounds_what_is_dispatched() -> None:
    fleet, scheduler, _config = hdf_fleet(2, budget=2, epochs=1)
    fleet.handshake()
    first = [s for s in fleet.dispatch() if not isinstance(s.message, messages.Job)]
    assert {batch_of(s.message) for s in first} == {0, 1}
    assert fleet.gate.inflight == 2
    assert fleet.dispatch() == []  # no credit left
    for peer in fleet.live:
        fleet.answer_all(peer)
    assert [b.index for b in fleet.released] == [0, 1]
    assert fleet.dispatch() == []  # released is not taken: still no credit
    fleet.take()
    third = fleet.dispatch()
    assert {batch_of(s.message) for s in third} == {2}
    assert fleet.dispatch() == []
    fleet.take()
    fleet.dispatch()
    assert fleet.gate.inflight == 2
    assert fleet.gate.most_inflight == 2
    taken = fleet.run()
    assert_each_sample_once_per_epoch(taken, [0])
    assert scheduler.finished


def test_hdf_a_duplicate_part_is_dropped_and_counted() -> None:
    fleet, _scheduler, _config = hdf_fleet(1, epochs=1, budget=1)
    fleet.handshake()
    fleet.dispatch()
    [peer] = fleet.live
    unit = fleet.inbox[peer].popleft()
    [data] = fleet.workers[peer].answer(unit)
    data = over_the_wire(data)
    assert isinstance(data, messages.Data)
    [batch] = fleet.scheduler.on_data(peer, data)
    assert fleet.scheduler.on_data(peer, data) == []
    assert fleet.counters.dropped_parts == 1
    check_hdf_batch(batch)


def test_hdf_a_part_with_other_samples_or_bad_frames_is_dropped() -> None:
    fleet, scheduler, _config = hdf_fleet(1, epochs=1, budget=1)
    fleet.handshake()
    fleet.dispatch()
    [peer] = fleet.live
    unit = fleet.inbox[peer].popleft()
    assert isinstance(unit, messages.Unit)
    [good] = fleet.workers[peer].answer(unit)
    assert isinstance(good, messages.Data)
    swapped = messages.Data(JOB, good.unit, good.batch, good.samples[::-1], good.arrays)
    assert scheduler.on_data(peer, swapped) == []
    assert fleet.counters.dropped_parts == 1
    frames = good.arrays["frames"]
    for bad in (frames[:-1], frames.astype(np.int16), frames[:, :, :, :, :1]):
        part = messages.Data(JOB, good.unit, good.batch, good.samples, {"frames": bad})
        with pytest.warns(MalformedPartWarning, match=f"unit {good.unit} from producer p0"):
            assert scheduler.on_data(peer, part) == []
    assert fleet.counters.malformed_messages == 3
    stranger = make_peer("stranger")
    assert scheduler.on_data(stranger, good) == []  # not the peer it was sent to
    assert fleet.counters.dropped_parts == 2
    assert len(scheduler.on_data(peer, good)) == 1  # the unit is still expected


def test_hdf_a_bad_part_from_a_local_worker_ends_the_iteration() -> None:
    fleet, scheduler, _config = hdf_fleet([make_peer("p0", local=True)], epochs=1, budget=1)
    fleet.handshake()
    fleet.dispatch()
    [peer] = fleet.live
    unit = fleet.inbox[peer].popleft()
    assert isinstance(unit, messages.Unit)
    [good] = fleet.workers[peer].answer(unit)
    assert isinstance(good, messages.Data)
    bad = {"frames": good.arrays["frames"][:-1]}
    with pytest.raises(ProtocolError, match=f"local worker p0 .* unit {good.unit} .* frames"):
        scheduler.on_data(peer, messages.Data(JOB, good.unit, good.batch, good.samples, bad))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_hdf_hand_over_of_a_lost_peer_mid_epoch(seed: int) -> None:
    rng = random.Random(seed)
    fleet, scheduler, config = hdf_fleet(3, epochs=2, budget=4)
    fleet.handshake()
    fleet.dispatch()
    for _ in range(3):  # some answers, not all
        waiting = fleet.pending()
        fleet.answer_one(rng.choice(waiting))
    lost = max(fleet.live, key=lambda p: len(p.outstanding))
    held = len(lost.outstanding)
    files = sorted(scheduler.owners.files_of(lost))
    assert held and files and scheduler.owns(lost)
    late = list(fleet.inbox[lost])  # what it had not answered
    moved = fleet.lose(lost)
    assert moved.unmovable is None
    assert moved.moved_units == held
    assert not lost.outstanding and not scheduler.owners.files_of(lost) and not scheduler.owns(lost)
    # Each of its files goes to a survivor: by a JOB and its INDEX, or at once to a confirmed
    # extra reader of it (its copy checked already: h5feed.consumer.hdf5.sharing); a survivor
    # may also be dealt a file as an extra reader, never a file twice.
    promoted = {f for f in files if scheduler.owners.owner(f) is not None}
    given = [
        (f.number, s.peer) for s in moved.sends if isinstance(s.message, messages.Job)
        for f in s.message.files
    ]  # fmt: skip
    assert set(files) <= {f for f, _p in given} | promoted and len(set(given)) == len(given)
    owner, taker, reads = scheduler.owners.owner, scheduler.owners.taker, scheduler.readers.reads
    assert all(taker(f) is p or owner(f) is p or reads(f, p) for f, p in given)
    assert all(s.peer is not lost for s in moved.sends)
    # No row of a moved file goes anywhere before its heir's INDEX matched the plan.
    resent = [s.message for s in moved.sends if isinstance(s.message, messages.Unit)]
    assert not {r.file for u in resent for r in u.rows} & (set(files) - promoted)
    before = len(fleet.posted)
    for heir in {s.peer for s in moved.sends if isinstance(s.message, messages.Job)}:
        while any(isinstance(m, messages.Job) for m in fleet.inbox[heir]):
            fleet.answer_one(heir)  # its INDEX matches: the parked rows go out
    resent += [s.message for s in fleet.posted[before:] if isinstance(s.message, messages.Unit)]
    assert sorted(r.sample for u in resent for r in u.rows) == sorted(
        r.sample for u in late if isinstance(u, messages.Unit) for r in u.rows
    )
    while isinstance(fleet.inbox[lost][0], messages.Job):  # an extra read it never began
        fleet.inbox[lost].popleft()
    fleet.answer_one(lost)  # a late part from the lost peer: no longer expected
    assert fleet.counters.dropped_parts == 1
    taken = fleet.run(rng)
    assert_each_sample_once_per_epoch(taken, [0, 1])
    assert [check_hdf_batch(b) for b in taken] == planned_batches(config, INDEX, [0, 1])
    assert fleet.counters.dropped_parts == 1


def test_hdf_hand_over_to_a_peer_that_holds_the_rest_of_the_batch() -> None:
    # One batch made by both peers; the survivor takes the lost one's rows too: the batch is
    # then made of its two parts, and complete once both arrive.
    fleet, _scheduler, config = hdf_fleet(2, epochs=1, budget=1, shuffle=False, batch_size=24)
    fleet.handshake()
    fleet.dispatch()
    a, b = fleet.live
    assert fleet.inbox[a] and fleet.inbox[b]
    moved = fleet.lose(b)
    assert moved.moved_units == 1
    taken = fleet.run()
    assert [check_hdf_batch(batch) for batch in taken] == planned_batches(config, INDEX, [0])


def test_hdf_a_file_not_yet_indexed_moves_during_the_handshake() -> None:
    fleet, scheduler, config = hdf_fleet(4)  # 3 files: one peer owns none
    fleet.post(scheduler.start(fleet.live))
    owners = [p for p in fleet.live if scheduler.owners.files_of(p)]
    idle = next(p for p in fleet.live if not scheduler.owners.files_of(p))
    fleet.answer_all(owners[0])  # one file indexed, two not
    assert not scheduler.ready
    fleet.live.remove(idle)
    nothing = scheduler.reassign(idle, fleet.live, True)
    assert (nothing.sends, nothing.moved_units, nothing.unmovable) == ([], 0, None)
    lost_files = list(scheduler.owners.files_of(owners[1]))
    moved = fleet.lose(owners[1])
    assert moved.unmovable is None and sorted(job_files(moved.sends)) == lost_files
    while fleet.pending():  # the heir indexes the file; the plan starts
        fleet.answer_one(fleet.pending()[0])
    assert scheduler.ready
    taken = fleet.run(random.Random(3))
    assert [check_hdf_batch(b) for b in taken] == planned_batches(config, INDEX, [0, 1])


def test_hdf_work_of_the_last_worker_waits_for_a_joiner() -> None:
    fleet, scheduler, config = hdf_fleet(1, budget=3)
    fleet.handshake()
    fleet.dispatch()
    [peer] = fleet.live
    fleet.answer_one(peer)
    moved = fleet.lose(peer)
    assert moved.unmovable is None and moved.sends == [] and moved.moved_units > 0
    assert scheduler.waiting_for_workers
    replacement = FakeWorker(make_peer("p0-again"), videos=VIDEOS)
    sends = fleet.join(replacement)
    assert sorted(job_files(sends)) == [0, 1, 2]
    assert not scheduler.waiting_for_workers
    taken = fleet.run(random.Random(4))
    assert_each_sample_once_per_epoch(taken, [0, 1])
    assert [check_hdf_batch(b) for b in taken] == planned_batches(config, INDEX, [0, 1])


def test_hdf_a_replacement_joining_while_the_lost_files_move_gets_its_share() -> None:
    # Issue 21's proof, round 1: a local worker dies, its file begins moving to a survivor,
    # and only then does its replacement say hello. It gets a share at once (it idled for the
    # rest of the iteration when only files owned, not files being taken over, counted).
    peers = [make_peer(f"p{i}", local=True) for i in range(3)]
    fleet, scheduler, config = hdf_fleet(peers, budget=2)
    fleet.handshake()
    fleet.dispatch()
    assert [scheduler.owners.count(p) for p in peers] == [1, 1, 1]
    # Its file has a second reader already (the ring: hdf5/file_readers.py), which owns it
    # now without a JOB; the replacement still gets a share at once.
    lost = peers[2]
    [lost_file] = scheduler.owners.files_of(lost)
    [ring_reader] = scheduler.sharing.readers.confirmed(lost_file)
    moved = fleet.lose(lost)
    jobs = {s.peer for s in moved.sends if isinstance(s.message, messages.Job)}
    assert not jobs and lost_file in scheduler.owners.files_of(ring_reader)
    replacement = FakeWorker(make_peer("p2-again", local=True), videos=VIDEOS)
    assert job_files(fleet.join(replacement)) != []  # it reads a share at once
    taken = fleet.run(random.Random(7))
    assert_each_sample_once_per_epoch(taken, [0, 1])
    assert [check_hdf_batch(b) for b in taken] == planned_batches(config, INDEX, [0, 1])
    assert rows_of(fleet, replacement.peer) > 0


def test_hdf_a_late_index_of_a_file_handed_on_to_a_local_joiner_is_not_counted() -> None:
    # A remote producer that just joined owes the INDEX of its share; a local worker joins
    # before it answers and takes that file over (a proven worker before an unproven one).
    # The remote's answer is late, not malformed: dropped without counting, nothing lost.
    peers = [make_peer(f"p{i}", local=True) for i in range(2)]
    fleet, scheduler, config = hdf_fleet(peers, budget=2)
    fleet.handshake()
    fleet.dispatch()
    remote = FakeWorker(make_peer("remote"), videos=VIDEOS)
    [file_index] = job_files(fleet.join(remote))
    local = FakeWorker(make_peer("local", local=True), videos=VIDEOS)
    assert file_index in job_files(fleet.join(local))
    assert scheduler.owners.taker(file_index) is local.peer
    fleet.answer_all(remote.peer)  # its INDEX of the file handed on
    assert fleet.counters.malformed_messages == 0
    taken = fleet.run(random.Random(8))
    assert_each_sample_once_per_epoch(taken, [0, 1])
    assert [check_hdf_batch(b) for b in taken] == planned_batches(config, INDEX, [0, 1])
    assert fleet.counters.malformed_messages == 0
    assert scheduler.owners.owner(file_index) is local.peer


@pytest.mark.parametrize("cursor", [Cursor(1, 2), Cursor(0, 4), Cursor(2, 0)])
def test_hdf_starting_at_a_cursor_gives_the_rest_of_the_full_run(cursor: Cursor) -> None:
    full, _s, _c = hdf_fleet(2, epochs=3)
    full.handshake()
    everything = [(b.epoch, b.index, check_hdf_batch(b)) for b in full.run(random.Random(5))]
    resumed, _s, _c = hdf_fleet(3, epochs=3 - cursor.epoch, start=cursor)
    resumed.handshake()
    rest = [(b.epoch, b.index, check_hdf_batch(b)) for b in resumed.run(random.Random(6))]
    assert rest[0][:2] == (cursor.epoch, cursor.batch)
    assert rest == [e for e in everything if (e[0], e[1]) >= (cursor.epoch, cursor.batch)]


def test_hdf_parts_written_into_shared_memory_are_assembled_with_the_others() -> None:
    local = make_peer("local", local=True)
    remote = make_peer("remote")
    fleet, scheduler, config = hdf_fleet(
        [local, remote], epochs=1, slots=True, shared_memory=True, resize=(4, 6)
    )
    try:
        fleet.handshake()
        taken = fleet.run(random.Random(0))
        assert scheduler.figures().shared_memory_slots >= 1
        assert [check_hdf_batch(b) for b in taken] == planned_batches(config, INDEX, [0])
        assert all(b.arrays["frames"].shape[1:] == (2, 4, 6, 3) for b in taken)
        assert not fleet.counters.parts_copied_into_slots
    finally:
        scheduler.close()


# -- map and keras sources --------------------------------------------------------------


def source_fleet(
    source: FakeSource,
    peers: int | Sequence[Peer],
    *,
    epochs: int = 2,
    start: Cursor = START,
    budget: int = 4,
    **options: Any,
) -> tuple[Fleet, SourceScheduler, FeedConfig]:
    config = source_config(**options)
    counters = Counters()
    gate = CreditGate(budget, lambda: None)
    epochs_iter = iter(epochs_from(start, epochs))
    scheduler = SourceScheduler(config, JOB, epochs_iter, start, counters, gate)
    if isinstance(peers, int):
        peers = [make_peer(f"p{i}") for i in range(peers)]
    workers = [FakeWorker(peer, source=source) for peer in peers]
    return Fleet(scheduler, workers, gate, counters), scheduler, config


def map_fleet(peers: int, **kwargs: Any) -> tuple[Fleet, SourceScheduler, FeedConfig]:
    options = {"batch_size": 4, "seed": 11, **kwargs}
    return source_fleet(FakeSource("map", LENGTH, map_element), peers, **options)


def test_source_handshake_gives_each_worker_its_shard_then_the_spec() -> None:
    fleet, scheduler, _config = map_fleet(3, shard=(1, 2))
    fleet.handshake()
    assert scheduler.ready and scheduler.learnt is not None
    assert scheduler.learnt.kind == "map"
    shards = []
    for worker in fleet.workers.values():
        first, second = worker.received
        assert isinstance(first, messages.Source) and isinstance(second, messages.Source)
        assert first.spec is None  # probe and tell
        assert second.spec == scheduler.learnt.spec.to_wire()
        shards.append((first.worker, first.workers))
    assert sorted(shards) == [(3, 6), (4, 6), (5, 6)]  # shard 1 of 2, times 3 workers


@pytest.mark.parametrize("peers", [1, 2, 3])
def test_map_every_item_once_per_epoch_in_plan_order(peers: int) -> None:
    fleet, scheduler, config = map_fleet(peers, budget=3)
    fleet.handshake()
    taken = fleet.run(random.Random(peers))
    got = [(b.epoch, b.index, map_ids(b)) for b in taken]
    assert got == expected_items(config, LENGTH, 4, [0, 1])
    for epoch in (0, 1):
        ids = [i for e, _p, batch in got if e == epoch for i in batch]
        assert sorted(ids) == list(range(LENGTH))
    assert fleet.most_ahead <= 3
    assert scheduler.finished


def test_map_batches_are_the_same_whatever_the_number_of_peers() -> None:
    runs = []
    for peers in (1, 2, 3):
        fleet, _scheduler, _config = map_fleet(peers, deterministic=False)
        fleet.handshake()
        taken = fleet.run(random.Random(7 + peers))
        runs.append(sorted((b.epoch, b.index, map_ids(b)) for b in taken))
    assert runs[0] == runs[1] == runs[2]


def test_map_a_duplicate_part_is_dropped_and_counted() -> None:
    fleet, scheduler, _config = map_fleet(1, budget=1)
    fleet.handshake()
    fleet.dispatch()
    [peer] = fleet.live
    [data] = fleet.workers[peer].answer(fleet.inbox[peer].popleft())
    assert isinstance(data, messages.Data)
    assert len(scheduler.on_data(peer, data)) == 1
    assert scheduler.on_data(peer, data) == []
    assert fleet.counters.dropped_parts == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_map_hand_over_of_a_lost_peer(seed: int) -> None:
    rng = random.Random(seed)
    fleet, scheduler, config = map_fleet(3, budget=6)
    fleet.handshake()
    fleet.dispatch()
    fleet.answer_one(fleet.live[0])
    lost = fleet.live[1]
    held = len(lost.outstanding)
    assert held and not scheduler.owns(lost)
    late = list(fleet.inbox[lost])
    moved = fleet.lose(lost)
    assert moved.unmovable is None and moved.moved_units == held
    assert all(isinstance(s.message, messages.Items) and s.peer is not lost for s in moved.sends)
    assert sorted(m.items for s in moved.sends if isinstance(m := s.message, messages.Items)) == (
        sorted(m.items for m in late if isinstance(m, messages.Items))
    )
    fleet.answer_one(lost)  # a late part
    assert fleet.counters.dropped_parts == 1
    taken = fleet.run(rng)
    assert [(b.epoch, b.index, map_ids(b)) for b in taken] == expected_items(
        config, LENGTH, 4, [0, 1]
    )


def test_map_work_of_the_last_worker_waits_for_a_joiner() -> None:
    fleet, scheduler, config = map_fleet(1)
    fleet.handshake()
    fleet.dispatch()
    [peer] = fleet.live
    moved = fleet.lose(peer)
    assert moved.unmovable is None and moved.sends == [] and scheduler.waiting_for_workers
    source = fleet.workers[peer].source
    sends = fleet.join(FakeWorker(make_peer("p0-again"), source=source))
    assert [type(s.message) for s in sends] == [messages.Source]
    taken = fleet.run(random.Random(5))
    assert not scheduler.waiting_for_workers
    got = [(b.epoch, b.index, map_ids(b)) for b in taken]
    assert got == expected_items(config, LENGTH, 4, [0, 1])


def test_a_source_lost_before_the_handshake_ends_is_unmovable() -> None:
    fleet, scheduler, _config = map_fleet(2)
    fleet.post(scheduler.start(fleet.live))
    moved = scheduler.reassign(fleet.live[0], fleet.live[1:], True)
    assert moved.unmovable is not None


def test_a_source_peer_lost_before_the_work_was_shared_out_is_no_loss() -> None:
    fleet, scheduler, _config = map_fleet(2)
    early, rest = fleet.live[0], fleet.live[1:]
    moved = scheduler.reassign(early, rest, True)  # e.g. a producer gone during the join grace
    assert (moved.sends, moved.moved_units, moved.unmovable) == ([], 0, None)
    fleet.live = rest
    assert all(send.peer is not early for send in scheduler.start(rest))


@pytest.mark.parametrize("cursor", [Cursor(1, 2), Cursor(0, 5)])
def test_map_starting_at_a_cursor_gives_the_rest_of_the_full_run(cursor: Cursor) -> None:
    full, _s, _c = map_fleet(2, epochs=2)
    full.handshake()
    everything = [(b.epoch, b.index, map_ids(b)) for b in full.run(random.Random(1))]
    resumed, _s, _c = map_fleet(3, epochs=2 - cursor.epoch, start=cursor)
    resumed.handshake()
    rest = [(b.epoch, b.index, map_ids(b)) for b in resumed.run(random.Random(2))]
    assert rest[0][:2] == (cursor.epoch, cursor.batch)
    assert rest == [e for e in everything if (e[0], e[1]) >= (cursor.epoch, cursor.batch)]


def keras_fleet(peers: int, **kwargs: Any) -> tuple[Fleet, SourceScheduler, FeedConfig]:
    return source_fleet(FakeSource("keras", 7, keras_batch), peers, **{"seed": 2, **kwargs})


@pytest.mark.parametrize("peers", [1, 2, 3])
def test_keras_every_batch_once_per_epoch_not_rebatched(peers: int) -> None:
    fleet, _scheduler, config = keras_fleet(peers)
    fleet.handshake()
    taken = fleet.run(random.Random(peers))
    got = []
    for batch in taken:
        element = batch.element
        b = int(element["y"][0])
        assert element["y"].tolist() == [b] * 3
        assert element["x"].shape == (3, 2) and (element["x"] == b).all()
        assert batch.rows == 3
        got.append((batch.epoch, batch.index, [b]))
    assert got == expected_items(config, 7, 1, [0, 1])


def test_keras_hand_over_of_a_lost_peer() -> None:
    fleet, _scheduler, config = keras_fleet(2, budget=4)
    fleet.handshake()
    fleet.dispatch()
    moved = fleet.lose(fleet.live[0])
    assert moved.moved_units == 2 and moved.unmovable is None
    taken = fleet.run(random.Random(3))
    got = [(b.epoch, b.index, [int(b.element["y"][0])]) for b in taken]
    assert got == expected_items(config, 7, 1, [0, 1])


def epoch_1_units(fleet: Fleet) -> list[messages.Message]:
    return [m for s in fleet.posted if isinstance(m := s.message, messages.Items) and m.epoch == 1]


def test_keras_a_later_epoch_is_dispatched_once_every_copy_answered_its_check() -> None:
    fleet, _scheduler, config = keras_fleet(2, budget=20)  # 7 batches an epoch, 2 epochs
    fleet.handshake()
    fleet.dispatch()
    sent = [s.message for s in fleet.posted]
    assert sorted(m.epoch for m in sent if isinstance(m, messages.Items)) == [0] * 7
    checks = [s for s in fleet.posted if isinstance(s.message, messages.Check)]
    assert sorted(s.peer.name for s in checks) == ["p0", "p1"]
    assert {s.message.epoch for s in checks if isinstance(s.message, messages.Check)} == {1}
    fleet.answer_all(fleet.live[0])
    fleet.dispatch()  # p1 has not answered its check: nothing of epoch 1 yet
    assert not any(
        isinstance(s.message, messages.Items) and s.message.epoch == 1 for s in fleet.posted
    )
    taken = fleet.run(random.Random(3))
    got = [(b.epoch, b.index, [int(b.element["y"][0])]) for b in taken]
    assert got == expected_items(config, 7, 1, [0, 1])


def test_keras_copies_that_disagree_at_a_later_epoch_end_the_iteration_before_its_units() -> None:
    fleet, _scheduler, _config = keras_fleet(2, budget=20)
    for n, worker in enumerate(fleet.workers.values()):
        worker.checks = lambda epoch, n=n: (
            messages.ItemCheck(0, bytes([epoch * n]), True),  # equal at 0, not at 1
            messages.ItemCheck(6, b"x", epoch == 0),  # batch 6 not reproducible from 1 on
        )
    fleet.handshake()
    fleet.dispatch()
    a, b = fleet.live
    fleet.answer_all(a)
    with (
        pytest.raises(SourceError, match=r"batch 0 at epoch 1 differs between the workers' c"),
        pytest.warns(NondeterministicItemWarning, match="batch 6 of source"),
    ):
        fleet.answer_all(b)
    assert not any(
        isinstance(s.message, messages.Items) and s.message.epoch == 1 for s in fleet.posted
    )


def test_keras_a_check_not_answered_within_the_unit_timeout_ends_the_iteration() -> None:
    fleet, scheduler, _config = keras_fleet(2, budget=20, unit_timeout_s=0.05)
    fleet.handshake()
    fleet.dispatch()
    fleet.answer_all(fleet.live[0])  # p1 never answers its CHECK (its on_epoch_end hangs)
    deadline = time.monotonic() + 30
    with pytest.raises(
        WorkerTimeoutError, match=r"workers \['p1 \(pid.* did not answer their check"
    ):
        while time.monotonic() < deadline:  # the loop's passes
            scheduler.next_units(fleet.gate, fleet.live)
    assert not epoch_1_units(fleet)


def keras_fleet_in_epoch_1() -> tuple[Fleet, SourceScheduler, FeedConfig]:
    """A keras fleet whose epoch 1 was checked and whose units of it were dispatched."""
    fleet, scheduler, config = keras_fleet(2, budget=3)
    for worker in fleet.workers.values():  # the copies agree: batch 0 is b"0", b"1"...
        worker.checks = lambda epoch: (messages.ItemCheck(0, bytes([epoch]), True),)
    fleet.handshake()
    while not epoch_1_units(fleet):  # epoch 0, the CHECK of epoch 1, its first units
        fleet.dispatch()
        for peer in fleet.pending():
            fleet.answer_all(peer)
        while fleet.released:
            fleet.take()
    assert len(epoch_1_units(fleet)) < 7  # the rest is dispatched later
    return fleet, scheduler, config


def test_keras_a_joiner_in_a_later_epoch_serves_once_its_check_of_it_agrees() -> None:
    fleet, _scheduler, config = keras_fleet_in_epoch_1()
    fleet.lose(fleet.live[0])
    joiner = FakeWorker(make_peer("p2"), source=FakeSource("keras", 7, keras_batch))
    fleet.join(joiner)
    fleet.answer_one(joiner.peer)  # its SOURCE_INFO: it agrees at epoch 0
    [check] = [s for s in fleet.posted if s.peer is joiner.peer and s.message.KIND == "check"]
    assert isinstance(check.message, messages.Check) and check.message.epoch == 1
    fleet.dispatch()
    assert not [s for s in fleet.posted if s.peer is joiner.peer and s.message.KIND == "items"]
    fleet.answer_all(joiner.peer)  # its CHECK agrees: it serves
    moved = fleet.lose(fleet.live[0])  # the other one goes too: its units go to the joiner
    assert moved.moved_units and {s.peer for s in moved.sends} == {joiner.peer}
    taken = fleet.run(random.Random(4))
    got = [(b.epoch, b.index, [int(b.element["y"][0])]) for b in taken]
    assert got == expected_items(config, 7, 1, [0, 1])


def test_keras_a_joiner_whose_copy_differs_at_the_current_epoch_is_refused() -> None:
    fleet, _scheduler, _config = keras_fleet_in_epoch_1()
    fleet.lose(fleet.live[0])
    joiner = FakeWorker(make_peer("p2"), source=FakeSource("keras", 7, keras_batch))
    joiner.checks = lambda epoch: (messages.ItemCheck(0, bytes([epoch * 7]), True),)
    fleet.join(joiner)
    with pytest.raises(SourceError, match="batch 0 at epoch 1 differs"):
        fleet.answer_all(joiner.peer)
    assert not [s for s in fleet.posted if s.peer is joiner.peer and s.message.KIND == "items"]


def test_a_joiner_whose_copy_differs_is_refused_naming_the_item() -> None:
    fleet, _scheduler, _config = map_fleet(1)
    fleet.workers[fleet.live[0]].checks = lambda epoch: (messages.ItemCheck(11, b"a", True),)
    fleet.handshake()
    fleet.lose(fleet.live[0])
    joiner = FakeWorker(make_peer("p0-again"), source=FakeSource("map", LENGTH, map_element))
    joiner.checks = lambda epoch: (messages.ItemCheck(11, b"b", True),)
    fleet.join(joiner)
    with pytest.raises(SourceError, match="item 11 at epoch 0 differs"):
        fleet.answer_all(joiner.peer)


def test_workers_that_disagree_on_the_kind_fail_the_handshake() -> None:
    config = source_config()
    counters = Counters()
    gate = CreditGate(2, lambda: None)
    scheduler = SourceScheduler(config, JOB, iter(range(1)), Cursor(), counters, gate)
    a, b = make_peer("a"), make_peer("b")
    scheduler.start([a, b])
    spec = FakeSource("map", 4, map_element).spec.to_wire()
    assert scheduler.on_control(a, messages.SourceInfo(JOB, "map", 4, spec)) == []
    with pytest.raises(SourceError, match="different kinds"):
        scheduler.on_control(b, messages.SourceInfo(JOB, "generator", None, spec))


def test_workers_that_disagree_on_the_length_fail_the_handshake() -> None:
    config = source_config()
    counters = Counters()
    scheduler = SourceScheduler(
        config, JOB, iter(range(1)), Cursor(), counters, CreditGate(2, lambda: None)
    )
    a, b = make_peer("a"), make_peer("b")
    scheduler.start([a, b])
    spec = FakeSource("map", 4, map_element).spec.to_wire()
    scheduler.on_control(a, messages.SourceInfo(JOB, "map", 4, spec))
    with pytest.raises(SourceError, match="different lengths"):
        scheduler.on_control(b, messages.SourceInfo(JOB, "map", 5, spec))


# -- generator sources ------------------------------------------------------------------


def generator_fleet(
    peers: int, length: int, **kwargs: Any
) -> tuple[Fleet, SourceScheduler, FeedConfig]:
    source = FakeSource("generator", length, generator_element)
    return source_fleet(source, peers, **{"batch_size": 2, **kwargs})


def generator_ids(batch: Batch) -> list[int]:
    ids = batch.element["id"]
    assert batch.rows == len(ids)
    return ids.tolist()  # type: ignore[no-any-return]


@pytest.mark.parametrize("peers", [1, 2, 3])
def test_generator_every_element_once_per_epoch(peers: int) -> None:
    fleet, scheduler, _config = generator_fleet(peers, 11, epochs=2, budget=3)
    fleet.handshake()
    taken = fleet.run(random.Random(peers))
    for epoch in (0, 1):
        batches = [b for b in taken if b.epoch == epoch]
        ids = [i for b in batches for i in generator_ids(b)]
        assert sorted(ids) == list(range(11)), f"epoch {epoch}"
        assert sorted(b.index for b in batches) == list(range(len(batches)))
    assert [b.epoch for b in taken] == sorted(b.epoch for b in taken)  # epochs never overlap
    assert fleet.most_ahead <= 3
    assert scheduler.finished


def pulls(fleet: Fleet, peer: Peer) -> list[messages.Pull]:
    return [m for m in fleet.inbox[peer] if isinstance(m, messages.Pull)]


def test_generator_pulls_end_with_each_pass_and_the_epoch_with_the_last_pass() -> None:
    # 10 elements in 2 shards of 5; batches of 2: each pass answers 2, 2, then 1 (short).
    fleet, _scheduler, _config = generator_fleet(2, 10, epochs=2, budget=2)
    fleet.handshake()
    a, b = fleet.live
    fleet.dispatch()
    assert [(p.epoch, p.pass_, p.count) for p in pulls(fleet, a)] == [(0, 0, 2)]
    assert [(p.epoch, p.pass_, p.count) for p in pulls(fleet, b)] == [(0, 0, 2)]
    for _ in range(3):  # a's whole pass, one pull at a time
        [batch] = fleet.answer_all(a)
        fleet.take()
        fleet.dispatch()
    assert generator_ids(batch) == [8]  # the short answer: a's pass has ended
    for _ in range(4):
        fleet.dispatch()
        assert not fleet.inbox[a], "a pull after the pass ended"
        assert all(p.epoch == 0 for p in pulls(fleet, b)), "the epoch ended before b's pass"
        if fleet.inbox[b]:
            fleet.answer_one(b)
        while fleet.released:
            fleet.take()
    fleet.dispatch()  # b's pass has ended too: epoch 1 starts new passes
    for peer in (a, b):
        assert [(p.epoch, p.pass_) for p in pulls(fleet, peer)] == [(1, 1)]
    epoch_0 = [i for batch in fleet.taken for i in generator_ids(batch)]
    assert sorted(epoch_0) == list(range(10))


def test_generator_an_empty_answer_refunds_its_credit() -> None:
    # 8 elements, 2 shards of 4, batches of 2, budget 8: each peer gets 4 pulls at once; the
    # third and the fourth find the pass over and yield nothing.
    fleet, _scheduler, _config = generator_fleet(2, 8, epochs=1, budget=8)
    fleet.handshake()
    a, b = fleet.live
    fleet.dispatch()
    assert len(pulls(fleet, a)) == len(pulls(fleet, b)) == 4
    gate = fleet.gate
    assert gate.inflight == 8
    assert len(fleet.answer_one(a)) == 1 and len(fleet.answer_one(a)) == 1
    assert gate.inflight == 8  # two batches released, not yet taken
    assert fleet.answer_one(a) == []
    assert (gate.inflight, gate.dispatched) == (7, 7)  # the empty answer's credit returned
    assert fleet.answer_one(a) == []
    assert gate.inflight == 6
    fleet.answer_all(b)
    assert gate.inflight == 4
    taken = fleet.run()
    assert sorted(i for batch in taken for i in generator_ids(batch)) == list(range(8))
    assert gate.inflight == 0


def varying_element(i: int) -> tuple[np.ndarray, np.int64]:
    """Issue 22's repro: a field whose first dimension varies (3 to 6 rows)."""
    return np.full((3 + i % 4, 2), i, np.float32), np.int64(i)


@pytest.mark.parametrize("local", [False, True])
def test_generator_elements_of_varying_size_end_their_pass(local: bool) -> None:
    # 8 elements in 2 shards of 4, batches of 4: each pass's second pull finds it over and
    # answers no element, packed with the spec's fixed dimensions (was (0, 0): dropped).
    source = FakeSource("generator", 8, varying_element)
    peers = [make_peer(f"p{i}", local=local) for i in range(2)]
    fleet, scheduler, _config = source_fleet(source, peers, epochs=2, batch_size=4)
    fleet.handshake()
    taken = fleet.run(random.Random(0))
    assert scheduler.finished and not fleet.counters.malformed_messages
    for epoch in (0, 1):
        ids = [i for b in taken if b.epoch == epoch for i in b.element[1].tolist()]
        assert sorted(ids) == list(range(8))


def malformed_map_part(fleet: Fleet, peer: Peer) -> tuple[messages.Data, messages.Data]:
    """A map unit's good answer and the same with field 'x' of another width."""
    fleet.dispatch()
    [good] = fleet.workers[peer].answer(fleet.inbox[peer].popleft())
    assert isinstance(good, messages.Data)
    arrays = dict(good.arrays)
    name = next(k for k in arrays if arrays[k].ndim == 2)  # 'x': float32 [n, 2]
    arrays[name] = np.zeros((arrays[name].shape[0], 3), np.float32)
    return good, messages.Data(JOB, good.unit, good.batch, good.samples, arrays)


def test_a_malformed_part_from_a_remote_producer_is_counted_and_warned() -> None:
    fleet, scheduler, _config = map_fleet(1, budget=1)
    fleet.handshake()
    [peer] = fleet.live
    good, bad = malformed_map_part(fleet, peer)
    with pytest.warns(MalformedPartWarning, match="field 'x': shape"):
        assert scheduler.on_data(peer, bad) == []
    assert fleet.counters.malformed_messages == 1
    assert len(scheduler.on_data(peer, good)) == 1  # the unit is still expected


def test_a_malformed_part_from_a_local_worker_ends_the_iteration_naming_the_field() -> None:
    source = FakeSource("map", LENGTH, map_element)
    peer = make_peer("p0", local=True)
    fleet, scheduler, _config = source_fleet(source, [peer], batch_size=4, budget=1)
    fleet.handshake()
    _good, bad = malformed_map_part(fleet, peer)
    with pytest.raises(ProtocolError, match=r"local worker p0 .* field 'x': shape"):
        scheduler.on_data(peer, bad)


def test_generator_drop_remainder_refunds_a_short_answer() -> None:
    fleet, _scheduler, _config = generator_fleet(2, 10, epochs=1, drop_remainder=True)
    fleet.handshake()
    taken = fleet.run(random.Random(0))
    ids = sorted(i for batch in taken for i in generator_ids(batch))
    assert ids == [0, 1, 2, 3, 4, 5, 6, 7]  # 8 and 9 were each a partial batch
    assert all(len(generator_ids(b)) == 2 for b in taken)
    assert fleet.gate.inflight == 0


def test_generator_steps_per_epoch_carries_passes_across_epochs() -> None:
    fleet, _scheduler, _config = generator_fleet(2, 40, epochs=3, steps_per_epoch=3)
    fleet.handshake()
    taken = fleet.run(random.Random(1))
    assert [b.epoch for b in taken] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    ids = [i for batch in taken for i in generator_ids(batch)]
    assert len(ids) == len(set(ids)) == 18  # the passes went on: no element twice
    pulled = [m for w in fleet.workers.values() for m in w.received if isinstance(m, messages.Pull)]
    assert {p.pass_ for p in pulled} == {0}


def test_generator_a_lost_shard_starts_over_in_its_replacement() -> None:
    # At least once: the lost worker's shard restarts in the process that takes its place.
    fleet, scheduler, _config = generator_fleet(2, 10, epochs=1)
    fleet.handshake()
    fleet.dispatch()
    lost = fleet.live[0]
    fleet.answer_one(lost)  # one batch of its shard delivered
    assert scheduler.owns(lost)
    moved = fleet.lose(lost)
    assert (moved.sends, moved.moved_units, moved.unmovable) == ([], 0, None)
    assert scheduler.waiting_for_workers
    source = fleet.workers[lost].source
    sends = fleet.join(FakeWorker(make_peer("p0-again"), source=source))
    assert [type(s.message) for s in sends] == [messages.Source]
    taken = fleet.run(random.Random(6))
    ids = [i for b in taken for i in generator_ids(b)]
    assert set(ids) == set(range(10))  # every element at least once
    assert len(ids) > 10  # the lost shard's first batch came twice
    assert not scheduler.waiting_for_workers


def test_generator_takes_no_new_workers() -> None:
    fleet, _scheduler, _config = generator_fleet(2, 10, epochs=1)
    fleet.handshake()
    source = fleet.workers[fleet.live[0]].source
    assert fleet.join(FakeWorker(make_peer("extra"), source=source)) == []
    taken = fleet.run(random.Random(7))
    assert sorted(i for b in taken for i in generator_ids(b)) == list(range(10))


def test_generator_cannot_start_inside_an_epoch() -> None:
    fleet, _scheduler, _config = generator_fleet(2, 10, start=Cursor(0, 1))
    with pytest.raises(SourceError, match="cannot resume"):
        fleet.handshake()


@pytest.mark.parametrize("peers", [1, 2])
def test_generator_steps_per_epoch_a_pass_that_ends_on_an_epoch_boundary_restarts(
    peers: int,
) -> None:
    # Each worker's pass is exactly 3 batches of 2 and steps_per_epoch takes all of them:
    # epoch 0 uses every pass up without seeing its end (no answer was short), so epoch 1
    # finds every carried-on pass over at its first pull. docs/semantics.md: "generators continue
    # across
    # epochs; one that ends restarts at the next epoch": epoch 1 must start new passes, not
    # fail as if the generators yielded nothing.
    fleet, _scheduler, _config = generator_fleet(
        peers, 6 * peers, epochs=2, steps_per_epoch=3 * peers
    )
    fleet.handshake()
    taken = fleet.run(random.Random(0))
    assert [b.epoch for b in taken] == [0] * 3 * peers + [1] * 3 * peers
    for epoch in (0, 1):
        ids = [i for b in taken if b.epoch == epoch for i in generator_ids(b)]
        assert sorted(ids) == list(range(6 * peers)), f"epoch {epoch}"


def test_hdf_two_successive_losses_still_give_each_sample_once() -> None:
    rng = random.Random(9)
    fleet, scheduler, config = hdf_fleet(3, epochs=2, budget=3)
    fleet.handshake()
    fleet.dispatch()
    fleet.answer_one(fleet.pending()[0])
    first = fleet.lose(fleet.live[0])
    assert first.unmovable is None
    for peer in fleet.live:  # the heirs index the files they take over
        fleet.answer_all(peer)
    for _ in range(4):
        fleet.dispatch()
        if fleet.pending():
            fleet.answer_one(rng.choice(fleet.pending()))
        if fleet.released:
            fleet.take()
    survivor_files = sorted(
        scheduler.owners.files_of(fleet.live[0]) + scheduler.owners.files_of(fleet.live[1])
    )
    assert survivor_files == [0, 1, 2]
    second = fleet.lose(fleet.live[0])  # it may hold files it adopted from the first
    assert second.unmovable is None
    fleet.answer_all(fleet.live[0])
    assert sorted(scheduler.owners.files_of(fleet.live[0])) == [0, 1, 2]
    taken = fleet.run(rng)
    assert [check_hdf_batch(b) for b in taken] == planned_batches(config, INDEX, [0, 1])


def answer_until_a_unit(fleet: Fleet, peer: Peer) -> None:
    """``peer`` answers what comes before its next UNIT (JOBs of files to read)."""
    while fleet.inbox[peer] and not isinstance(fleet.inbox[peer][0], messages.Unit):
        fleet.answer_one(peer)
    assert fleet.inbox[peer], f"{peer.name} has no unit waiting"


def rows_of(fleet: Fleet, peer: Peer) -> int:
    """The rows ``peer`` was sent in UNITs."""
    units = [s.message for s in fleet.posted if s.peer is peer]
    return sum(len(m.rows) for m in units if isinstance(m, messages.Unit))


def test_hdf_parts_of_another_frame_size_fail_naming_a_video() -> None:
    fleet, scheduler, _config = hdf_fleet(2, epochs=1, budget=2, shuffle=False)
    fleet.handshake()
    fleet.dispatch()
    a, _b = fleet.live
    answer_until_a_unit(fleet, a)  # the JOB of its second reads (the ring) comes first
    fleet.answer_one(a)
    answer_until_a_unit(fleet, a)
    unit = fleet.inbox[a].popleft()
    assert isinstance(unit, messages.Unit)
    samples = tuple(row.sample for row in unit.rows)
    wider = np.zeros((len(samples), 2, 2, 3, 3), np.uint8)  # 3 wide, earlier parts 2
    part = messages.Data(JOB, unit.unit, unit.batch, samples, {"frames": wider})
    with pytest.raises(DataError, match="resize") as raised:
        scheduler.on_data(a, part)
    assert raised.value.file in FILES and raised.value.video is not None


def test_schedulers_describe_their_units() -> None:
    hdf, hdf_scheduler, _config = hdf_fleet(1, epochs=1)
    hdf.handshake()
    [send, *_rest] = hdf.dispatch()
    assert isinstance(send.message, messages.Unit)
    unit = send.message.unit
    assert hdf_scheduler.describe(unit) == f"unit {unit} (batch 0 of epoch 0)"
    assert hdf_scheduler.describe(999) == "unit 999"
    items, items_scheduler, _config = map_fleet(1, epochs=1)
    items.handshake()
    [send, *_rest] = items.dispatch()
    assert isinstance(send.message, messages.Items)
    shown = list(send.message.items)
    assert items_scheduler.describe(send.message.unit) == (
        f"unit {send.message.unit} (items {shown}, epoch 0)"
    )
    pulls_, gen_scheduler, _config = generator_fleet(1, 10, epochs=1)
    pulls_.handshake()
    [send, *_rest] = pulls_.dispatch()
    assert isinstance(send.message, messages.Pull)
    assert gen_scheduler.describe(send.message.unit) == (
        f"unit {send.message.unit} (the next 2 elements of pass 0, epoch 0)"
    )


def test_hdf_a_file_a_worker_cannot_read_moves_and_its_unit_is_made_again() -> None:
    fleet, scheduler, config = hdf_fleet(2, epochs=1, budget=2)
    fleet.handshake()
    fleet.dispatch()
    blind = next(p for p in fleet.live if fleet.inbox[p])
    answer_until_a_unit(fleet, blind)  # the JOB of its second reads (the ring) comes first
    unit = fleet.inbox[blind].popleft()  # it fails on this unit's first file
    assert isinstance(unit, messages.Unit)
    file_index = unit.rows[0].file
    sends = scheduler.unreadable(blind, file_index, unit.unit)
    assert sends is not None
    fleet.post(sends)
    [heir] = {s.peer for s in sends if isinstance(s.message, messages.Job)}
    assert heir is not blind and job_files(sends) == [file_index]
    assert file_index not in scheduler.owners.files_of(blind) and unit.unit not in blind.outstanding
    # None of its rows goes anywhere before the heir's INDEX matched the plan.
    resent = [s.message for s in sends if isinstance(s.message, messages.Unit)]
    assert not {r.file for u in resent for r in u.rows} & {file_index}
    taken = fleet.run(random.Random(5))
    assert [check_hdf_batch(b) for b in taken] == planned_batches(config, INDEX, [0])
    assert file_index in scheduler.owners.files_of(heir) and fleet.counters.unreadable_files == 1
    # The heir cannot read it either, and nobody else is left: the caller ends the run.
    assert scheduler.unreadable(heir, file_index, None) is None


def test_hdf_an_error_about_a_file_the_job_does_not_have_moves_nothing() -> None:
    fleet, scheduler, _config = hdf_fleet(2, epochs=1)
    fleet.handshake()
    assert scheduler.unreadable(fleet.live[0], len(FILES), None) is None
    assert fleet.counters.malformed_messages == 1 and fleet.counters.unreadable_files == 0


def test_hdf_local_workers_start_from_a_known_index_and_send_none() -> None:
    peers = [make_peer(f"p{i}", local=True) for i in range(2)]
    fleet, scheduler, config = hdf_fleet(peers, budget=3, known=INDEX)
    sends = scheduler.start(fleet.live)
    assert scheduler.ready and scheduler.planned_from_known  # before any worker answered
    jobs = [s.message for s in sends]
    assert all(isinstance(j, messages.Job) and not j.send_index for j in jobs)
    fleet.post(sends)
    for peer in fleet.live:
        assert fleet.answer_all(peer) == [] and not fleet.inbox[peer]  # no INDEX came back
    fleet.dispatch()
    fleet.answer_one(fleet.pending()[0])
    # A loss: the heir is asked for the INDEX of what it takes over, compared with the plan.
    lost = next(p for p in fleet.live if scheduler.owners.files_of(p))
    files = sorted(scheduler.owners.files_of(lost))
    moved = fleet.lose(lost)
    heir_jobs = [s.message for s in moved.sends if isinstance(s.message, messages.Job)]
    # ... unless the heir reads the file already as an extra reader (its copy is the one
    # this host indexed): then it owns the file at once, with no JOB (hdf5/sharing.py).
    promoted = [f for f in files if scheduler.owners.owner(f) is not None]
    assert all(j.send_index for j in heir_jobs)
    assert sorted(job_files(moved.sends) + promoted) == files
    taken = fleet.run(random.Random(6))
    assert [check_hdf_batch(b) for b in taken] == planned_batches(config, INDEX, [0, 1])
    assert fleet.counters.index_mismatches == 0


def test_hdf_a_known_index_is_not_used_with_a_remote_worker_or_other_files() -> None:
    mixed = [make_peer("local", local=True), make_peer("remote")]
    fleet, scheduler, _config = hdf_fleet(mixed, known=INDEX)
    sends = scheduler.start(fleet.live)
    assert not scheduler.ready and not scheduler.planned_from_known
    assert all(isinstance(s.message, messages.Job) and s.message.send_index for s in sends)
    other = fake_index(fake_videos([4, 5]))  # another dataset's index
    peers = [make_peer(f"p{i}", local=True) for i in range(2)]
    _fleet, scheduler, _config = hdf_fleet(peers, known=other)
    scheduler.start(peers)
    assert not scheduler.ready and not scheduler.planned_from_known


def test_hdf_a_whole_batch_never_goes_to_a_peer_busier_than_another_reader_of_its_files() -> None:
    # Dispatch guarantee 7, balance first: 3 files on 3 peers with the ring of second readers,
    # so a batch of two files has one peer reading both. The rest of the run is dispatched at
    # once; replayed in order, a batch sent whole to a peer never found another reader of
    # one of its files with fewer rows in flight. (Before, the one peer reading every file of
    # a mixed batch took it whatever its load: after a worker rejoined reading one file of
    # two, the other took every mixed batch and the rejoined one idled, at half the rate.)
    fleet, scheduler = _ring_of_three_confirmed()
    fleet.gate.grow_to(60)
    sent = fleet.dispatch()
    units = [send for send in sent if isinstance(send.message, messages.Unit)]

    def readers(file: int) -> set[Peer]:
        owner = scheduler.owners.owner(file)
        return set(scheduler.readers.confirmed(file)) | ({owner} if owner else set())

    in_flight: collections.Counter[Peer] = collections.Counter()
    by_batch: dict[int, list[Send]] = collections.defaultdict(list)
    for send in units:
        by_batch[send.message.batch].append(send)
    whole = 0
    for batch_units in by_batch.values():  # in the order they were sent
        batch_files = {row.file for send in batch_units for row in send.message.rows}
        if len(batch_units) == 1 and len(batch_files) > 1:
            whole += 1
            peer = batch_units[0].peer
            others = set().union(*(readers(f) for f in batch_files)) - {peer}
            assert all(in_flight[peer] <= in_flight[other] for other in others), (
                peer.name, {p.name: in_flight[p] for p in others}, in_flight[peer]
            )  # fmt: skip
        for send in batch_units:
            in_flight[send.peer] += len(send.message.rows)
    assert whole, "no batch of several files went whole: nothing tested"
