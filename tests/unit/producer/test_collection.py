"""Garbage collection on the worker's own thread while it reads object storage
(h5feed/producer/worker/collection.py): automatic collection off while a job of URLs is
held, cycles freed between units and when the job ends, nothing changed for local files.

Why it matters (a deadlock between h5py's lock and a collection on fsspec's IO thread): the
soak over S3 with bodies cut short, docs/bench/soak-s3-truncate-deadlock-stacks.txt, and the
note in docs/performance/object-storage.md (with the collection on other threads: workers
that return nothing; without: none, in the same runs)."""

from __future__ import annotations

import gc
import json
import pathlib
import weakref
from collections.abc import Iterator

import pytest

from h5feed.common.config import ClipSpec
from h5feed.common.layouts import Auto
from h5feed.common.object_urls import BENCH_ENV, BENCH_SCHEME
from h5feed.common.protocol import messages
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset
from h5feed.producer.worker import collection
from h5feed.producer.worker.hdf5_job import Hdf5Job


class Node:
    """An object in a reference cycle with itself: freed only by a collection."""

    def __init__(self) -> None:
        self.me = self


def garbage_cycle() -> weakref.ref[Node]:
    return weakref.ref(Node())


@pytest.fixture()
def enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        (gc.enable if was else gc.disable)()


def test_held_no_automatic_collection_cycles_freed_between_units_and_at_release(
    enabled: None,
) -> None:
    held = collection.MainThreadCollection()
    held.between_units()  # not held: nothing
    held.hold()
    held.hold()  # once
    assert not gc.isenabled() and held.held
    young = garbage_cycle()
    held.between_units()  # the youngest generation, on this thread
    assert young() is None
    old = garbage_cycle()
    gc.collect(0)  # moved on to an older generation: left for a later, wider collection
    for _unit in range(collection.FULL_EVERY):
        held.between_units()
    assert old() is None
    last = garbage_cycle()
    held.release()
    assert last() is None and gc.isenabled() and not held.held


def test_a_job_of_urls_holds_the_collection_and_a_job_of_paths_does_not(
    enabled: None, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
            assert gc.isenabled() is not remote, name
        finally:
            job.close()
        assert gc.isenabled()  # given back when the job ends
