"""At scale: the pack index, lazy opening, INDEX_BATCH answers, persistent local workers, and
the scale benchmark kept working at a tiny N."""

from __future__ import annotations

import collections
import dataclasses
import gc
import json
import os
import pathlib
import signal
import time
from typing import Any

import cv2
import h5py
import numpy as np
import pytest
from fake_peers import hdf_config as fake_hdf_config
from fake_peers import make_peer, planned_batches

import h5feed
from h5feed.common.config import ClipSpec
from h5feed.common.errors import DataError, ProtocolError
from h5feed.common.layouts import Auto, Groups
from h5feed.common.protocol import messages
from h5feed.common.worker_settings import DEFAULT_DATA
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.hdf5 import units as hdf5_work
from h5feed.consumer.hdf5.config import hdf_config
from h5feed.consumer.hdf5.scheduler import HdfScheduler
from h5feed.consumer.plan.epoch_plan import Cursor, Index
from h5feed.producer.layouts import open_reader, pack_index
from h5feed.producer.sample_data import write_video_file
from h5feed.producer.worker import hdf5_job
from h5feed.producer.worker.clips import ClipMaker
from h5feed.producer.worker.code_policy import NOTHING

_WAIT_S = 30.0


def jpeg() -> bytes:
    return cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))[1].tobytes()


def packed_file(path: pathlib.Path, videos: int = 3, index_label: int | None = None) -> None:
    """A file of the default layout with the pack index; ``index_label`` puts another label
    in the index than in the groups (to see which one is read)."""
    write_video_file(path, {f"v{i}": ([jpeg()] * (i + 2), 0) for i in range(videos)})
    with h5py.File(path, "a") as h5:
        label = 0 if index_label is None else index_label
        pack_index.write(h5, [(f"v{i}", i + 2, label) for i in range(videos)])


# -- the pack index --------------------------------------------------------------------------


