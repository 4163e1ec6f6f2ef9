"""FileOwners on its own: who owns each HDF5 file, with no messages, sockets or scheduler."""

from __future__ import annotations

import pytest
from fake_peers import make_peer
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.hdf5.file_owners import FileOwners


def owners_of(peers: list[Peer], shares: list[list[int]]) -> FileOwners:
    """Owners where ``peers[i]`` owns ``shares[i]`` (every peer live)."""
    owners = FileOwners()
    for peer, files in zip(peers, shares, strict=True):
        owners.add_peer(peer)
        for file_index in files:
            owners.assign(file_index, peer)
    return owners


def test_both_directions_agree_after_assignment() -> None:
    a, b = make_peer("a"), make_peer("b")
    owners = owners_of([a, b], [[2, 0], [1]])
    assert owners.files_of(a) == [2, 0] and owners.files_of(b) == [1]  # in the order got
    assert [owners.owner(f) for f in range(3)] == [a, b, a]
    assert owners.count(a) == 2 and owners.started and owners.unowned() == []
    assert owners.owner(7) is None  # a file never assigned
    assert owners.owners([1, 7, 0]) == [b, None, a]


def test_a_file_owned_already_cannot_be_assigned_again() -> None:
    a, b = make_peer("a"), make_peer("b")
    owners = owners_of([a, b], [[0], []])
    with pytest.raises(ValueError, match="file 0"):
        owners.assign(0, b)
    assert owners.owner(0) is a and owners.files_of(b) == []


def test_files_of_is_a_copy_that_cannot_change_the_record() -> None:
    a = make_peer("a")
    owners = owners_of([a], [[0, 1]])
    owners.files_of(a).clear()
    assert owners.files_of(a) == [0, 1]


def test_the_owner_keeps_a_file_until_its_takers_move_is_confirmed() -> None:
    a, b = make_peer("a"), make_peer("b")
    owners = owners_of([a, b], [[0, 1], []])
    owners.begin_move(1, b)
    assert owners.owner(1) is a and owners.taker(1) is b
    assert owners.holds(b) and owners.files_of(b) == []
    assert owners.confirm(1) is b
    assert owners.owner(1) is b and owners.taker(1) is None
    assert owners.files_of(a) == [0] and owners.files_of(b) == [1]


def test_the_owner_cannot_take_over_its_own_file() -> None:
    a = make_peer("a")
    owners = owners_of([a], [[0]])
    with pytest.raises(ValueError, match="file 0"):
        owners.begin_move(0, a)
    assert owners.taker(0) is None


def test_confirming_a_move_never_begun_raises() -> None:
    a = make_peer("a")
    owners = owners_of([a], [[0]])
    with pytest.raises(KeyError):
        owners.confirm(0)
    assert owners.owner(0) is a


def test_a_refused_peer_loses_the_file_and_is_never_a_candidate_again() -> None:
    a, b, c = make_peer("a"), make_peer("b"), make_peer("c")
    owners = owners_of([a, b, c], [[0], [1], []])
    owners.refuse(0, a)  # it cannot read its own file
    assert owners.owner(0) is None and owners.files_of(a) == [] and owners.unowned() == [0]
    owners.begin_move(1, c)
    owners.refuse(1, c)  # its copy differed: the file stays with its owner
    assert owners.owner(1) is b and owners.taker(1) is None
    assert owners.candidates(0) == [b, c] and owners.candidates(1) == [a, b]
    assert owners.candidates(0, exclude=b) == [c]
    again = make_peer("a", pid=2)  # the same identity, a new connection
    owners.release(a)
    owners.add_peer(again)
    assert again not in owners.candidates(0)


def test_a_lost_peer_gives_back_its_files_then_those_it_took_from_nobody() -> None:
    a, b, c = make_peer("a"), make_peer("b"), make_peer("c")
    owners = owners_of([a, b, c], [[3, 0], [1, 2], []])
    owners.refuse(2, b)  # file 2: nobody owns it now
    owners.begin_move(2, a)  # a takes it over from nobody
    owners.begin_move(1, a)  # and is to take file 1 from b, a live owner
    assert owners.release(a) == [3, 0, 2]
    assert owners.owner(1) is b and owners.taker(1) is None  # b keeps what it was handing
    assert not owners.holds(a) and a not in owners.live and a not in owners.candidates(0)
    assert sorted(owners.unowned()) == [0, 2, 3]


def test_release_of_a_peer_that_holds_nothing_returns_nothing() -> None:
    a, b = make_peer("a"), make_peer("b")
    owners = owners_of([a, b], [[0], []])
    assert owners.release(b) == [] and owners.live == [a]


