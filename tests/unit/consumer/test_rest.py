"""The rest of an epoch after a change of topology (``h5feed/consumer/plan/rest.py``), against an
oracle written from the stated rule with plain lists: for any sample count, batch size,
remainder rule, old and new shard counts and old positions (the same step on every old
shard, batches taken out of order included), and a second change inside the rest, each new
shard's part of the rest and the position of its first batch are the oracle's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5feed.common.errors import ResumeError
from h5feed.consumer.plan.epoch_plan import PAD_SAMPLE, PlanOptions, epoch_length, full_order
from h5feed.consumer.plan.rest import Layer, Rest, layer_of


def _deal(order: list[int], shard: int, shards: int, pads: bool) -> list[int]:
    """The rule as docs/semantics.md states it."""
    if pads:
        part = order[shard::shards]
        return part + [PAD_SAMPLE] * (-(-len(order) // shards) - len(part))
    return order[shard : shards * (len(order) // shards) : shards]


def _batches(part: list[int], options: PlanOptions) -> list[list[int]]:
    size = options.batch_size
    batches = [part[k : k + size] for k in range(0, len(part), size)]
    if options.drop_remainder and batches and len(batches[-1]) < size:
        batches.pop()
    return batches


@st.composite
def _layer(draw: st.DrawFn, batches: int, shards: int) -> list[set[int]]:
    """Per shard the batches it took (as many on every shard: one step), as positions of
    its ``batches``."""
    step = draw(st.integers(0, batches))
    return [
        set(draw(st.permutations(range(batches)))[:step]) if step else set() for _ in range(shards)
    ]


def _cursors(taken: list[set[int]], first: int) -> list[tuple[int, list[int]]]:
    """A saved position per shard: the lowest batch not taken and those taken above it."""
    cursors = []
    for positions in taken:
        cursor = first
        while cursor in {first + p for p in positions}:
            cursor += 1
        cursors.append((cursor, sorted(first + p for p in positions if first + p > cursor)))
    return cursors


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(1, 4),
    st.sampled_from(["drop", "pad", "drop_remainder"]),
    st.integers(1, 5),
    st.integers(1, 5),
    st.integers(1, 4),
    st.data(),
)
def test_the_rest_is_dealt_as_the_rule_says(
    total: int, batch_size: int, rule: str, n: int, m: int, k: int, data: st.DataObject
) -> None:
    options = PlanOptions(
        batch_size=batch_size, seed=7, drop_remainder=rule == "drop_remainder",
        shard_remainder="pad" if rule == "pad" else "drop",
    )  # fmt: skip
    full = full_order(total, options, 3)
    rest = full.tolist()
    layers = []
    for shards in (n, m):  # two changes: n shards, then m inside the rest, then k
        sharded = dataclasses.replace(options, shard=(0, shards))
        parts = [_deal(rest, i, shards, options.pads) for i in range(shards)]
        batches = [_batches(part, options) for part in parts]
        first = epoch_length(total, sharded) - len(batches[0])
        taken = data.draw(_layer(len(batches[0]), shards))
        layers.append(layer_of(_cursors(taken, first)))
        gone = {s for i in range(shards) for p in taken[i] for s in batches[i][p]}
        rest = [s for s in rest if s not in gone]
        state = Rest(3, total, tuple(layers))
        state.check(options)
        for j in range(k):  # what k new shards would get now
            new = dataclasses.replace(options, shard=(j, k))
            part = _deal(rest, j, k, options.pads)
            length = epoch_length(total, new)
            order, at = state.deal(full, new)
            assert order.tolist() == part
            assert at == state.first_batch(new) == length - len(_batches(part, options))
            assert 0 <= at <= length
    assert np.isin(full, rest).sum() == len(rest)


def test_a_rest_outside_its_batches_is_refused() -> None:
    """A rest from a file is checked before it is planned: a cursor or a taken batch
    outside its shard's batches, or a batch taken twice, is a ResumeError."""
    options = PlanOptions(batch_size=2)  # 13 samples over 2 shards: 6 each, batches 0-2
    for cursors in ([(4, [])] * 2, [(0, [3])] * 2, [(0, [0])] * 2, [(0, [1, 1])] * 2):
        with pytest.raises(ResumeError, match=r"rest layer 0, shard 0 of 2"):
            Rest(0, 13, (Layer(tuple((c, tuple(a)) for c, a in cursors)),)).check(options)
    Rest(0, 13, (layer_of([(2, []), (0, [1, 2])]),)).check(options)  # in bounds: no error
