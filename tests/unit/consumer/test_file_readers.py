"""Extra readers of HDF5 files (work follows cores, not files): the dealing rule alone, the
record under any sequence of joins, losses, refusals and moves (a hypothesis state machine),
and the scheduler driven by fake peers: 1 file on 3 workers, balance by throughput, a remote
copy that differs, a lost owner's file kept by a reader."""

from __future__ import annotations

import collections
import random
from collections.abc import Sequence

import numpy as np
import pytest
from fake_peers import (
    FakeWorker,
    Fleet,
    fake_index,
    fake_videos,
    hdf_config,
    make_peer,
    planned_batches,
)
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from h5feed.common.errors import DataError
from h5feed.common.protocol import messages
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.scheduler import Send
from h5feed.consumer.hdf5.file_owners import FileOwners
from h5feed.consumer.hdf5.file_readers import FileReaders, deal, ring
from h5feed.consumer.hdf5.scheduler import HdfScheduler
from h5feed.consumer.hdf5.sharing import Sharing
from h5feed.consumer.options import HdfConfig
from h5feed.consumer.plan.epoch_plan import Cursor, FileColumns

JOB = "job-readers"
OPTIONS = {"clips_per_video": 2, "batch_size": 4, "seed": 11}


def dealt(weights: Sequence[float], owner_of: Sequence[int], peers: int) -> list[tuple[int, str]]:
    """:func:`deal` for files owned as ``owner_of`` says, as (file, peer name)."""
    live = [make_peer(f"p{i}") for i in range(peers)]
    held = {p: [f for f, o in enumerate(owner_of) if o == i] for i, p in enumerate(live)}
    return [(f, p.name) for f, p in deal(np.asarray(weights, np.float64), held, lambda f, p: True)]


def test_one_file_is_read_by_every_worker() -> None:
    assert dealt([60], [0], 3) == [(0, "p1"), (0, "p2")]


def test_n_plus_one_files_on_n_workers_share_the_extra_file() -> None:
    # 3 equal files on 2 workers: p0 owns two (2 of 3 shares), p1 reads one of them too.
    assert dealt([20, 20, 20], [0, 1, 0], 2) == [(0, "p1")]


def test_files_dealt_evenly_already_get_no_extra_reader() -> None:
    assert dealt([30, 30], [0, 1], 2) == []
    assert dealt([10, 20, 30], [0, 0, 1], 2) == []


def test_fewer_files_than_workers_every_worker_reads_its_share() -> None:
    # 3 files on 8 workers: 7 extra reads, some worker reading two files.
    reads = dealt([1, 1, 1], [0, 1, 2], 8)
    assert {p for _f, p in reads} == {f"p{i}" for i in range(3, 8)}
    assert max_flow_is_fair([1, 1, 1], 8, {f: {f"p{f}"} for f in range(3)}, reads)


def test_a_refused_file_is_never_dealt_to_that_peer() -> None:
    live = [make_peer(f"p{i}") for i in range(3)]
    held = {live[0]: [0], live[1]: [], live[2]: []}
    reads = deal(np.asarray([60.0]), held, lambda f, p: p is not live[1])
    assert [(f, p.name) for f, p in reads] == [(0, "p2")]


def max_flow_is_fair(
    weights: Sequence[int], peers: int, held: dict[int, set[str]], extra: list[tuple[int, str]]
) -> bool:
    """Whether a routing exists that gives each of ``peers`` exactly its fair share of the
    held weight (readers: ``held`` and ``extra``), by a max flow in integers (scaled)."""
    readers = {f: set(names) for f, names in held.items()}
    for f, name in extra:
        readers.setdefault(f, set()).add(name)
    names = sorted({n for r in readers.values() for n in r} | {f"p{i}" for i in range(peers)})
    total = sum(weights[f] for f in readers)
    return fair_flow(weights, readers, names[:peers] if len(names) == peers else names, total)