def test_the_pack_index_is_read_instead_of_walking_the_groups(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.h5"
    packed_file(path, index_label=9)  # the groups say 0: 9 can only come from the index
    reader = open_reader(str(path), Auto())
    try:
        assert reader.spec == Groups()  # recognised from the pack version, not by a walk
        assert reader.index() == [("v0", 2, 9), ("v1", 3, 9), ("v2", 4, 9)]
    finally:
        reader.close()


def test_a_file_without_the_pack_index_is_walked(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.h5"
    packed_file(path, index_label=9)
    with h5py.File(path, "a") as h5:
        del h5.attrs[pack_index.PACK_VERSION_ATTR]  # an index without the version is ignored
    reader = open_reader(str(path), Auto())
    try:
        assert reader.index() == [("v0", 2, 0), ("v1", 3, 0), ("v2", 4, 0)]
    finally:
        reader.close()


def _rewrite(h5: h5py.File, field: str, data: Any) -> None:
    del h5[pack_index.INDEX_GROUP][field]
    h5[pack_index.INDEX_GROUP].create_dataset(field, data=data)


COUNTS = "frame_counts"
BAD_INDEXES = {
    "names-miss-a-group": (
        lambda h5: _rewrite(h5, "names", np.array(["v0", "v1", "zz"], dtype=h5py.string_dtype())),
        "does not match the file's groups",
    ),
    "lengths-differ": (
        lambda h5: _rewrite(h5, "frame_counts", np.int64([2, 3])),
        "differ in length",
    ),
    "zero-frames": (lambda h5: _rewrite(h5, "frame_counts", np.int64([2, 0, 4])), "fewer than 1"),
    "names-unsorted": (
        lambda h5: _rewrite(h5, "names", np.array(["v1", "v0", "v2"], dtype=h5py.string_dtype())),
        "sorted",
    ),
    "frames-float": (
        lambda h5: _rewrite(h5, "frame_counts", np.float64([2, 3, 4])),
        "not integers",
    ),
    "field-missing": (lambda h5: h5[pack_index.INDEX_GROUP].__delitem__("labels"), "missing"),
    "names-not-strings": (lambda h5: _rewrite(h5, "names", np.int64([1, 2, 3])), "string"),
}


@pytest.mark.parametrize(("damage", "match"), BAD_INDEXES.values(), ids=list(BAD_INDEXES))
def test_an_inconsistent_pack_index_is_refused_naming_the_file(
    tmp_path: pathlib.Path, damage: Any, match: str
) -> None:
    path = tmp_path / "a.h5"
    packed_file(path)
    with h5py.File(path, "a") as h5:
        damage(h5)
    reader = open_reader(str(path), Auto())
    try:
        with pytest.raises(DataError, match=match) as info:
            reader.index()
    finally:
        reader.close()
    assert info.value.file == str(path) and "pack index" in str(info.value)


# -- lazy opening and INDEX_BATCH --------------------------------------------------------------


def test_a_cached_index_opens_no_file_until_a_row_needs_it(tmp_path: pathlib.Path) -> None:
    path, cache = tmp_path / "a.h5", str(tmp_path / "cache")
    packed_file(path)
    spec = ClipSpec(clip_len=2)
    cold = ClipMaker(spec, Auto(), NOTHING)
    assert cold.open_and_index(0, str(path), cache)[0] == ("v0", 2, 0)
    assert cold.files.opened == 1
    cold.close()
    warm = ClipMaker(spec, Auto(), NOTHING)
    try:
        assert warm.open_and_index(0, str(path), cache) == cold.videos[0]
        assert (warm.files.opened, warm.files.open_count) == (0, 0)  # nothing opened yet
        clips, _skipped = warm.produce([messages.Row(0, 0, 1, 0, 0.0, 0.0, False, 0)])
        assert clips.shape == (1, 2, 8, 8, 3)
        assert (warm.files.opened, warm.files.reopened) == (1, 0)  # opened on the first read
    finally:
        warm.close()


@pytest.mark.parametrize("max_open", [3, 5])
def test_a_job_of_more_files_than_may_be_open_closes_each_once_indexed(
    tmp_path: pathlib.Path, max_open: int
) -> None:
    paths = [tmp_path / f"f{i}.h5" for i in range(5)]
    for path in paths:
        packed_file(path)
    data = dataclasses.replace(DEFAULT_DATA, max_open_files=max_open)
    job = hdf5_job.Hdf5Job("j", ClipSpec(clip_len=2), Auto(), data=data)
    files = job.maker.files
    try:
        refs = [messages.FileRef(i, str(p)) for i, p in enumerate(paths)]
        assert [type(a).__name__ for a in job.open_files(refs, None)] == ["IndexBatch"]
        many = len(paths) > max_open
        assert (files.opened, files.open_count) == (5, 0 if many else 5)
        rows = [messages.Row(i, i, 2, 0, 0.0, 0.0, False, 0) for i in range(5)]
        clips, _skipped = job.maker.produce(rows)
        assert clips.shape == (5, 2, 8, 8, 3)
        # Opened again for the rows, as first openings: nothing counted as a reopening.
        assert (files.opened, files.reopened) == (10 if many else 5, 0)
        assert files.open_count == min(max_open, 5)
    finally:
        job.close()


def test_index_answers_are_batched_and_bounded(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hdf5_job, "BATCH_FILES", 2)
    paths = []
    for i in range(5):
        paths.append(tmp_path / f"f{i}.h5")
        packed_file(paths[-1])
    paths[2] = tmp_path / "missing.h5"
    job = hdf5_job.Hdf5Job("j", ClipSpec(clip_len=2), Auto())
    try:
        refs = [messages.FileRef(i, str(p)) for i, p in enumerate(paths)]
        answers = list(job.open_files(refs, None))
    finally:
        job.close()
    kinds = [type(a).__name__ for a in answers]
    assert kinds == ["Error", "IndexBatch", "IndexBatch"], kinds
    error, first, second = answers
    assert isinstance(error, messages.Error) and error.file == str(paths[2])
    assert isinstance(first, messages.IndexBatch) and isinstance(second, messages.IndexBatch)
    assert (first.files, second.files) == ((0, 1), (3, 4))
    assert first.counts == (3, 3) and first.frames.tolist() == [2, 3, 4, 2, 3, 4]


# -- JOBs in parts ------------------------------------------------------------------------------


def test_a_job_of_100000_files_goes_in_parts_that_fit_the_wire() -> None:
    # Paths of 200 characters: one JOB of all of them is 20 MB of header, far over the limit.
    files = [f"/data/{'k' * 150}/class_{i % 101:03d}/video_{i:07d}.hdf5" for i in range(100_000)]
    files = [f.ljust(200, "x") for f in files]
    scheduler = HdfScheduler(
        fake_hdf_config(files), "job-p", iter(range(1)), Cursor(), Counters(),
        file_sizes=[1] * len(files),
    )  # fmt: skip
    peers = [make_peer("p0"), make_peer("p1")]
    sends = scheduler.start(peers)
    given: dict[bytes, list[int]] = {p.identity: [] for p in peers}
    for send in sends:
        assert isinstance(send.message, messages.Job)
        frames = messages.encode(send.message)  # a part too large would raise here
        decoded = messages.decode(frames)  # and the worker's default limits take it
        assert isinstance(decoded, messages.Job) and decoded.files == send.message.files
        assert len(decoded.files) <= hdf5_work.JOB_FILES
        given[send.peer.identity] += [ref.number for ref in decoded.files]
    assert len(sends) > 2  # in parts, not one JOB per worker
    assert sorted(given[b"p0"] + given[b"p1"]) == list(range(len(files)))
    assert all(numbers == sorted(numbers) for numbers in given.values())  # in order
    whole = messages.Job("j", tuple(messages.FileRef(i, f) for i, f in enumerate(files)), {}, {},
                         None)  # fmt: skip
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        messages.encode(whole)


def test_a_job_is_cut_by_path_bytes_as_well_as_by_files() -> None:
    long = "p" * 4000  # PATH_MAX-sized paths: the bytes bound cuts first
    job = messages.Job("j", tuple(messages.FileRef(i, long) for i in range(1000)), {}, {}, None)
    parts = hdf5_work.split_job(job)
    assert [len(p.files) for p in parts] == [262, 262, 262, 214]
    assert all(sum(len(r.path) for r in p.files) <= hdf5_work.JOB_PATH_BYTES for p in parts)
    empty = dataclasses.replace(job, files=())
    assert hdf5_work.split_job(empty) == [empty]  # a JOB of no file still carries the spec


#: The one-video files of the test below: 100 class directories of 100 files each, under a
#: root whose name is 200 characters long (paths of about 300 bytes).
_MANY_FILES, _CLASSES, _ROOT_NAME = 10_000, 100, "ucf-" + "d" * 196


@pytest.mark.slow
@pytest.mark.timeout(1200)  # ~20 s on 2 idle cores; several times that with 2 cores shared
def test_100000_one_video_files_are_indexed_and_each_read_once(tmp_path: pathlib.Path) -> None:
    """A job whose paths do not fit one JOB is indexed by real workers and read once.

    A job of 100,000 paths went as one JOB, over the wire's header limit (2 MiB, ~20,000 paths
    of 100 bytes): now as JOBs of 1,024 files, answered by INDEX_BATCHes. This test made
    100,000 files (its name, which docs/performance/history.md cites, says so); it proves the
    same with 10,000 files of paths three times as long, at a tenth of the cost: one JOB of
    them all is still over the header limit (checked below), so the job still crosses its
    splitting point (10 JOBs, 5 per worker), and each worker's 5,000 files are still far more
    than ``max_open_files`` (128). The plan starts only once every file is indexed; shard 0 of
    10 then reads its 1,000 videos (reading all of them would test nothing more). Each file is
    one tiny real HDF5 file (2 KB, one 1x1 RGB frame), written once with h5py and copied."""
    template = tmp_path / "template.h5"
    with h5py.File(template, "w", libver="latest") as f:
        f.create_dataset("video", data=np.zeros((1, 1, 1, 3), np.uint8))
    data = template.read_bytes()
    root = tmp_path / _ROOT_NAME
    for c in range(_CLASSES):
        (root / f"class_{c:03d}").mkdir(parents=True)
    paths = [root / f"class_{i % _CLASSES:03d}" / f"v_{i:06d}.hdf5" for i in range(_MANY_FILES)]
    for path in paths:
        path.write_bytes(data)
    whole = messages.Job(
        "j", tuple(messages.FileRef(i, str(p)) for i, p in enumerate(paths)), {}, {}, None
    )
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        messages.encode(whole)  # as one JOB, the job would not fit the wire
    shards = 10
    feed = h5feed.batches(
        str(root), layout=h5feed.layouts.Video(), clip_len=1, batch_size=500, workers=2,
        index_cache=False, shard=(0, shards), start_timeout_s=1800, unit_timeout_s=600,
    )  # fmt: skip
    seen: collections.Counter[str] = collections.Counter()
    for batch in feed:
        for path, label in zip(batch["file"].tolist(), batch["label"].tolist(), strict=True):
            name = path.decode()
            seen[name] += 1
            assert label == int(pathlib.Path(name).parent.name.removeprefix("class_")), name
    assert len(seen) == _MANY_FILES // shards and set(seen.values()) == {1}


# -- persistent local workers ------------------------------------------------------------------


@pytest.fixture
def dataset(tmp_path: pathlib.Path) -> list[str]:
    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"f{i}.h5"))
        packed_file(pathlib.Path(paths[-1]), videos=4)
    return paths


