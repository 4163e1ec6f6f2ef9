"""h5feed/producer/files/gc_guard.py: while a URL file is open, cyclic garbage holding an h5py
object is never collected by a thread that a reader holding h5py's lock waits on."""

from __future__ import annotations

import gc
import json
import pathlib
import threading
import weakref
from collections.abc import Iterator

import h5py
import numpy as np
import pytest
from fleet_helpers import wait_for
from h5py._objects import phil

from h5feed.common.config import ClipSpec
from h5feed.common.layouts import Auto
from h5feed.common.object_urls import BENCH_ENV, BENCH_SCHEME
from h5feed.common.protocol import messages
from h5feed.producer.files import gc_guard
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset
from h5feed.producer.worker.hdf5_job import Hdf5Job


class Owner:
    """Stands for an open URL file's read-ahead source: the guard lasts as long as it does."""


class Marker:
    """Put in a garbage cycle beside an h5py object: dead once the cycle is collected."""


@pytest.fixture()
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The guard unheld, whatever earlier tests left open (their holders' finalizers are of
    an older era, so they change nothing); collection as it was afterwards."""
    enabled = gc.isenabled()
    gc.enable()
    monkeypatch.setattr(gc_guard, "_holders", 0)
    monkeypatch.setattr(gc_guard, "_era", gc_guard._era + 1)
    # restored too: what the earlier holders give back when they go is theirs, not this test's
    monkeypatch.setattr(gc_guard, "_was_enabled", gc_guard._was_enabled)
    try:
        yield
    finally:
        (gc.enable if enabled else gc.disable)()


def h5py_garbage(path: pathlib.Path) -> weakref.ref[Marker]:
    """A cycle holding an open h5py file and dataset, unreachable: freeing it takes h5py's
    lock (ObjectID.__dealloc__)."""
    with h5py.File(path, "w") as out:
        out["x"] = np.arange(4)
    h5 = h5py.File(path, "r")
    marker = Marker()
    cycle: list[object] = [h5, h5["x"], marker]
    cycle.append(cycle)
    return weakref.ref(marker)


def allocate_past_the_threshold() -> None:
    kept = [[] for _ in range(gc.get_threshold()[0] * 20)]  # automatic collection is due
    del kept


def test_a_thread_allocating_while_a_reader_holds_h5pys_lock_does_not_wait_for_it(
    fresh: None, tmp_path: pathlib.Path
) -> None:
    """The hang CI met: the reader holds h5py's lock waiting on a thread (fsspec's loop), and
    that thread's automatic collection frees an h5py object, waiting for the lock. Held, the
    thread collects nothing and finishes; the garbage goes later, under the lock."""
    owner = Owner()
    gc_guard.hold(owner)
    garbage = h5py_garbage(tmp_path / "f.h5")
    other = threading.Thread(target=allocate_past_the_threshold, daemon=True)
    with phil:  # the reader, inside h5py
        other.start()
        other.join(10)
        finished = not other.is_alive()
        uncollected = garbage() is not None
    other.join(30)
    assert finished, "the allocating thread waited for h5py's lock: the reader would hang"
    assert uncollected  # nobody collected it while the reader held the lock
    kept = [[] for _ in range(gc.get_threshold()[0] * 2)]  # a collection due, for the collector
    wait_for("the collector to collect the garbage", lambda: garbage() is None, 10)
    del kept, owner


def test_without_the_guard_that_thread_waits_for_h5pys_lock(
    fresh: None, tmp_path: pathlib.Path
) -> None:
    """What the guard prevents, shown: the same allocation with collection on waits for the
    lock, until the reader lets it go."""
    garbage = h5py_garbage(tmp_path / "f.h5")
    other = threading.Thread(target=allocate_past_the_threshold, daemon=True)
    with phil:
        other.start()
        other.join(2)
        waited = other.is_alive()
    other.join(30)
    assert waited and not other.is_alive()
    wait_for("the garbage collected", lambda: garbage() is None, 10)


def test_collection_is_off_while_held_and_as_before_when_the_last_holder_goes(
    fresh: None,
) -> None:
    first, second = Owner(), Owner()
    gc_guard.hold(first)
    gc_guard.hold(second)
    assert gc_guard.held() and not gc.isenabled()
    del first
    assert gc_guard.held() and not gc.isenabled()  # one holder left
    del second
    assert not gc_guard.held() and gc.isenabled()
    gc.disable()  # off before the hold: off after it
    third = Owner()
    gc_guard.hold(third)
    del third
    assert not gc_guard.held() and not gc.isenabled()


def test_a_gc_enable_by_other_code_while_held_is_undone_and_honoured_after(
    fresh: None,
) -> None:
    gc.disable()
    owner = Owner()
    gc_guard.hold(owner)
    gc.enable()  # a library turning collection on while a URL file is open
    wait_for("the collector to take collection back", lambda: not gc.isenabled(), 10)
    del owner
    assert gc.isenabled()  # and it stays on: that was asked for last


def test_a_worker_job_of_urls_holds_the_guard_while_its_file_is_open_and_of_paths_never(
    fresh: None, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard follows the open file in a worker as anywhere (h5feed's latency filesystem
    over a local file stands for a bucket: the same fsspec route, read-ahead included)."""
    spec = SampleSpec(files=1, videos_per_file=2, min_frames=4, max_frames=4, height=16,
                      width=16, seed=2)  # fmt: skip
    [path] = make_sample_dataset(tmp_path / "data", spec)
    monkeypatch.setenv(BENCH_ENV, json.dumps({"root": str(tmp_path), "latency_ms": 0}))
    url = f"{BENCH_SCHEME}://data/{path.name}"
    for name, remote in ((str(path), False), (url, True)):
        job = Hdf5Job("j", ClipSpec(clip_len=2), Auto())
        try:
            answers = list(job.open_files([messages.FileRef(0, name)], None))
            assert all(isinstance(a, messages.IndexBatch) for a in answers), answers
            assert gc_guard.held() is remote and gc.isenabled() is not remote, name
        finally:
            job.close()
        # a closed file's source goes once its fetches in flight end
        wait_for("the closed file's guard given back", gc.isenabled, 10)