def test_unowned_leaves_out_files_being_taken_over() -> None:
    a, b = make_peer("a"), make_peer("b")
    owners = owners_of([a, b], [[0, 1], []])
    owners.release(a)
    owners.begin_move(0, b)
    assert owners.unowned() == [1]


def test_a_joiner_takes_its_share_from_the_most_loaded_last_got_first() -> None:
    a, b, joiner = make_peer("a"), make_peer("b"), make_peer("c")
    owners = owners_of([a, b], [[0, 1, 2, 3], [4, 5, 6]])
    owners.add_peer(joiner)
    # Share 7 // 3 = 2; a file moving away no longer counts as its donor's load, so after a
    # gives 3 the two tie at 3 and b (the higher identity) gives the second.
    assert owners.share_for(joiner) == [3, 6]
    # Moves begun, not done: the donors keep the files until the joiner's INDEX matches.
    assert owners.owner(3) is a and owners.taker(3) is joiner
    assert owners.share_for(joiner) == []  # moves begun count towards its share


def test_a_joiner_never_takes_a_donor_below_its_share() -> None:
    a, b, joiner = make_peer("a"), make_peer("b"), make_peer("c")
    owners = owners_of([a, b], [[0, 1], [2, 3]])
    owners.add_peer(joiner)  # share 4 // 3 = 1
    assert owners.share_for(joiner) == [3]  # b is the most loaded on a tie (identity)
    owners2 = owners_of([a, b], [[0], [1]])
    owners2.add_peer(joiner)  # share 2 // 3 = 0
    assert owners2.share_for(joiner) == []


def test_a_donor_is_never_left_below_the_share_by_files_it_is_handing_over() -> None:
    a, b, joiner = make_peer("a"), make_peer("b"), make_peer("c")
    owners = owners_of([a, b], [[0, 1, 2, 3, 4], [5, 6, 7, 8]])
    owners.add_peer(joiner)  # share 9 // 3 = 3
    assert owners.share_for(joiner) == [4, 8, 3]
    assert [owners.load(p) for p in (a, b, joiner)] == [3, 3, 3]


def test_a_joiner_gets_its_share_while_a_lost_peers_files_move_to_a_survivor() -> None:
    # Issue 21's race: a local worker dies, its files begin moving to the survivor, and only
    # then does the replacement's hello arrive. The survivor's own files are its share.
    a, b, joiner = make_peer("a"), make_peer("b"), make_peer("c")
    owners = owners_of([a, b], [[0, 1], [2, 3]])
    for file_index in owners.release(a):
        owners.begin_move(file_index, b)
    assert owners.load(b) == 4 and owners.count(b) == 2
    owners.add_peer(joiner)  # share 4 // 2 = 2
    assert owners.share_for(joiner) == [3, 2]
    assert owners.load(b) == 2 and owners.load(joiner) == 2
    assert owners.taker(0) is b and owners.taker(1) is b  # those moves go on


def test_load_counts_files_taken_over_and_not_those_handed_over() -> None:
    a, b = make_peer("a"), make_peer("b")
    owners = owners_of([a, b], [[0, 1, 2], []])
    owners.begin_move(2, b)
    assert (owners.count(a), owners.load(a), owners.count(b), owners.load(b)) == (3, 2, 0, 1)
    owners.confirm(2)
    assert (owners.load(a), owners.load(b)) == (2, 1)


def test_a_file_moving_already_is_not_given_to_a_joiner() -> None:
    a, b, joiner = make_peer("a"), make_peer("b"), make_peer("c")
    owners = owners_of([a, b], [[0, 1, 2, 3], []])
    owners.begin_move(3, b)
    owners.add_peer(joiner)  # share 4 // 3 = 1
    assert owners.share_for(joiner) == [2] and owners.taker(3) is b


