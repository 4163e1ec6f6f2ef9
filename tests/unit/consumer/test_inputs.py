"""The input kinds as objects (``h5feed/consumer/inputs.py``, ``hdf5/input.py``,
``sources/input.py``): each config's input answers for its kind what the feed, its streams
and an iteration's position used to test the config's type for."""

from __future__ import annotations

import numpy as np
import pytest
from fake_peers import hdf_config, source_config

from h5feed.common.elements import values as elements
from h5feed.common.elements.batch_keys import BATCH_KEYS
from h5feed.common.errors import ResumeError
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import UNITS_EACH, UNITS_EACH_OBJECT_STORAGE, CreditGate
from h5feed.consumer.hdf5.input import HdfInput
from h5feed.consumer.inputs import input_of
from h5feed.consumer.iteration import IterationStart
from h5feed.consumer.plan.epoch_plan import Cursor, Index
from h5feed.consumer.plan.rest import Rest
from h5feed.consumer.sources.input import SourceInput
from h5feed.consumer.sources.options import Learnt

INDEX = Index.build(["a.h5"], [[("v0", 4, 0), ("v1", 5, 1)]])
LEARNT = Learnt(SourceKind.GENERATOR, elements.infer_spec([{"x": np.zeros(2)}]))


def test_each_config_has_the_input_of_its_kind() -> None:
    hdf = input_of(hdf_config(["a.h5"], batch_size=1, index_cache=False, data_root="/data"))
    source = input_of(source_config())
    assert isinstance(hdf, HdfInput) and hdf.kind == "hdf5" and hdf.data_root == "/data"
    assert isinstance(source, SourceInput) and source.kind == "source"
    assert source.data_root is None and source.remembered() is None


def test_a_feed_of_object_storage_keeps_more_units_queued_on_each_worker() -> None:
    urls = input_of(hdf_config(["s3://bucket/a.h5"], batch_size=1, index_cache=False))
    under_url_root = input_of(
        hdf_config(["a.h5"], batch_size=1, index_cache=False, data_root="s3://bucket/data")
    )
    local = input_of(hdf_config(["a.h5"], batch_size=1, index_cache=False))
    assert urls.units_each == under_url_root.units_each == UNITS_EACH_OBJECT_STORAGE
    assert local.units_each == input_of(source_config()).units_each == UNITS_EACH


def test_each_input_reads_only_its_own_lessons() -> None:
    hdf = input_of(hdf_config(["a.h5"], batch_size=1, clips_per_video=2, index_cache=False))
    source = input_of(source_config())
    lesson = hdf.index_lesson(INDEX)
    assert lesson is not None and lesson.index is INDEX and lesson.samples == 4
    assert hdf.index_lesson(LEARNT) is None and hdf.source_lesson(LEARNT) is None
    assert source.index_lesson(INDEX) is None and source.source_lesson(LEARNT) is LEARNT
    assert source.source_kind(LEARNT) is SourceKind.GENERATOR and hdf.source_kind(INDEX) is None
    assert source.shards_in_workers(LEARNT) and not hdf.shards_in_workers(INDEX)
    assert not source.shards_in_workers(None)  # not known yet


def test_a_source_input_refuses_the_rest_of_an_epoch_on_other_shards() -> None:
    start = IterationStart(Cursor(), rest=Rest(epoch=0, samples=10, layers=()))
    gate = CreditGate(2, lambda: None)
    with pytest.raises(ResumeError, match="another number of shards"):
        input_of(source_config()).scheduler(start, "job", iter([0]), Counters(), gate)


def test_the_front_door_asks_the_config_which_keys_its_elements_have() -> None:
    """``dataset(keys=)``: built first, the config answers (a source refuses them)."""
    keys = ("frames", "label", "valid")
    assert hdf_config(["a.h5"], batch_size=1, index_cache=False).element_keys(keys) == keys
    assert source_config().element_keys(BATCH_KEYS) == BATCH_KEYS
    with pytest.raises(TypeError, match="keys= does not apply to source="):
        source_config().element_keys(keys)