def fair_flow(
    weights: Sequence[int], readers: dict[int, set[str]], names: list[str], total: int
) -> bool:
    """Max flow source -> file (w * peers) -> its readers -> sink (total each) == total * peers."""
    n = len(names)
    nodes = ["s", *[f"f{f}" for f in readers], *names, "t"]
    at = {v: i for i, v in enumerate(nodes)}
    cap = collections.defaultdict(int)
    for f, rs in readers.items():
        cap[at["s"], at[f"f{f}"]] = weights[f] * n
        for r in rs:
            if r in at:
                cap[at[f"f{f}"], at[r]] = total * n
    for name in names:
        cap[at[name], at["t"]] = total
    flow = 0
    while True:  # Edmonds-Karp: shortest augmenting paths
        parent = {at["s"]: -1}
        queue = collections.deque([at["s"]])
        while queue and at["t"] not in parent:
            u = queue.popleft()
            for v in range(len(nodes)):
                if v not in parent and cap[u, v] > 0:
                    parent[v] = u
                    queue.append(v)
        if at["t"] not in parent:
            return flow == total * n
        v, push = at["t"], total * n
        while parent[v] != -1:
            push, v = min(push, cap[parent[v], v]), parent[v]
        v = at["t"]
        while parent[v] != -1:
            cap[parent[v], v] -= push
            cap[v, parent[v]] += push
            v = parent[v]
        flow += push


