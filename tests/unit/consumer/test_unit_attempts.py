"""What a worker's death counts, and which unit a PoisonUnitError names (``recovery`` rule 4).

Every unit the dead worker held counts an attempt: the trainer cannot know which one it was
making (a worker killed a millisecond after sending a DATA may take that DATA with it, so
its oldest unit may be made already; a full run showed a poison that killed five workers
when only the oldest counted). The error names, of the units at the limit, the one most
often the oldest held, the one being made: a worker answers its units in order. Counting
every held unit and naming the lowest unit id named a unit that merely waited behind the
poison (seen once in tests/system/test_failures.py). In memory: the real HDF5 scheduler of
the small dataset."""

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


def _names(scheduler: HdfScheduler, unit: int) -> set[str]:
    return {name for _key, name in scheduler.samples_of(unit)}


def _holds(peer: Peer, *units: tuple[int, float]) -> None:
    peer.outstanding.clear()
    peer.outstanding.update(dict(units))


def test_units_queued_behind_a_poison_unit_reach_the_limit_and_the_poison_is_named() -> None:
    peer, scheduler, behind, poison = _holding_two_units()
    attempts = UnitAttempts(limit=2)
    now = time.monotonic()
    # The unit behind has the lower id (made first, as a re-sent unit may be) but was sent
    # to each worker after the poison unit: the poison is the oldest held at each death.
    _holds(peer, (behind, now + 1.0), (poison, now))
    attempts.holder_died(peer, scheduler, "exited")
    with pytest.raises(PoisonUnitError) as info:
        attempts.holder_died(peer, scheduler, "exited")
    assert set(info.value.samples) == _names(scheduler, poison)
    assert not _names(scheduler, poison) & _names(scheduler, behind)


def test_a_poison_unit_counts_even_when_its_worker_took_an_older_units_data_with_it() -> None:
    peer, scheduler, made, poison = _holding_two_units()
    attempts = UnitAttempts(limit=2)
    now = time.monotonic()
    # Death 1: the poison is the oldest held. Death 2: the worker sent the DATA of an older
    # unit and died making the poison before that DATA left: the older unit looks held.
    _holds(peer, (poison, now))
    attempts.holder_died(peer, scheduler, "exited")
    _holds(peer, (made, now + 1.0), (poison, now + 2.0))
    with pytest.raises(PoisonUnitError) as info:  # the limit at the poison's second death
        attempts.holder_died(peer, scheduler, "exited")
    assert set(info.value.samples) == _names(scheduler, poison)


def test_a_unit_held_at_fewer_deaths_than_the_limit_ends_nothing() -> None:
    peer, scheduler, first, second = _holding_two_units()
    attempts = UnitAttempts(limit=3)
    now = time.monotonic()
    _holds(peer, (first, now), (second, now + 1.0))
    attempts.holder_died(peer, scheduler, "exited")
    _holds(peer, (second, now + 2.0))
    attempts.holder_died(peer, scheduler, "exited")  # first: 1, second: 2 of 3
    _holds(peer)
    attempts.holder_died(peer, scheduler, "exited")  # nothing held: nothing counted
    _holds(peer, (second, now + 3.0))
    with pytest.raises(PoisonUnitError) as info:
        attempts.holder_died(peer, scheduler, "exited")
    assert set(info.value.samples) == _names(scheduler, second)
