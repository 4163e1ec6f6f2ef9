"""Which unit a worker's death counts against (``recovery`` rule 4): the one it was making.

A worker answers its units in the order they were sent, so when it dies the oldest unit it
holds is the one it was making; the units queued behind it were not begun. Counting them too
named the wrong sample: a poison unit with another unit behind it, re-sent together three
times, put both at the limit, and the error could name the innocent one (seen once in
tests/system/test_failures.py). In memory: the real HDF5 scheduler of the small dataset."""

from __future__ import annotations

import time

import pytest
from scheduler_data import hdf_fleet

from h5feed.common.errors import PoisonUnitError
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.recovery import UnitAttempts
from h5feed.consumer.hdf5.scheduler import HdfScheduler


def _holding_two_units() -> tuple[Peer, HdfScheduler, int, int]:
    fleet, scheduler, _config = hdf_fleet(1)
    fleet.handshake()
    fleet.dispatch()
    (peer,) = fleet.live
    first, second, *_ = sorted(peer.outstanding)
    return peer, scheduler, first, second


def test_a_death_counts_only_the_oldest_unit_its_worker_held() -> None:
    peer, scheduler, behind, poison = _holding_two_units()
    attempts = UnitAttempts(limit=2)
    now = time.monotonic()
    # The unit behind has the lower id (made first, as a re-sent unit may be) but was sent
    # to this worker after the poison unit.
    peer.outstanding.clear()
    peer.outstanding.update({behind: now + 1.0, poison: now})
    attempts.holder_died(peer, scheduler, "exited")
    with pytest.raises(PoisonUnitError) as info:
        attempts.holder_died(peer, scheduler, "exited")
    named = {name for _key, name in scheduler.samples_of(poison)}
    assert set(info.value.samples) == named
    assert not named & {name for _key, name in scheduler.samples_of(behind)}


def test_a_unit_that_waited_behind_a_poison_unit_carries_no_attempt_of_it() -> None:
    peer, scheduler, poison, behind = _holding_two_units()
    attempts = UnitAttempts(limit=2)
    now = time.monotonic()
    peer.outstanding.clear()
    peer.outstanding.update({poison: now, behind: now + 1.0})
    attempts.holder_died(peer, scheduler, "exited")  # it died making the poison unit
    peer.outstanding.clear()
    peer.outstanding[behind] = now + 2.0  # later, the unit behind is the oldest of another
    attempts.holder_died(peer, scheduler, "exited")  # its first attempt: no error
    with pytest.raises(PoisonUnitError):
        attempts.holder_died(peer, scheduler, "exited")  # its second


def test_a_death_with_nothing_held_counts_nothing() -> None:
    peer, scheduler, _poison, _behind = _holding_two_units()
    attempts = UnitAttempts(limit=1)
    peer.outstanding.clear()
    attempts.holder_died(peer, scheduler, "exited")  # limit 1: any count would raise