class ReadersMachine(RuleBasedStateMachine):
    """Any sequence of joins, losses, refusals and moves, with a deal after each (as the
    scheduler deals at the next dispatch), keeps every file read only by live peers allowed
    to read it (never its owner or taker twice over), nothing held by a lost peer, and, while
    nobody was refused and no move is under way, a routing that gives every live peer exactly
    its fair share."""

    VIDEOS = (3, 1, 4, 2, 5)

    def __init__(self) -> None:
        super().__init__()
        self.index = fake_index(fake_videos(list(self.VIDEOS)))
        self.owners = FileOwners()
        self.counters = Counters()
        self.sharing = Sharing(self.owners, self.index.files, JOB, self.counters)
        self.readers: FileReaders = self.sharing.readers
        self.lost: list[Peer] = []
        self.made = 0
        self.refusals = 0
        self.jobs: list[tuple[Peer, list[int], bool]] = []
        first = self._peer(local=True)
        for f in range(len(self.VIDEOS)):
            self.owners.assign(f, first)
        self.sharing.learnt_here()
        self._deal()

    def _peer(self, local: bool) -> Peer:
        self.made += 1
        peer = make_peer(f"w{self.made}", local=local, pid=self.made)
        self.owners.add_peer(peer)
        return peer

    def _deal(self) -> None:
        def job(peer: Peer, files: list[int], ask: bool) -> list[Send]:
            self.jobs.append((peer, files, ask))
            return []

        self.sharing.deal(self.index, job)

    def _place(self, file_index: int) -> None:
        """A file with neither owner nor taker goes on, as the scheduler's _move."""
        if self.owners.owner(file_index) is not None or self.owners.taker(file_index):
            return
        candidates = self.owners.candidates(file_index)
        if not candidates:
            return  # waits for a joiner
        if self.sharing.heir(file_index, candidates, self.owners.load) is None:
            heir = min(candidates, key=lambda p: (self.owners.load(p), p.identity))
            self.sharing.taking(file_index, heir)
            self.owners.assign(file_index, heir)

    @rule(local=st.booleans())
    def join(self, local: bool) -> None:
        self._peer(local)
        for f in self.owners.unowned():
            self._place(f)
        self._deal()

    @precondition(lambda self: len(self.owners.live) > 0)
    @rule(data=st.data())
    def lose(self, data: st.DataObject) -> None:
        peer = data.draw(st.sampled_from(self.owners.live))
        files = self.owners.release(peer)
        self.readers.release(peer)
        self.lost.append(peer)
        for f in files:
            self._place(f)
        self._deal()

    @precondition(lambda self: len(self.owners.live) > 0)
    @rule(file_index=st.integers(0, len(VIDEOS) - 1), data=st.data())
    def refuse(self, file_index: int, data: st.DataObject) -> None:
        peer = data.draw(st.sampled_from(self.owners.live))
        self.owners.refuse(file_index, peer)
        self.readers.refuse(file_index, peer)
        self.refusals += 1
        self._place(file_index)
        self._deal()

    @precondition(lambda self: len(self.owners.live) > 1)
    @rule(file_index=st.integers(0, len(VIDEOS) - 1), data=st.data())
    def move(self, file_index: int, data: st.DataObject) -> None:
        owner = self.owners.owner(file_index)
        candidates = [p for p in self.owners.candidates(file_index) if p is not owner]
        if owner is None or not candidates or self.owners.taker(file_index) is not None:
            return
        taker = data.draw(st.sampled_from(candidates))
        self.sharing.taking(file_index, taker)
        self.owners.begin_move(file_index, taker)
        self._deal()

    @rule(file_index=st.integers(0, len(VIDEOS) - 1))
    def confirm_move(self, file_index: int) -> None:
        if self.owners.taker(file_index) is not None:
            self.owners.confirm(file_index)
            self._deal()  # the scheduler deals again once a move is confirmed

    @rule(file_index=st.integers(0, len(VIDEOS) - 1), matches=st.booleans())
    def index_of_a_pending_reader(self, file_index: int, matches: bool) -> None:
        pending = [
            p for p in self.readers.readers(file_index) if self.readers.pending(file_index, p)
        ]
        if not pending:
            return
        where = np.flatnonzero(self.index.file_of_video == file_index)
        planned = FileColumns(
            tuple(self.index.names[where].tolist()),
            self.index.frames[where],
            self.index.labels[where],
        )
        found = (
            planned if matches else FileColumns(planned.names, planned.frames + 1, planned.labels)
        )
        accepted = self.sharing.check(pending[0], file_index, planned, found)
        assert accepted == matches
        if not matches:
            self.refusals += 1
            self._deal()

    @invariant()
    def readers_are_live_allowed_and_never_owner_or_taker(self) -> None:
        live = {p.identity for p in self.owners.live}
        for f in range(len(self.VIDEOS)):
            readers = self.readers.readers(f)
            assert len(readers) == len(set(readers))
            for peer in readers:
                assert peer.identity in live and peer not in self.lost
                assert not self.owners.refused(f, peer)
                assert self.owners.owner(f) is not peer and self.owners.taker(f) is not peer
                assert f in self.readers.files_of(peer)
            assert set(self.readers.confirmed(f)) <= set(readers)

    @invariant()
    def a_lost_peer_holds_and_reads_nothing(self) -> None:
        for peer in self.lost:
            assert not self.sharing.holds(peer) and not self.readers.files_of(peer)

    @invariant()
    def without_refusals_every_live_peer_can_make_its_fair_share(self) -> None:
        live = self.owners.live
        if self.refusals or not live or self.owners.moves():
            return  # a move is transient: the owner makes the rows until it is confirmed
        readers: dict[int, set[str]] = {}
        for f in range(len(self.VIDEOS)):
            holder = self.owners.taker(f) or self.owners.owner(f)
            if holder is not None:
                readers[f] = {holder.name, *(p.name for p in self.readers.readers(f))}
        total = sum(self.VIDEOS[f] for f in readers)
        assert fair_flow(self.VIDEOS, readers, [p.name for p in live], total)

    @invariant()
    def local_reads_of_a_file_indexed_here_need_no_index(self) -> None:
        for peer, files, ask in self.jobs:
            assert ask == (not peer.local), (peer, files)


ReadersMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestReadersMachine = ReadersMachine.TestCase


# -- the scheduler, driven by fake peers ------------------------------------------------------


