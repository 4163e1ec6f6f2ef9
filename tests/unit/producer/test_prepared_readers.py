"""A worker that takes a file's index from the index cache opens the file on its first read
without reading the index: for a paged file on object storage (``h5feed pack``'s shards), its
videos' datasets are opened then, as reading the index would (so a clip's plan never opens
them on a read-ahead thread, under h5py's lock); other files stay opened video by video
(h5feed/producer/worker/clips.py, LayoutReader.prepare)."""

from __future__ import annotations

import json
import pathlib

import pytest

from h5feed.bench.study_files import study_files
from h5feed.common.config import ClipSpec
from h5feed.common.layouts import Groups
from h5feed.common.object_urls import BENCH_ENV, BENCH_SCHEME
from h5feed.common.protocol.messages import Row
from h5feed.producer.sample_data import SampleSpec
from h5feed.producer.worker.clips import ClipMaker
from h5feed.producer.worker.code_policy import NOTHING

SPEC = SampleSpec(files=1, videos_per_file=6, min_frames=8, max_frames=10, height=24, width=32,
                  seed=4)  # fmt: skip


@pytest.mark.parametrize(("layout", "all_open"), [("pack", True), ("groups", False)])
def test_a_cached_index_prepares_a_paged_files_datasets_at_its_first_read(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, layout: str, all_open: bool
) -> None:
    [path] = study_files(tmp_path, SPEC, layout)
    monkeypatch.setenv(BENCH_ENV, json.dumps({"root": str(tmp_path), "latency_ms": 0}))
    url = f"{BENCH_SCHEME}://data/{pathlib.Path(path).name}"
    cache = str(tmp_path / "index-cache")
    first = ClipMaker(ClipSpec(clip_len=2, resize=(24, 32)), Groups(), NOTHING)
    try:
        assert len(first.open_and_index(0, url, cache)) == 6  # read, and cached
    finally:
        first.close()
    maker = ClipMaker(ClipSpec(clip_len=2, resize=(24, 32)), Groups(), NOTHING)
    try:
        assert len(maker.open_and_index(0, url, cache)) == 6
        assert maker.files.peek(0) is None  # from the cache: the file is not opened
        maker.produce([Row(0, 0, 0, 0, 0.5, 0.5, False, 0)])
        reader = maker.files.peek(0)
        assert reader is not None
        opened = set(reader._datasets)  # type: ignore[attr-defined]  # GroupsReader's
        assert len(opened) == (6 if all_open else 1), opened
    finally:
        maker.close()
