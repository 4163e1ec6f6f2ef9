"""Resume on another topology: ``h5feed.merge_states`` of the states of n shards, resumed on
m shards (NumPy batches, real local workers, real HDF5 files; docs/semantics.md).

What is checked, against an unsharded run of the same plan (the epoch's order and each
sample's frames, byte for byte): over what the old shards took before their states and
what the new shards yield, every sample of the interrupted epoch is trained exactly once,
except the stated remainder (the last ``len(rest) % m`` samples of the rest, in the epoch's
order); the next epoch is the usual one on m shards; each sample's frames (clip start,
crop, flip) are the ones the unsharded plan gives it.
"""

from __future__ import annotations

import copy
import hashlib
import pathlib
import shutil
from collections import Counter
from typing import Any

import numpy as np
import pytest

import h5feed
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

#: 13 one-clip videos: no shard count used here divides them.
DATA = SampleSpec(
    files=1, videos_per_file=13, min_frames=3, max_frames=6, height=16, width=16, seed=2
)
TOTAL = 13
ARGS: dict[str, Any] = dict(clip_len=2, batch_size=2, workers=1, seed=5, flip=True)

Rows = list[tuple[int, int, int, str]]  # (epoch, batch, sample, frames hash) per row


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return [str(p) for p in make_sample_dataset(tmp_path_factory.mktemp("merge"), DATA)]


def _rows(batch: dict[str, np.ndarray]) -> Rows:
    return [
        (
            int(batch["epoch"][row]),
            int(batch["batch"][row]),
            int(sample),
            hashlib.sha1(np.ascontiguousarray(batch["frames"][row]).tobytes()).hexdigest(),
        )
        for row, sample in enumerate(batch["sample"].tolist())
    ]


@pytest.fixture(scope="module")
def reference(files: list[str]) -> dict[int, Rows]:
    """The unsharded run's rows of epochs 0 and 1: each epoch's order of all samples."""
    with h5feed.batches(files, epochs=2, **ARGS).stream() as stream:
        rows = [row for batch in stream for row in _rows(batch)]
    assert len(rows) == 2 * TOTAL
    return {epoch: [r for r in rows if r[0] == epoch] for epoch in (0, 1)}


def _take(files: list[str], batches: int, **args: Any) -> tuple[Rows, dict[str, Any]]:
    """The first ``batches`` batches of a stream, and its state after them."""
    with h5feed.batches(files, **{**ARGS, **args}).stream() as stream:
        rows = [row for _ in range(batches) for row in _rows(next(stream))]
        return rows, stream.state()


def _all(files: list[str], **args: Any) -> Rows:
    with h5feed.batches(files, **{**ARGS, **args}).stream() as stream:
        return [row for batch in stream for row in _rows(batch)]


def _check_epoch(trained: Rows, reference: Rows, left_out: int) -> None:
    """Each sample of the epoch once, but the last ``left_out`` of what was left to deal,
    and with the frames the unsharded plan gives it."""
    frames = {sample: digest for _, _, sample, digest in reference}
    counts = Counter(sample for _, _, sample, _ in trained)
    assert max(counts.values()) == 1, f"trained twice: {[s for s, c in counts.items() if c > 1]}"
    assert all(frames[sample] == digest for _, _, sample, digest in trained)
    missing = [sample for _, _, sample, _ in reference if sample not in counts]
    assert len(missing) == left_out, missing


def _resume(
    files: list[str], reference: dict[int, Rows], old: Rows, merged: dict[str, Any], m: int
) -> list[Rows]:
    """Each of ``m`` new shards resumed from ``merged`` for two epochs; checks the rest of
    the epoch and the next one. Returns each new shard's rows."""
    new = [_all(files, shard=(j, m), epochs=2, resume=merged) for j in range(m)]
    taken = {sample for _, _, sample, _ in old}
    rest = [sample for _, _, sample, _ in reference[0] if sample not in taken]
    remainder = rest[len(rest) - len(rest) % m :]
    resumed = [row for rows in new for row in rows if row[0] == 0]
    _check_epoch(old + resumed, reference[0], len(remainder))
    assert {s for _, _, s, _ in reference[0]} - {s for _, _, s, _ in old + resumed} == set(
        remainder
    ), "the samples left out are not the last of the rest"
    # Equal shares: every new shard has as many batches of the rest, at the same positions.
    positions = [sorted({b for e, b, _, _ in rows if e == 0}) for rows in new]
    assert all(p == positions[0] for p in positions), positions
    # Then the usual epoch on m shards: the unsharded order dealt every m-th.
    _check_epoch([row for rows in new for row in rows if row[0] == 1], reference[1], TOTAL % m)
    return new