FEED: dict[str, Any] = {"clip_len": 2, "batch_size": 5, "workers": 2, "seed": 4}


def _samples(batches: list[dict[str, np.ndarray]]) -> list[list[int]]:
    return [b["sample"].tolist() for b in batches]


def _wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + _WAIT_S
    while os.path.exists(f"/proc/{pid}"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_the_second_iteration_runs_on_the_same_workers_and_follows_the_plan(
    dataset: list[str], tmp_path: pathlib.Path
) -> None:
    cache = str(tmp_path / "cache")
    feed = h5feed.batches(dataset, index_cache=cache, **FEED)
    first = iter(feed)
    first_batches = list(first)
    second = iter(feed)
    second_batches = list(second)
    assert first.worker_pids == second.worker_pids
    # The second plan starts from the first's index: the files did not change.
    assert not first.scheduler.planned_from_known and second.scheduler.planned_from_known
    assert second.stats()["dropped_parts"] == 0 and second.stats()["malformed_messages"] == 0
    config = hdf_config(dataset, {**FEED, "index_cache": cache})
    videos = [[(f"v{i}", i + 2, 0) for i in range(4)] for _ in dataset]
    index = Index.build(dataset, videos)
    assert _samples(first_batches) == planned_batches(config, index, [0])
    assert _samples(second_batches) == planned_batches(config, index, [1])
    assert [b["epoch"][0] for b in second_batches] == [1] * len(second_batches)
    pids = first.worker_pids
    del first, second, feed
    gc.collect()  # the feed is gone: its kept workers stop
    assert all(_wait_gone(pid) for pid in pids)


def test_a_file_changed_between_iterations_is_indexed_again(dataset: list[str]) -> None:
    feed = h5feed.batches(dataset, index_cache=False, **FEED)
    first = iter(feed)
    assert sorted(s for b in first for s in b["sample"].tolist()) == list(range(12))
    packed_file(pathlib.Path(dataset[0]), videos=2)  # rewritten: 2 videos instead of 4
    second = iter(feed)
    samples = sorted(s for b in second for s in b["sample"].tolist())
    assert not second.scheduler.planned_from_known
    assert samples == list(range(10))  # the workers read the new file, not their memory
    assert second.worker_pids == first.worker_pids
    feed.close()


def test_an_iteration_abandoned_midway_leaves_the_workers_for_the_next(
    dataset: list[str],
) -> None:
    feed = h5feed.batches(dataset, index_cache=False, epochs=None, **FEED)
    stream = iter(feed)
    next(stream)
    next(stream)  # units of later batches are in flight when it is closed
    stream.close()
    again = iter(feed)
    batches = [next(again) for _ in range(3)]
    assert again.worker_pids == stream.worker_pids
    assert [b["epoch"][0] for b in batches] == [0, 0, 0]  # epochs=None: one endless iteration
    assert again.stats()["malformed_messages"] == 0
    again.close()
    feed.close()
    assert all(_wait_gone(pid) for pid in stream.worker_pids)


def test_a_worker_killed_between_iterations_is_replaced_and_the_other_kept(
    dataset: list[str],
) -> None:
    feed = h5feed.batches(dataset, index_cache=False, **FEED)
    first = iter(feed)
    list(first)
    victim, kept = first.worker_pids
    os.kill(victim, signal.SIGKILL)
    second = iter(feed)  # replaced when the pool is taken, or by the iteration's recovery
    samples = [s for b in second for s in b["sample"].tolist()]
    assert sorted(samples) == list(range(12))  # 12 videos, each once
    assert victim not in second.worker_pids and kept in second.worker_pids
    feed.close()


def test_an_iteration_beside_a_running_one_gets_its_own_workers(dataset: list[str]) -> None:
    feed = h5feed.batches(dataset, index_cache=False, **FEED)
    running = iter(feed)
    next(running)
    beside = iter(feed)
    assert len(list(beside)) == 3
    assert set(beside.worker_pids).isdisjoint(running.worker_pids)
    assert all(_wait_gone(pid) for pid in beside.worker_pids)  # not kept: stopped at its end
    list(running)
    after = iter(feed)
    next(after)
    assert after.worker_pids == running.worker_pids  # the kept ones
    after.close()
    feed.close()


# -- the benchmark -----------------------------------------------------------------------------


def test_the_scale_benchmark_runs_at_a_tiny_n(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from h5feed.cli import main

    out = tmp_path / "scale.json"
    status = main(
        ["bench", "scale", "--files", "20", "--videos", "10", "--workers", "1",
         "--steady-batches", "3", "--no-drop", "--data", str(tmp_path / "data"),
         "--json", str(out)]
    )  # fmt: skip
    assert status == 0
    report = json.loads(out.read_text())
    assert report["command"].startswith("h5feed bench scale")
    assert f"wrote {out}" in capsys.readouterr().out
    (row,) = report["rows"]
    assert (row["files"], row["videos"]) == (20, 200)
    assert row["second_same_workers"] is True
    assert 0 < row["index_bytes_per_video"] < 1000
    assert len(row["open_files_per_worker"]) == 1 and 1 <= row["open_files_per_worker"][0] <= 20
    for key in ("cold_s", "warm_s", "second_s", "clips_per_s"):
        assert row[key] > 0, key
    assert row["dropped_s"] is None and "skipped" in row["dropped_note"]  # a test drops nothing
