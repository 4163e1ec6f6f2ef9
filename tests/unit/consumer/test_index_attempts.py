"""Which file a worker died indexing: the rule of h5feed/consumer/hdf5/index_attempts.py, in memory.

The end-to-end case (a file whose chunks crash HDF5 in every worker that indexes it) is in
tests/system/test_trust_files.py; here the bookkeeping: only the JOB in hand is blamed, suspects
travel alone, innocents never reach the limit, a BYE or a silence blames nothing.
"""

from __future__ import annotations

import pytest

from h5feed.common.errors import FileReadError
from h5feed.common.protocol import messages
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.scheduler import Send
from h5feed.consumer.hdf5.index_attempts import IndexAttempts
from h5feed.consumer.hdf5.units import merge_jobs


def peer(name: str) -> Peer:
    return Peer(name.encode(), name, 1, "host")


def job(*files: int, send_index: bool = True) -> messages.Job:
    refs = tuple(messages.FileRef(f, f"f{f}.h5") for f in files)
    return messages.Job("j", refs, {}, {}, None, "raise", send_index)


def test_only_the_job_in_hand_is_blamed_and_suspects_travel_alone() -> None:
    attempts = IndexAttempts(limit=3)
    a, b = peer("a"), peer("b")
    attempts.sent([Send(a, job(0, 1)), Send(a, job(2))])
    assert attempts.left(a, "exited") == []  # died in its first JOB: 0 and 1, not 2
    assert attempts.deaths == {0: 1, 1: 1}
    # the suspects go alone, after the merged rest of the heir's JOBs
    sends = merge_jobs([Send(b, job(0, 1)), Send(b, job(2))], attempts.suspects)
    assert [[r.number for r in s.message.files] for s in sends] == [[2], [0], [1]]  # type: ignore[union-attr]
    attempts.sent(sends)
    attempts.answered(b, [2])
    attempts.answered(b, [0])  # the innocent one answers on its own
    assert attempts.left(b, "restarted") == []  # died on 1, alone in hand
    assert attempts.deaths == {0: 1, 1: 2}
    c = peer("c")
    attempts.sent([Send(c, job(1)), Send(c, job(0))])  # 0 queued behind 1: not in hand
    assert attempts.left(c, "unreachable") == [1]
    assert attempts.deaths == {0: 1, 1: 3}


def test_a_bye_or_a_refusal_blames_nothing_and_answered_jobs_are_forgotten() -> None:
    attempts = IndexAttempts(limit=2)
    a = peer("a")
    attempts.sent([Send(a, job(0)), Send(a, job(1, send_index=False))])
    assert attempts.left(a, "bye") == [] and attempts.deaths == {}
    attempts.sent([Send(a, job(0))])
    assert attempts.left(a, "refused") == [] and attempts.deaths == {}
    attempts.sent([Send(a, job(0))])  # a quiet peer (its connection alive) blames no file
    assert attempts.left(a, "deadline") == [] and attempts.deaths == {}
    attempts.sent([Send(a, job(0)), Send(a, job(1))])
    attempts.answered(a, [0])
    assert attempts.left(a, "exited") == [] and attempts.deaths == {1: 1}
    assert IndexAttempts(limit=0).limit == 2  # never 1: a file that shared a JOB once is safe


def test_a_file_at_the_limit_raises_a_file_read_error_naming_file_host_and_last_death() -> None:
    attempts = IndexAttempts(limit=2)
    paths = ("f0.h5", "f1.h5")
    for name in ("a", "b"):
        lost = peer(name)
        lost.lost_cause = "exited"
        attempts.sent([Send(lost, job(1))])
        if name == "a":
            attempts.check_left(lost, paths)  # one death: not yet
    with pytest.raises(FileReadError, match=r"died \(2 times; the last: worker b") as raised:
        attempts.check_left(lost, paths)
    assert raised.value.file == "f1.h5" and raised.value.host == "host"
    assert raised.value.number == 1
    quiet = peer("c")
    quiet.lost_cause = "deadline"  # a silence blames nothing, so raises nothing
    attempts.sent([Send(quiet, job(1))])
    attempts.check_left(quiet, paths)


def numbers(sends: list[Send]) -> list[list[int]]:
    return [[r.number for r in s.message.files] for s in sends]  # type: ignore[union-attr]


def suspects_of(attempts: IndexAttempts, *files: int) -> None:
    """``files`` each with one death (a worker died with them in one JOB)."""
    lost = peer("lost")
    attempts.sent([Send(lost, job(*files))])
    assert attempts.left(lost, "exited") == []


def test_a_suspects_job_goes_alone_and_the_next_waits_for_its_answer() -> None:
    # A worker killed by a file loses the INDEX it had queued for the JOB before (libzmq's I/O
    # thread dies with it): with two suspects in its hands, the good one would be blamed.
    attempts = IndexAttempts(limit=3)
    suspects_of(attempts, 0, 1)
    b = peer("b")
    unit = Send(b, messages.Bye("j"))  # not a JOB: never held
    going = attempts.gate(merge_jobs([Send(b, job(0, 1)), unit], attempts.suspects))
    assert numbers(going[:1]) == [[0]] and going[1:] == [unit]
    assert attempts.release(b) == []  # 0 unanswered: 1 waits
    attempts.answered(b, [0])
    assert numbers(attempts.release(b)) == [[1]]
    assert attempts.left(b, "unreachable") == []  # it died on 1, the only JOB in its hands
    assert attempts.deaths == {0: 1, 1: 2}


def test_a_suspect_waits_for_the_jobs_before_it_and_holds_those_after_it() -> None:
    attempts = IndexAttempts(limit=3)
    suspects_of(attempts, 5)
    b = peer("b")
    assert numbers(attempts.gate([Send(b, job(0, 1))])) == [[0, 1]]  # no suspect: as before
    assert numbers(attempts.gate([Send(b, job(2))])) == [[2]]
    assert attempts.gate([Send(b, job(5)), Send(b, job(3))]) == []  # 5 waits; 3 stays behind it
    attempts.answered(b, [0, 1])
    assert attempts.release(b) == []  # 2 still unanswered
    attempts.answered(b, [2])
    assert numbers(attempts.release(b)) == [[5]]  # alone in its hands; 3 waits for its answer
    attempts.answered(b, [5])
    assert numbers(attempts.release(b)) == [[3]]
    assert numbers(attempts.gate([Send(b, job(4))])) == [[4]]  # no suspect in hand: at once


def test_held_jobs_lose_files_handed_on_and_go_with_their_peer() -> None:
    attempts = IndexAttempts(limit=3)
    suspects_of(attempts, 1, 2)
    b = peer("b")
    assert numbers(attempts.gate([Send(b, job(0)), Send(b, job(1)), Send(b, job(2))])) == [[0]]
    attempts.answered(b, [1])  # 1 handed on to another worker while held
    attempts.answered(b, [0])
    assert numbers(attempts.release(b)) == [[2]]  # 1's JOB is gone: 2 is next
    attempts.gate([Send(b, job(3))])  # held behind 2
    assert attempts.left(b, "exited") == [] and attempts.deaths == {1: 1, 2: 2}
    b2 = peer("b")  # a new connection under its identity: nothing held for it
    assert numbers(attempts.gate([Send(b2, job(4))])) == [[4]]