class OwnersMachine(RuleBasedStateMachine):
    """Any sequence of the scheduler's operations keeps the record whole: both directions
    agree, a file has at most one owner, a taker is never the owner, a lost peer holds
    nothing, and a peer refused a file never gets it through :meth:`FileOwners.candidates`."""

    FILES = 6

    def __init__(self) -> None:
        super().__init__()
        self.owners = FileOwners()
        self.peers: list[Peer] = []
        self.lost: list[Peer] = []
        self.refused: set[tuple[bytes, int]] = set()
        self.assigned: set[int] = set()  # files ever assigned: the share's numerator

    def _live(self) -> list[Peer]:
        return self.owners.live

    @rule(data=st.data())
    def add_peer(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from("abcdef"))
        peer = make_peer(name, pid=len(self.peers) + 1)
        if any(p.identity == peer.identity for p in self._live()):
            return  # the session loses the old connection before the new one joins
        self.peers.append(peer)
        self.owners.add_peer(peer)

    @rule(file_index=st.integers(0, FILES - 1), data=st.data())
    def assign(self, file_index: int, data: st.DataObject) -> None:
        if self.owners.owner(file_index) is not None or self.owners.taker(file_index) is not None:
            return
        candidates = self.owners.candidates(file_index)
        if candidates:
            self.owners.assign(file_index, data.draw(st.sampled_from(candidates)))
            self.assigned.add(file_index)

    @rule(file_index=st.integers(0, FILES - 1), data=st.data())
    def begin_move(self, file_index: int, data: st.DataObject) -> None:
        owner = self.owners.owner(file_index)
        candidates = [p for p in self.owners.candidates(file_index) if p is not owner]
        if candidates:
            self.owners.begin_move(file_index, data.draw(st.sampled_from(candidates)))

    @rule(file_index=st.integers(0, FILES - 1))
    def confirm(self, file_index: int) -> None:
        taker = self.owners.taker(file_index)
        if taker is not None:
            assert self.owners.confirm(file_index) is taker
            assert self.owners.owner(file_index) is taker
            self.assigned.add(file_index)  # owned now: counts towards the share

    @rule(file_index=st.integers(0, FILES - 1), data=st.data())
    def refuse(self, file_index: int, data: st.DataObject) -> None:
        if self._live():
            peer = data.draw(st.sampled_from(self._live()))
            self.owners.refuse(file_index, peer)
            self.refused.add((peer.identity, file_index))

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        if self._live():
            peer = data.draw(st.sampled_from(self._live()))
            held = self.owners.files_of(peer)
            back = self.owners.release(peer)
            assert back[: len(held)] == held
            assert all(self.owners.owner(f) is None for f in back)
            self.lost.append(peer)

    @rule(data=st.data())
    def join_share(self, data: st.DataObject) -> None:
        if self._live() and self.owners.started:
            joiner = data.draw(st.sampled_from(self._live()))
            share = len(self.assigned) // len(self._live())
            before = self.owners.load(joiner)
            donors = set()
            for file_index in self.owners.share_for(joiner):
                assert self.owners.taker(file_index) is joiner
                donor = self.owners.owner(file_index)
                assert donor is not None and donor is not joiner
                donors.add(donor)
            assert all(self.owners.load(d) >= share for d in donors)  # none left below it
            assert self.owners.load(joiner) <= max(before, share)

    @invariant()
    def both_directions_agree(self) -> None:
        seen: list[int] = []
        for peer in self.peers:
            files = self.owners.files_of(peer)
            assert all(self.owners.owner(f) is peer for f in files)
            assert self.owners.count(peer) == len(files)
            seen += files
        assert len(seen) == len(set(seen))  # at most one owner each
        owned = {f for f in range(self.FILES) if self.owners.owner(f) is not None}
        assert owned == set(seen)
        every = list(range(self.FILES))
        assert self.owners.owners(every) == [self.owners.owner(f) for f in every]

    @invariant()
    def load_is_what_the_moves_make_it(self) -> None:
        moves = self.owners.moves()
        for peer in self.peers:
            owned = self.owners.files_of(peer)
            staying = sum(1 for f in owned if self.owners.taker(f) is None)
            coming = sum(1 for _f, taker in moves if taker is peer)
            assert self.owners.load(peer) == staying + coming

    @invariant()
    def a_taker_is_never_the_owner(self) -> None:
        for file_index, taker in self.owners.moves():
            assert self.owners.owner(file_index) is not taker

    @invariant()
    def a_lost_peer_holds_nothing(self) -> None:
        assert all(not self.owners.holds(p) for p in self.lost)

    @invariant()
    def a_refused_peer_is_never_a_candidate(self) -> None:
        for identity, file_index in self.refused:
            assert all(p.identity != identity for p in self.owners.candidates(file_index))

    @invariant()
    def unowned_is_neither_owned_nor_moving(self) -> None:
        # Kept with every change (O(changes), not a scan): exactly the files once held that
        # have neither an owner nor a taker now.
        expected = {
            f
            for f in self.assigned
            if self.owners.owner(f) is None and self.owners.taker(f) is None
        }
        assert set(self.owners.unowned()) == expected
        assert len(self.owners.unowned()) == len(expected)
        assert self.owners.any_unowned == bool(expected)


OwnersMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestOwnersMachine = OwnersMachine.TestCase
