"""IndexDebts on its own: who owes the HDF5 scheduler an INDEX since when, and who is proven;
no messages, sockets or scheduler (the scheduler's use:
tests/unit/consumer/test_silent_peers.py)."""

from __future__ import annotations

from fake_peers import make_peer

from h5feed.consumer.hdf5.index_debts import IndexDebts


def test_a_peer_owes_from_its_first_ask_and_a_second_ask_keeps_the_clock() -> None:
    debts, a = IndexDebts(), make_peer("a")
    debts.ask(a, [0, 1])
    since = a.owes_since
    assert since is not None and debts.owed(a) == {0, 1}
    debts.ask(a, [2])
    assert a.owes_since == since and debts.owed(a) == {0, 1, 2}


def test_an_answer_that_leaves_some_owed_starts_the_clock_again() -> None:
    debts, a = IndexDebts(), make_peer("a")
    debts.ask(a, [0, 1])
    a.owes_since = 0.0  # asked long ago
    debts.answered(a, [0])
    assert a.owes_since is not None and a.owes_since > 0.0 and debts.owed(a) == {1}


def test_the_answer_that_leaves_none_owed_clears_the_clock() -> None:
    debts, a = IndexDebts(), make_peer("a")
    debts.ask(a, [0, 1])
    debts.answered(a, [0, 1, 7])  # a file never asked changes nothing
    assert a.owes_since is None and debts.owed(a) == set()


def test_an_answer_from_a_peer_that_owes_nothing_changes_nothing() -> None:
    debts, a = IndexDebts(), make_peer("a")
    debts.answered(a, [0])
    assert a.owes_since is None and debts.owed(a) == set()


def test_asking_for_no_file_owes_nothing() -> None:
    debts, a = IndexDebts(), make_peer("a")
    debts.ask(a, [])
    assert a.owes_since is None and debts.owed(a) == set()


def test_a_file_unasked_keeps_the_clock_until_nothing_is_owed() -> None:
    debts, a = IndexDebts(), make_peer("a")
    debts.ask(a, [0, 1])
    a.owes_since = 5.0
    debts.unask(a, 0)  # it went to another peer: the deadline runs on for file 1
    assert a.owes_since == 5.0 and debts.owed(a) == {1}
    debts.unask(a, 1)
    assert a.owes_since is None and debts.owed(a) == set()
    debts.unask(a, 1)  # twice: nothing more
    assert a.owes_since is None


def test_local_workers_are_proven_and_others_once_they_delivered() -> None:
    debts = IndexDebts()
    local, remote = make_peer("l", local=True), make_peer("r")
    assert debts.proven(local) and not debts.proven(remote)
    debts.delivered(remote)
    assert debts.proven(remote)


def test_a_forgotten_peer_owes_nothing_and_is_proven_no_more() -> None:
    debts, a = IndexDebts(), make_peer("a")
    debts.ask(a, [0])
    debts.delivered(a)
    debts.forget(a)
    assert debts.owed(a) == set() and not debts.proven(a)
    again = make_peer("a")  # a new connection under the same identity starts afresh
    assert not debts.proven(again) and debts.owed(again) == set()


def test_owed_is_a_copy_that_cannot_change_the_record() -> None:
    debts, a = IndexDebts(), make_peer("a")
    debts.ask(a, [0])
    debts.owed(a).clear()
    assert debts.owed(a) == {0}