def test_four_shards_resume_on_two(files: list[str], reference: dict[int, Rows]) -> None:
    old, states = [], []
    for i in range(4):  # 13 samples: 3 per shard (1 left out), 2 batches; each took one
        rows, state = _take(files, 1, shard=(i, 4))
        old += rows
        states.append(state)
    merged = h5feed.merge_states(states)
    assert (merged["format"], merged["merged"]) == (2, True)
    assert "shard" not in merged["fingerprint"]
    assert merged["rest"] == [[[1, []]] * 4] and merged["samples"] == TOTAL  # compact
    new = _resume(files, reference, old, merged, 2)
    # 13 - 8 taken = 5 left: 2 per new shard (1 left out), one batch: position 2 of 3.
    assert [sorted({b for e, b, _, _ in rows if e == 0}) for rows in new] == [[2]] * 2


def test_two_shards_resume_on_three(files: list[str], reference: dict[int, Rows]) -> None:
    old, states = [], []
    for i in range(2):  # 6 samples per shard (1 left out), 3 batches; each took two
        rows, state = _take(files, 2, shard=(i, 2))
        old += rows
        states.append(state)
    merged = h5feed.merge_states(list(reversed(states)))  # any order
    # 13 - 8 = 5 left: 1 per new shard (2 left out), one batch: position 1 of 2.
    new = _resume(files, reference, old, merged, 3)
    assert [sorted({b for e, b, _, _ in rows if e == 0}) for rows in new] == [[1]] * 3


def test_the_pad_rule_deals_every_sample_of_the_rest(
    files: list[str], reference: dict[int, Rows]
) -> None:
    """shard_remainder="pad" on both sides: the rest is dealt every m-th, padded to equal
    shares; no sample of the epoch is left out, padded rows (sample -1) take none."""
    pad = {"shard_remainder": "pad"}
    old, states = [], []
    for i in range(4):  # 13 over 4: 4 rows each (shards 1-3 end with a padded row)
        rows, state = _take(files, 1, shard=(i, 4), **pad)
        old += rows
        states.append(state)
    merged = h5feed.merge_states(states)
    assert merged["fingerprint"]["shard_remainder"] == "pad"
    new = [_all(files, shard=(j, 2), epochs=2, resume=merged, **pad) for j in range(2)]
    resumed = [row for rows in new for row in rows if row[0] == 0]
    # 5 left: 3 rows per new shard (the last of shard 1 padded), batches 2 and 3 of 4.
    assert [sorted({b for e, b, _, _ in rows if e == 0}) for rows in new] == [[2, 3]] * 2
    assert [row[2] for row in resumed].count(-1) == 1
    _check_epoch([r for r in old + resumed if r[2] >= 0], reference[0], 0)
    _check_epoch([r for rows in new for r in rows if r[0] == 1 and r[2] >= 0], reference[1], 0)
    with pytest.raises(h5feed.ResumeError, match="shard_remainder"):
        h5feed.batches(files, resume=merged, **ARGS)  # the rule is in the fingerprint


def test_batches_taken_above_the_cursor_are_not_dealt_again(
    files: list[str], reference: dict[int, Rows]
) -> None:
    """deterministic=False: a rank that took batches 0 and 2 of its 3 saves cursor 1 and
    ``taken`` [[0, 2]]; both are left out of the rest."""
    old, states = [], []
    for i in range(2):
        rows = _all(files, shard=(i, 2))
        old += [row for row in rows if row[1] in (0, 2)]
        state = _take(files, 1, shard=(i, 2))[1]
        states.append({**state, "taken": [[0, 2]]})
    merged = h5feed.merge_states(states)
    assert merged["rest"] == [[[1, [2]], [1, [2]]]]
    _resume(files, reference, old, merged, 3)


def test_a_second_kill_inside_the_resumed_epoch(
    files: list[str], reference: dict[int, Rows]
) -> None:
    """2 -> 3 shards with batch_size 1, killed again inside the rest: resumed from the
    states saved there (same shards), and those states merged again onto 2 shards."""
    args = {"batch_size": 1}
    old, states = [], []
    for i in range(2):  # 6 per shard, each took 2: 9 left, 3 per new shard from position 1
        rows, state = _take(files, 2, shard=(i, 2), **args)
        old += rows
        states.append(state)
    merged = h5feed.merge_states(states)
    inside, again = [], []
    for j in range(3):  # each new shard trains one batch of the rest, then is killed
        rows, state = _take(files, 1, shard=(j, 3), resume=merged, **args)
        assert (state["format"], state["epoch"], state["batch"]) == (2, 0, 2)
        assert state["rest"] == merged["rest"] and state["fingerprint"]["shard"] == [j, 3]
        inside += rows
        again.append(state)
    # Resumed from the states saved inside the rest, on the same shards: the rest of it.
    once_more = [_all(files, shard=(j, 3), resume=again[j], **args) for j in range(3)]
    trained = old + inside + [row for rows in once_more for row in rows]
    assert {r[0] for r in trained} == {0}
    _check_epoch(trained, reference[0], 0)
    # The states saved inside the rest, merged again (a layer more), resumed on 2 shards.
    twice = h5feed.merge_states(again)
    assert len(twice["rest"]) == 2
    new = [_all(files, shard=(j, 2), epochs=2, resume=twice, **args) for j in range(2)]
    epoch0 = old + inside + [row for rows in new for row in rows if row[0] == 0]
    taken = {s for _, _, s, _ in old + inside}
    rest = [s for _, _, s, _ in reference[0] if s not in taken]
    _check_epoch(epoch0, reference[0], len(rest) % 2)
    _check_epoch([row for rows in new for row in rows if row[0] == 1], reference[1], TOTAL % 2)
    # Past the rest, a state is format 1 again (the usual epochs need no rest).
    rows, state = _take(files, 4, shard=(0, 3), resume=again[0], epochs=2, **args)
    assert (state["format"], state["epoch"]) == (1, 1) and "rest" not in state


