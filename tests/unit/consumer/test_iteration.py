"""The iteration's edge (``h5feed/consumer/iteration.py``): the one value an iteration starts
from, the index check, where the trainer stands, and what the feed reads back; and that a
stream never keeps its feed alive."""

from __future__ import annotations

import gc
import pathlib
import weakref

import numpy as np
import pytest
from fake_peers import hdf_config, source_config

import h5feed
from h5feed.common.elements import values as elements
from h5feed.common.errors import ResumeError
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.consumer.iteration import IterationStart, Position
from h5feed.consumer.plan.epoch_plan import Cursor, Index
from h5feed.consumer.position.fingerprint import index_digest
from h5feed.consumer.sources.options import Learnt

INDEX = Index.build(["a.h5", "b.h5"], [[("v0", 4, 0), ("v1", 5, 1)], [("v2", 6, 0)]])
SPEC = elements.infer_spec([{"x": np.zeros(2)}, {"x": np.ones(2)}])


def test_the_index_check_returns_the_digest_or_names_both_digests() -> None:
    digest = index_digest(INDEX)
    assert IterationStart(Cursor()).check_index(INDEX) == digest  # nothing resumed: no check
    assert IterationStart(Cursor(), resume_index=digest).check_index(INDEX) == digest
    with pytest.raises(ResumeError, match=f"index: saved '0{{16}}', now '{digest}'"):
        IterationStart(Cursor(), resume_index="0" * 16).check_index(INDEX)


def test_a_resumed_position_leaves_out_the_taken_batches_and_rolls_over_at_the_end() -> None:
    config = hdf_config(["a.h5", "b.h5"], batch_size=1, deterministic=False, index_cache=False)
    start = IterationStart(Cursor(0, 1), frozenset({(0, 2)}), {"seed": 0})
    position = Position(config, start)
    position.learn(INDEX, 3)  # three videos, one clip each: 3 batches of 1
    assert position.outcome.digest == index_digest(INDEX)
    assert position.outcome.learnt is INDEX and position.outcome.epoch_length == 3
    assert not position.take(0, 2)  # taken before the resume: made, not yielded
    assert position.take(0, 1)
    state = position.state()
    assert (state["epoch"], state["batch"], state["taken"]) == (1, 0, [])  # (0, 3) is (1, 0)
    assert state["fingerprint"] == {"seed": 0, "index": index_digest(INDEX)}


def test_a_resumed_index_that_differs_is_refused_when_the_first_batch_comes() -> None:
    config = hdf_config(["a.h5", "b.h5"], index_cache=False)
    position = Position(config, IterationStart(Cursor(), resume_index="0" * 16))
    with pytest.raises(ResumeError, match="index: saved"):
        position.learn(INDEX, 3)
    assert position.outcome.digest is None and position.outcome.learnt is None


def test_what_a_source_iteration_learnt_is_kept_once_even_without_a_batch() -> None:
    position = Position(source_config(), IterationStart(Cursor()))
    position.ended(None, None)  # ended before the handshake: nothing learnt
    assert position.outcome.learnt is None
    first = Learnt(SourceKind.MAP, SPEC, 6)
    position.ended(first, 2)
    position.ended(Learnt(SourceKind.MAP, SPEC, 7), 3)  # a lesson is not replaced
    assert position.outcome.learnt is first and position.outcome.epoch_length == 2
    assert position.outcome.digest is None  # a source has no index


def test_a_stream_never_keeps_its_feed_alive(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(small_dataset, clip_len=4, resize=(48, 64), batch_size=5, workers=1)
    held = weakref.ref(feed)
    stream = feed.stream()
    try:
        del feed
        gc.collect()
        assert held() is None  # the feed is gone while its iteration runs
        assert len(next(stream)["label"]) == 5  # and the iteration goes on
    finally:
        stream.close()