def test_the_ring_gives_every_held_file_a_second_reader_where_allowed() -> None:
    live = [make_peer(f"p{i}") for i in range(3)]
    held = {live[0]: [0, 1], live[1]: [2], live[2]: []}
    reads = ring(held, lambda f, p: (f, p.name) != (1, "p1"))
    assert [(f, p.name) for f, p in reads] == [(0, "p1"), (2, "p2")]
    assert ring({live[0]: [0, 1]}, lambda f, p: True) == []  # nobody to share with


def one_file_fleet(
    peers: list[Peer], videos: int | Sequence[int] = 10, budget: int = 4, epochs: int = 2
) -> tuple[Fleet, HdfScheduler, HdfConfig]:
    files = fake_videos([videos] if isinstance(videos, int) else videos)
    config = hdf_config(list(files), **OPTIONS)
    counters = Counters()
    scheduler = HdfScheduler(config, JOB, iter(range(epochs)), Cursor(), counters)
    workers = [FakeWorker(p, files) for p in peers]
    return Fleet(scheduler, workers, CreditGate(budget, lambda: None), counters), scheduler, config


def rows_made(fleet: Fleet) -> dict[str, int]:
    made: dict[str, int] = collections.Counter()
    for peer, worker in fleet.workers.items():
        made[peer.name] += sum(len(m.rows) for m in worker.received if isinstance(m, messages.Unit))
    return made


def test_one_file_on_three_workers_every_worker_makes_rows_and_batches_are_the_plans() -> None:
    peers = [make_peer(f"p{i}", local=True) for i in range(3)]
    fleet, scheduler, config = one_file_fleet(peers)
    fleet.handshake()
    taken = fleet.run(random.Random(3))
    index = scheduler.index
    assert index is not None
    assert [b.arrays["sample"].tolist() for b in taken] == planned_batches(config, index, [0, 1])
    made = rows_made(fleet)
    assert all(made[p.name] > 0 for p in peers), made
    figures = scheduler.figures()
    assert figures.files_owned is not None
    assert [figures.files_owned(p) for p in peers] == [1, 1, 1]  # each reads the one file
    # The extra readers are local and the file was indexed here: no second INDEX asked.
    jobs = [m for w in fleet.workers.values() for m in w.received if isinstance(m, messages.Job)]
    assert sum(job.send_index for job in jobs if job.files) == 1


@pytest.mark.parametrize("videos", [[60], [30, 30], [20, 20, 20, 20]], ids=["1", "2", "4"])
def test_a_worker_at_half_speed_gets_about_half_the_work(videos: list[int]) -> None:
    """Whatever the file count, even files that divide evenly between the two workers (the
    ring's second reader of each file): balanced by throughput, not by count."""
    fast, slow = make_peer("fast", local=True), make_peer("slow", local=True)
    fleet, scheduler, _config = one_file_fleet([fast, slow], videos=videos, budget=4, epochs=1)
    fleet.handshake()
    step = 0
    while not scheduler.finished:
        fleet.dispatch()
        step += 1
        for peer in (fast, slow) if step % 2 == 0 else (fast,):
            units = [m for m in fleet.inbox[peer] if isinstance(m, messages.Unit)]
            if fleet.inbox[peer] and (units or peer is fast):
                fleet.answer_one(peer)
        while fleet.released:
            fleet.take()
        assert step < 10_000
    made = rows_made(fleet)
    share = made["slow"] / (made["slow"] + made["fast"])
    assert 0.2 <= share <= 0.45, made  # about a third: half the speed of the other


