"""When an iteration may start: the rule of :func:`h5feed.consumer.core.loop.all_connected`."""

from __future__ import annotations

from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.loop import all_connected


def peer(name: str, local: bool) -> Peer:
    return Peer(name.encode(), name, 1, "host", local=local)


def test_a_producer_that_said_hello_first_does_not_stand_in_for_a_local_worker() -> None:
    producer, local = peer("remote-0", local=False), peer("w-0", local=True)
    assert not all_connected([producer], 1, "tcp://127.0.0.1:5555")
    assert all_connected([producer, local], 1, "tcp://127.0.0.1:5555")
    assert not all_connected([local], 2, None)  # every local worker, not some


def test_with_listen_one_worker_of_any_kind_is_enough_and_without_none_is_needed() -> None:
    assert not all_connected([], 0, "tcp://127.0.0.1:5555")
    assert all_connected([peer("remote-0", local=False)], 0, "tcp://127.0.0.1:5555")
    assert all_connected([peer("w-0", local=True)], 1, None)
