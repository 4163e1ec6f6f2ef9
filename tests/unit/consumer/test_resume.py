"""Resume: ``BatchStream.state()`` / ``resume=`` (NumPy batches, real workers and files), the
fingerprint check, the remembered index (known length)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
from typing import Any

import numpy as np
import pytest

import h5feed
import h5feed.consumer.position.resume
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

TINY = SampleSpec(
    files=2, videos_per_file=5, min_frames=4, max_frames=9, height=16, width=16, seed=3
)
ARGS: dict[str, Any] = dict(clip_len=2, batch_size=3, workers=1, seed=5, flip=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return [str(p) for p in make_sample_dataset(tmp_path_factory.mktemp("tiny"), TINY)]


def _key(batch: dict[str, np.ndarray]) -> tuple[int, int, tuple[int, ...], str]:
    return (
        int(batch["epoch"][0]),
        int(batch["batch"][0]),
        tuple(batch["sample"].tolist()),
        hashlib.sha1(np.ascontiguousarray(batch["frames"]).tobytes()).hexdigest(),
    )


def _all(feed: h5feed.consumer.api.Feed) -> list[tuple[int, int, tuple[int, ...], str]]:  # type: ignore[name-defined]
    with feed.stream() as stream:
        return [_key(b) for b in stream]


def test_state_then_resume_continues_with_the_next_batch_whatever_the_workers(
    tiny: list[str],
) -> None:
    reference = _all(h5feed.batches(tiny, epochs=2, **ARGS))  # 10 videos: 4 batches/epoch
    stream = h5feed.batches(tiny, epochs=2, **ARGS).stream()
    taken = [_key(next(stream)) for _ in range(5)]
    state = stream.state()
    stream.close()
    assert json.loads(json.dumps(state)) == state  # JSON-able
    assert (state["format"], state["epoch"], state["batch"], state["taken"]) == (1, 1, 1, [])
    assert set(state["fingerprint"]) >= {"seed", "batch_size", "files", "index", "clip"}
    rest = _all(h5feed.batches(tiny, epochs=2, resume=state, **{**ARGS, "workers": 2}))
    assert taken + rest[:3] == reference  # the resumed iteration ends at epoch 2's end
    bare = _all(h5feed.batches(tiny, resume={"epoch": 1, "batch": 1}, **ARGS))
    assert bare == reference[5:]


def test_an_epoch_end_is_the_next_epochs_first_batch(tiny: list[str]) -> None:
    stream = h5feed.batches(tiny, epochs=2, **ARGS).stream()
    for _ in range(4):
        next(stream)
    assert (stream.state()["epoch"], stream.state()["batch"]) == (1, 0)
    stream.close()


def test_unordered_state_lists_the_batches_taken_above_the_lowest_untaken(
    tiny: list[str],
) -> None:
    args = {**ARGS, "deterministic": False, "workers": 2}
    reference = set(_all(h5feed.batches(tiny, **args)))
    stream = h5feed.batches(tiny, **args).stream()
    first = [_key(next(stream)) for _ in range(2)]
    state = stream.state()
    stream.close()
    positions = {(e, b) for e, b, *_ in first}
    lowest = (state["epoch"], state["batch"])
    assert lowest not in positions
    assert {tuple(t) for t in state["taken"]} == {p for p in positions if p > lowest}
    rest = _all(h5feed.batches(tiny, resume=state, **args))
    assert len(rest) + len(first) == len(reference)
    assert set(rest) | set(first) == reference


def test_a_state_from_other_options_is_refused_naming_each_field(tiny: list[str]) -> None:
    stream = h5feed.batches(tiny, **ARGS).stream()
    next(stream)
    state = stream.state()
    stream.close()
    with pytest.raises(h5feed.ResumeError, match=r"batch_size: saved 3, now 4.*seed: saved 5"):
        h5feed.batches(tiny, resume=state, **{**ARGS, "batch_size": 4, "seed": 6})
    with pytest.raises(h5feed.ResumeError, match="files"):
        h5feed.batches(tiny[:1], resume=state, **ARGS)
    with pytest.raises(h5feed.ResumeError, match="format"):
        h5feed.batches(tiny, resume={**state, "format": 99}, **ARGS)
    with pytest.raises(h5feed.ResumeError, match="epoch and batch"):
        h5feed.batches(tiny, resume={"epoch": -1, "batch": 0}, **ARGS)
    # Not part of the fingerprint: workers, prefetch-like and timing options.
    h5feed.batches(tiny, resume=state, **{**ARGS, "workers": 3, "unit_timeout_s": 9.0})


def test_other_data_under_the_same_names_is_refused_by_its_index(
    tmp_path: pathlib.Path,
) -> None:
    files = [str(p) for p in make_sample_dataset(tmp_path / "a", TINY)]
    stream = h5feed.batches(files, **ARGS).stream()
    next(stream)
    state = stream.state()
    stream.close()
    other = dataclasses.replace(TINY, max_frames=12, seed=4)
    for new, old in zip(make_sample_dataset(tmp_path / "b", other), files, strict=True):
        shutil.copyfile(new, old)  # same names, other videos
    with pytest.raises(h5feed.ResumeError, match="index: saved"):
        feed = h5feed.batches(files, resume=state, **ARGS)
        next(iter(feed))


def test_the_index_is_remembered_so_the_next_feed_knows_its_length(tiny: list[str]) -> None:
    feed = h5feed.batches(tiny, **ARGS)
    assert feed.length is None  # nothing indexed these files yet (isolated cache)
    _all(feed)
    assert feed.length == 4
    again = h5feed.batches(tiny, **ARGS)
    assert again.length == 4 and again.fingerprint["index"] == feed.fingerprint["index"]
    assert h5feed.batches(tiny, **{**ARGS, "drop_remainder": True}).length == 3


def test_the_index_digest_tells_indexes_apart_and_is_reused_while_the_same() -> None:
    from h5feed.consumer.plan.epoch_plan import Index
    from h5feed.consumer.position.fingerprint import IndexDigests, index_digest

    def index(label: int = 1, name: str = "v1", files: tuple[str, ...] = ("a.h5", "b.h5")) -> Index:
        return Index.build(files, [[("v0", 5, 0), (name, 6, label)], [("w0", 7, 2)]])

    plain = index_digest(index())
    others = {
        index_digest(i) for i in (index(label=3), index(name="v9"), index(files=("a.h5", "c.h5")))
    }
    assert plain not in others and len(others) == 3
    assert index_digest(index(files=("/elsewhere/a.h5", "b.h5"))) == plain  # base names only
    digests = IndexDigests()
    assert digests(index()) == plain and digests(index()) == plain  # an equal index: reused
    assert digests(index(label=3)) == index_digest(index(label=3))  # a changed one: hashed


# -- a state is a claim: bounded and checked whole before anything acts on it (issue 38) ----


@pytest.mark.parametrize(
    ("state", "said"),
    [
        ({"epoch": 0, "batch": 10**15}, "epoch and batch, integers in"),  # today: a hang
        ({"epoch": 10**30, "batch": 0}, "epoch and batch, integers in"),  # OverflowError
        ({"epoch": 0, "batch": 0, "taken": [[0, 10**30]]}, "bad taken batch"),
        ({"format": 1, "epoch": 0, "batch": 0, "fingerprint": {}, "length": 10**20}, "length"),
        ({"format": 1, "epoch": 0, "batch": 0, "fingerprint": {}, "samples": 10**20}, "samples"),
        ({"format": 1, "epoch": 0, "batch": 0, "fingerprint": {"seed": [[[0]]]}}, "'seed'"),
        ({"format": 1, "epoch": 0, "batch": 0, "fingerprint": {"s": "x" * 5000}}, "'s'"),
        ({"format": 1, "epoch": 0, "batch": 0, "fingerprint": {str(i): 0 for i in range(65)}},
         "65 fields"),
    ],
)  # fmt: skip
def test_a_state_past_its_bounds_is_a_resume_error_naming_it(
    state: dict[str, Any], said: str
) -> None:
    with pytest.raises(h5feed.ResumeError, match=said):
        h5feed.consumer.position.resume.ResumePoint.from_state(state)


def test_a_deep_fingerprint_is_a_resume_error_not_a_recursion_error() -> None:
    deep: Any = 0
    for _ in range(100_000):
        deep = [deep]
    state = {"format": 1, "epoch": 0, "batch": 0, "fingerprint": {"seed": deep}}
    with pytest.raises(h5feed.ResumeError, match="fingerprint field 'seed' holds"):
        h5feed.consumer.position.resume.ResumePoint.from_state(state)


@pytest.mark.timeout(60)
def test_a_position_far_past_the_epochs_end_rolls_over_at_once() -> None:
    """The largest batch a state may say, one batch an epoch: one division, not two billion
    passes (today: a pass per epoch, a hang)."""
    from h5feed.consumer.plan.epoch_plan import Cursor
    from h5feed.consumer.position.resume import MAX_POSITION, Progress, ResumePoint

    progress = Progress(ResumePoint(Cursor(0, MAX_POSITION), frozenset({(0, MAX_POSITION + 2)})),
                        ordered=False)  # fmt: skip
    progress.set_length(1)
    assert progress.cursor == Cursor(MAX_POSITION, 0) and progress.taken == {(MAX_POSITION + 2, 0)}
    progress.take(MAX_POSITION, 0)
    progress.take(MAX_POSITION + 1, 0)
    assert progress.cursor == Cursor(MAX_POSITION + 3, 0) and not progress.taken


def test_a_position_file_of_nested_brackets_is_a_resume_error(tmp_path: pathlib.Path) -> None:
    (tmp_path / "h5feed_position.json").write_text("[" * ((1 << 20) - 1))
    with pytest.raises(h5feed.ResumeError, match="nested too deeply"):
        h5feed.consumer.position.resume.read_position(str(tmp_path))


@pytest.mark.timeout(60)
def test_a_position_file_that_is_a_fifo_is_refused_without_blocking(
    tmp_path: pathlib.Path,
) -> None:
    """Opening a FIFO for reading waits for a writer (today: forever); the position file is
    checked to be a regular file on a descriptor opened without blocking."""
    os.mkfifo(tmp_path / "h5feed_position.json")
    with pytest.raises(h5feed.ResumeError, match="not a regular file"):
        h5feed.consumer.position.resume.read_position(str(tmp_path))
    with pytest.raises(h5feed.ResumeError, match="not a regular file"):
        h5feed.merge_states([str(tmp_path)])


def test_a_sparse_position_file_past_the_bound_is_refused_unread(tmp_path: pathlib.Path) -> None:
    with open(tmp_path / "h5feed_position.json", "wb") as handle:
        handle.truncate(1 << 30)
    with pytest.raises(h5feed.ResumeError, match="more than the 1048576"):
        h5feed.consumer.position.resume.read_position(str(tmp_path))
