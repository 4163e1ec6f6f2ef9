"""A generator that forgot to shard (issue 38, item 8): a ``source=`` generator factory that
takes ``shard_index``/``shard_count`` and ignores them (or does not take them) would give every
sample once per worker. The workers' copies are compared at the handshake (each digests its
shard's first elements, ``h5feed/producer/sources/generator_kind.py``) and copies that begin
alike are refused before any PULL (``h5feed/consumer/sources/agreement.py``); a sharded
generator is never refused, whatever its shards' lengths; ``shards_start_alike=True`` opts out.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import SUPPORT

import h5feed
from h5feed.common.errors import SourceError
from h5feed.common.protocol import messages
from h5feed.consumer.sources.agreement import check_distinct_shards
from h5feed.producer.sources import SourceJob
from h5feed.producer.sources.generator_kind import PROBE_GENERATOR_ELEMENTS
from h5feed.producer.worker.code_policy import TRUSTED

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TESTS = SUPPORT
FAST = {"start_timeout_s": 60.0, "unit_timeout_s": 60.0}
SHARD_ARGUMENTS = r"shard_index and shard_count"


def rows_until_error(**kwargs: Any) -> tuple[list[int], BaseException | None]:
    """The values of the batches a feed yields before it raises, and what it raised."""
    values: list[int] = []
    try:
        for batch in h5feed.batches(**FAST, **kwargs):
            values += batch["value"].tolist()
    except SourceError as exc:
        return values, exc
    return values, None


# -- in real workers ----------------------------------------------------------------------


@pytest.mark.parametrize("factory", ["forgot_to_shard", "unsharded"])
def test_a_generator_that_ignores_its_shard_is_refused_before_any_batch(factory: str) -> None:
    """The issue's case: 30 samples, 2 workers, 60 rows silently. Now no row arrives and the
    error names the shard arguments and both workers."""
    values, error = rows_until_error(
        source=f"user_sources:{factory}", source_args={"n": 30}, batch_size=4, workers=2
    )
    assert values == []
    assert error is not None, "60 rows of 30 samples were taken without an error"
    text = str(error)
    assert SHARD_ARGUMENTS in text and "begin with the same elements" in text
    assert "shards_start_alike=True" in text  # the opt-out is named
    assert "-0 (pid" in text and "-1 (pid" in text  # both workers named


def test_shards_start_alike_opts_out_and_takes_what_the_shards_yield() -> None:
    common = {"source": "user_sources:header_first", "source_args": {"n": 10}, "workers": 2}
    values, error = rows_until_error(**common, batch_size=4)
    assert error is not None and SHARD_ARGUMENTS in str(error)  # 4 equal first elements
    values, error = rows_until_error(**common, batch_size=4, shards_start_alike=True)
    assert error is None
    assert sorted(values) == [-1] * 8 + list(range(10))  # each shard's header, then its own


def test_a_sharded_generator_with_shards_shorter_than_the_probe_is_not_refused() -> None:
    """n=5 on 4 workers: shards of 2, 1, 1 and 1 elements (fewer than the 4 compared)."""
    values, error = rows_until_error(
        source="user_sources:count_up", source_args={"n": 5}, batch_size=2, workers=4
    )
    assert error is None and sorted(values) == list(range(5))


def test_a_sharded_generator_with_an_empty_shard_is_not_refused() -> None:
    """n=3 on 4 workers: shard 3 is empty (the spec is given: an empty shard has none to
    tell); an empty shard has no digest and is compared with nobody."""
    tf = pytest.importorskip("tensorflow")
    signature = {"value": tf.TensorSpec((), tf.int64), "shard": tf.TensorSpec((), tf.int64)}
    values, error = rows_until_error(
        source="user_sources:count_up", source_args={"n": 3}, batch_size=2, workers=4,
        output_signature=signature,
    )  # fmt: skip
    assert error is None and sorted(values) == [0, 1, 2]


# -- the comparison, in this process --------------------------------------------------------


def shard_checks(items: list[int], worker: int, workers: int) -> tuple[messages.ItemCheck, ...]:
    """What worker ``worker`` of ``workers`` sends for ``user_sources:given`` (it yields
    ``items[worker::workers]``), as a loaded job answers SOURCE_INFO with the spec given."""
    source = messages.Source(
        "job", "user_sources:given", {"items": items}, (str(TESTS),), worker, workers, 0, 0,
        None, False,
    )  # fmt: skip
    loaded = SourceJob(source, True, TRUSTED)
    return loaded.source.checks(0)


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(st.integers(-1000, 1000), unique=True, max_size=40),
    workers=st.integers(1, 6),
)
def test_a_sharded_generator_is_never_refused(items: list[int], workers: int) -> None:
    """Any split of distinct elements by shard passes, empty and short shards included."""
    answers = {f"w{w}": shard_checks(items, w, workers) for w in range(workers)}
    check_distinct_shards("user_sources:given", answers)
    for w, checks in answers.items():  # an empty shard sends no check
        assert len(checks) == (1 if items[int(w[1:]) :: workers] else 0)


def test_shards_that_begin_alike_are_refused_whatever_their_length() -> None:
    k = PROBE_GENERATOR_ELEMENTS
    for n in (1, k - 1, k, 3 * k):
        same = {"w0": shard_checks(list(range(n)), 0, 1), "w1": shard_checks(list(range(n)), 0, 1)}
        with pytest.raises(SourceError, match=r"workers \['w0', 'w1'\] begin with the same"):
            check_distinct_shards("s", same)
        check_distinct_shards("s", same, alike_ok=True)
    # the same first k elements, different later: refused (the first k are compared)
    longer = {"w0": shard_checks([*range(k), 7], 0, 1), "w1": shard_checks([*range(k), 8], 0, 1)}
    with pytest.raises(SourceError, match=SHARD_ARGUMENTS):
        check_distinct_shards("s", longer)
    # one a prefix of the other, shorter than k: different counts, not refused
    check_distinct_shards("s", {"a": shard_checks([1], 0, 1), "b": shard_checks([1, 2], 0, 1)})