def test_a_remote_reader_with_another_copy_is_refused_for_that_file_and_named() -> None:
    owner, remote = make_peer("owner", local=True), make_peer("remote")
    fleet, scheduler, config = one_file_fleet([owner, remote])
    other = {
        path: tuple(messages.VideoEntry(v.name, v.frames + 1, v.label) for v in entries)
        for path, entries in fleet.workers[owner].videos.items()
    }
    fleet.workers[remote].videos = other  # its copy differs: one more frame per video
    fleet.handshake()
    taken = fleet.run(random.Random(1))
    index = scheduler.index
    assert index is not None
    assert [b.arrays["sample"].tolist() for b in taken] == planned_batches(config, index, [0, 1])
    assert fleet.counters.index_mismatches == 1
    assert rows_made(fleet)["remote"] == 0
    assert scheduler.owners.refused(0, remote) and not scheduler.readers.reads(0, remote)


def test_a_lost_owner_whose_survivors_have_another_copy_ends_the_run_naming_it() -> None:
    """The survivor was refused the file as an extra reader (its copy differs): when the
    owner goes, nobody may take the file, and the run ends naming host, file and video (as
    when an heir's own INDEX differs), rather than waiting for a joiner."""
    owner, remote = make_peer("owner", local=True), make_peer("remote")
    fleet, scheduler, _config = one_file_fleet([owner, remote], videos=[10, 10])
    videos = dict(fleet.workers[remote].videos)  # its copy of the owner's file differs:
    videos["f0.h5"] = tuple(  # one more frame per video
        messages.VideoEntry(v.name, v.frames + 1, v.label) for v in videos["f0.h5"]
    )
    fleet.workers[remote].videos = videos
    fleet.handshake()
    for _step in range(100):
        if fleet.counters.index_mismatches:
            break
        fleet.dispatch()
        for peer in fleet.pending():
            fleet.answer_one(peer)
    assert fleet.counters.index_mismatches == 1
    assert 0 in scheduler.owners.files_of(owner)
    with pytest.raises(DataError, match=r"f0\.h5.*on host .*video") as raised:
        fleet.lose(owner)
    assert "remote" in str(raised.value)


def test_a_lost_owner_leaves_its_file_to_a_reader_with_no_job_and_nothing_lost() -> None:
    peers = [make_peer(f"p{i}", local=True) for i in range(3)]
    fleet, scheduler, _config = one_file_fleet(peers)
    fleet.handshake()
    rng = random.Random(4)
    for _ in range(12):
        fleet.dispatch()
        waiting = fleet.pending()
        if waiting:
            fleet.answer_one(rng.choice(waiting))
    owner = scheduler.owners.owner(0)
    assert owner is not None
    moved = fleet.lose(owner)
    assert not any(isinstance(s.message, messages.Job) for s in moved.sends)
    heir = scheduler.owners.owner(0)
    assert heir is not None and heir is not owner and not scheduler.readers.reads(0, heir)
    taken = fleet.run(rng)
    index = scheduler.index
    assert index is not None
    samples = collections.Counter((b.epoch, s) for b in taken for s in b.arrays["sample"].tolist())
    assert set(samples.values()) == {1} and len(samples) == 2 * index.num_videos * 2


@pytest.mark.parametrize(("counts", "workers"), [([8, 8, 8], 2), ([8, 8], 3), ([3, 20, 5], 4)])
def test_any_file_count_keeps_every_worker_making_rows(counts: list[int], workers: int) -> None:
    # N+1 files on N workers, fewer files than workers, files of very different sizes: every
    # worker makes rows, each file's rows only at its readers (FakeWorker checks its JOBs).
    files = fake_videos(counts)
    config = hdf_config(list(files), **OPTIONS)
    counters = Counters()
    scheduler = HdfScheduler(config, JOB, iter(range(2)), Cursor(), counters)
    peers = [make_peer(f"p{i}", local=True) for i in range(workers)]
    fleet = Fleet(
        scheduler, [FakeWorker(p, files) for p in peers], CreditGate(8, lambda: None), counters
    )
    fleet.handshake()
    taken = fleet.run(random.Random(5))
    index = scheduler.index
    assert index is not None
    assert [b.arrays["sample"].tolist() for b in taken] == planned_batches(config, index, [0, 1])
    made = rows_made(fleet)
    assert all(made[p.name] > 0 for p in peers), made