@pytest.fixture(scope="module")
def two_states(files: list[str]) -> list[dict[str, Any]]:
    """The states of shards 0 and 1 of 2, each after one batch."""
    return [_take(files, 1, shard=(i, 2))[1] for i in range(2)]


def test_a_missing_old_shard_is_refused(two_states: list[dict[str, Any]]) -> None:
    with pytest.raises(h5feed.ResumeError, match=r"shard 1 of 2 is missing"):
        h5feed.merge_states(two_states[:1])


def test_a_duplicate_old_shard_is_refused(two_states: list[dict[str, Any]]) -> None:
    with pytest.raises(h5feed.ResumeError, match=r"shard 0 of 2 is given twice"):
        h5feed.merge_states([two_states[0], two_states[0], two_states[1]])


def test_fingerprints_differing_in_more_than_the_shard_are_refused(
    files: list[str], two_states: list[dict[str, Any]]
) -> None:
    other = _take(files, 1, shard=(1, 2), seed=6)[1]  # another seed: another plan
    with pytest.raises(h5feed.ResumeError, match=r"more than the shard.*seed: saved 5, now 6"):
        h5feed.merge_states([two_states[0], other])


def test_states_from_different_steps_are_refused(
    files: list[str], two_states: list[dict[str, Any]]
) -> None:
    ahead = _take(files, 2, shard=(1, 2))[1]
    with pytest.raises(h5feed.ResumeError, match=r"different steps.*batch 1.*batch 2"):
        h5feed.merge_states([two_states[0], ahead])


def test_a_merged_state_refuses_other_data_and_options(
    files: list[str], two_states: list[dict[str, Any]], tmp_path: pathlib.Path
) -> None:
    merged = h5feed.merge_states(two_states)
    with pytest.raises(h5feed.ResumeError, match=r"batch_size: saved 2, now 3"):
        h5feed.batches(files, resume=merged, **{**ARGS, "batch_size": 3})
    other = tmp_path / "other.h5"
    shutil.copyfile(files[0], other)
    with pytest.raises(h5feed.ResumeError, match="files"):
        h5feed.batches([str(other)], resume=merged, **ARGS)
    forged = copy.deepcopy(merged)
    forged["rest"][0][0][0] = 99  # a cursor past its shard's batches
    with pytest.raises(h5feed.ResumeError, match=r"rest layer 0, shard 0 of 2"):
        h5feed.batches(files, resume=forged, **ARGS)
    with pytest.raises(h5feed.ResumeError, match="format 2 needs"):
        h5feed.batches(files, resume={k: v for k, v in merged.items() if k != "rest"}, **ARGS)
    with pytest.raises(h5feed.ResumeError, match="merged state"):
        h5feed.merge_states([merged])


def test_a_state_that_does_not_know_the_sample_count_is_refused(
    two_states: list[dict[str, Any]],
) -> None:
    bare = [{k: v for k, v in state.items() if k != "samples"} for state in two_states]
    with pytest.raises(h5feed.ResumeError, match="sample count"):
        h5feed.merge_states(bare)


def test_a_sources_state_is_refused() -> None:
    """A ``source=`` dataset's states (a map source here) cannot be merged: named, before
    anything else is read of them."""
    states = []
    for i in range(2):
        feed = h5feed.batches(
            source="user_sources:Squares", source_args={"n": 7}, batch_size=2, workers=1,
            shard=(i, 2),
        )  # fmt: skip
        with feed.stream() as stream:
            next(stream)
            states.append(stream.state())
    with pytest.raises(h5feed.ResumeError, match=r"state 0 is a source's \(source=\)"):
        h5feed.merge_states(states)


def test_a_state_saying_a_billion_shards_is_refused_before_they_are_counted() -> None:
    """A fingerprint's shard count is bounded before anything is built from it (today:
    set(range(10**9)), a MemoryError at 2.3 GB)."""
    import tracemalloc

    def state(index: int) -> dict[str, Any]:
        print_ = {"batch_size": 2, "drop_remainder": False, "shard": [index, 10**9]}
        return {"format": 1, "epoch": 0, "batch": 1, "fingerprint": print_, "samples": 10}

    tracemalloc.start()
    try:
        with pytest.raises(h5feed.ResumeError, match="of 1000000000 shards, more than"):
            h5feed.merge_states([state(0), state(1)])
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
