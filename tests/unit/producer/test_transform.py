"""transform=: the user's per-sample function in the workers, seeded from (seed, epoch,
sample), its output shape and dtype, and each way it can go wrong."""

from __future__ import annotations

import collections
import os
import pathlib
from typing import Any

import numpy as np
import pytest
from paths import SUPPORT
from sample_transforms import FEW_FAULTS

import h5feed
from h5feed.common.config import ClipSpec
from h5feed.common.errors import WorkerError
from h5feed.common.system.allocator import OPERATOR_VARIABLES
from h5feed.producer.worker.code_policy import TRUSTED
from h5feed.producer.worker.transform import Transform

_TESTS_DIR = str(SUPPORT)
CLIP: dict[str, Any] = {"clip_len": 2, "resize": (24, 32), "crop": (16, 16), "flip": True}


@pytest.fixture(autouse=True)
def importable_transforms(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers import ``sample_transforms`` by path: put tests/ on their PYTHONPATH."""
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (_TESTS_DIR, os.environ.get("PYTHONPATH")) if p)
    )


def collect(feed: Any) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v) for k, v in batch.items()} for batch in feed]


def test_same_seed_same_output_with_one_or_three_workers_and_epochs_differ(
    small_dataset: list[pathlib.Path],
) -> None:
    kwargs = {**CLIP, "transform": "sample_transforms:rng_only", "batch_size": 5, "epochs": 2}
    one = collect(h5feed.batches(small_dataset, **kwargs, workers=1, seed=3))
    three = collect(h5feed.batches(small_dataset, **kwargs, workers=3, seed=3))
    assert len(one) == len(three)
    for a, b in zip(one, three, strict=True):
        assert a["frames"].dtype == np.float64 and a["frames"].shape[1:] == (4,)
        np.testing.assert_array_equal(a["frames"], b["frames"])
        np.testing.assert_array_equal(a["sample"], b["sample"])
    by_epoch: dict[int, dict[int, bytes]] = collections.defaultdict(dict)
    for batch in one:
        for epoch, sample, out in zip(
            batch["epoch"], batch["sample"], batch["frames"], strict=True
        ):
            by_epoch[int(epoch)][int(sample)] = out.tobytes()
    assert by_epoch[0].keys() == by_epoch[1].keys()
    assert all(by_epoch[0][s] != by_epoch[1][s] for s in by_epoch[0])  # a new draw per epoch
    assert len(set(by_epoch[0].values())) == len(by_epoch[0])  # and per sample


@pytest.mark.parametrize(
    ("trainer_sets", "workers_see"), [({}, [1, 1, 1]), ({"OMP_NUM_THREADS": "3"}, [1, 3, 1])]
)
def test_a_workers_numeric_libraries_get_one_thread_each_unless_the_environment_says(
    small_dataset: list[pathlib.Path],
    monkeypatch: pytest.MonkeyPatch,
    trainer_sets: dict[str, str],
    workers_see: list[int],
) -> None:
    """OpenBLAS, OpenMP and MKL in a worker run one thread each (a worker is a core's worth
    of work: h5feed/producer/worker/threads.py); a value in the trainer's environment, which
    its local workers inherit, is kept."""
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in trainer_sets.items():
        monkeypatch.setenv(name, value)
    feed = h5feed.batches(
        small_dataset, **CLIP, transform="sample_transforms:numeric_threads", workers=2
    )
    seen = {tuple(row) for batch in collect(feed) for row in batch["frames"].tolist()}
    assert seen == {tuple(workers_see)}


@pytest.mark.parametrize(
    ("trainer_sets", "kept"), [({}, True), ({"MALLOC_TRIM_THRESHOLD_": "131072"}, False)]
)
def test_a_workers_allocator_keeps_freed_memory_unless_the_environment_says(
    small_dataset: list[pathlib.Path],
    monkeypatch: pytest.MonkeyPatch,
    trainer_sets: dict[str, str],
    kept: bool,
) -> None:
    """A worker's frames reuse freed memory, not fresh pages (page faults counted in the
    worker: h5feed/common/system/allocator.py); an allocator setting in the trainer's
    environment, which its local workers inherit, is the operator's and is kept. A clip
    kept faults none (a few dozen where a worker's heap still grows), one not kept ~4,500."""
    for name in OPERATOR_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in trainer_sets.items():
        monkeypatch.setenv(name, value)
    feed = h5feed.batches(
        small_dataset[:1], **CLIP, transform="sample_transforms:page_faults", workers=1
    )
    faults = [int(row[0]) for batch in collect(feed) for row in batch["frames"]]
    assert faults and all((f < 4 * FEW_FAULTS) == kept for f in faults), faults


def test_the_transform_sees_the_preprocessed_clip_and_its_arguments(
    small_dataset: list[pathlib.Path],
) -> None:
    plain = collect(h5feed.batches(small_dataset[:1], **CLIP, shuffle=False, workers=1))
    scaled = collect(
        h5feed.batches(
            small_dataset[:1], **CLIP, shuffle=False, workers=1,
            transform="sample_transforms:to_float", transform_args={"scale": 2.0},
        )
    )  # fmt: skip
    for a, b in zip(plain, scaled, strict=True):
        assert b["frames"].dtype == np.float32 and b["frames"].shape == a["frames"].shape
        np.testing.assert_allclose(b["frames"], a["frames"] * (2.0 / 255.0), atol=0.1)


def test_a_shape_changing_transform_gives_its_shape(small_dataset: list[pathlib.Path]) -> None:
    batches = collect(
        h5feed.batches(small_dataset, **CLIP, transform="sample_transforms:mean_pool", workers=2)
    )
    assert {b["frames"].shape[1:] for b in batches} == {(2, 3)}
    assert {b["frames"].dtype for b in batches} == {np.dtype(np.float32)}


def test_a_transform_that_raises_names_file_video_and_function(
    small_dataset: list[pathlib.Path],
) -> None:
    feed = h5feed.batches(
        small_dataset[:1], **CLIP, transform="sample_transforms:raises", workers=1
    )
    with pytest.raises(WorkerError) as caught:
        collect(feed)
    text = str(caught.value)
    assert "transform 'sample_transforms:raises' raised ValueError: boom" in text
    assert f"file {str(small_dataset[0])!r}" in text and "video 'video_" in text


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("no_such_module_h5feed:fn", "cannot import module 'no_such_module_h5feed'"),
        ("sample_transforms:missing", "'sample_transforms' has no attribute 'missing'"),
        ("sample_transforms:NOT_CALLABLE", "is a int, not callable"),
    ],
)
def test_a_bad_import_path_fails_at_job_start_naming_it(
    small_dataset: list[pathlib.Path], path: str, message: str
) -> None:
    with pytest.raises(WorkerError, match="TransformImportError") as caught:
        collect(h5feed.batches(small_dataset[:1], clip_len=1, transform=path, workers=1))
    assert f"transform {path!r}" in str(caught.value) and message in str(caught.value)


def test_a_transform_of_varying_shape_is_an_error(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(
        small_dataset, **CLIP, transform="sample_transforms:varying_shape", batch_size=12
    )
    with pytest.raises((WorkerError, h5feed.DataError)) as caught:
        collect(feed)
    text = str(caught.value)
    assert "one shape and dtype for every sample" in text
    assert "'sample_transforms:varying_shape'" in text and "video 'video_" in text


def test_a_dtype_the_wire_refuses_is_an_error(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(small_dataset[:1], clip_len=1, transform="sample_transforms:object_dtype")
    with pytest.raises(WorkerError, match=r"returned dtype object, which cannot go on the wire"):
        collect(feed)


def test_bad_transform_arguments_are_refused_before_any_process_starts() -> None:
    with pytest.raises(ValueError, match=r"import path 'package\.module:function'"):
        ClipSpec(transform="sample_transforms.to_float")
    with pytest.raises(ValueError, match="msgpack-able"):
        ClipSpec(transform="m:f", transform_args={"x": object()})
    with pytest.raises(ValueError, match="without a transform"):
        ClipSpec(transform_args={"x": 1})
    spec = ClipSpec(transform="m:f", transform_args={"x": [1, 2.5, "a"]})
    assert ClipSpec.from_wire(spec.to_wire()) == spec


def test_a_float32_transform_through_tensorflow(small_dataset: list[pathlib.Path]) -> None:
    pytest.importorskip("tensorflow")  # the tf extra is part of the test install
    ds = h5feed.dataset(
        small_dataset[:2], **CLIP, transform="sample_transforms:to_float", batch_size=4,
        workers=2, epochs=1,
    )  # fmt: skip
    frames = ds.element_spec["frames"]
    assert frames.dtype.name == "float32" and frames.shape.as_list() == [None, 2, 16, 16, 3]
    first = [b["frames"].numpy() for b in ds]
    again = [b["frames"].numpy() for b in ds]  # the next iteration: epoch 1, new plan
    videos = sum(len(b) for b in first)
    assert videos == 12 and sum(len(b) for b in again) == 12
    assert all(b.dtype == np.float32 for b in first + again)
    assert not all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))


def test_a_transform_that_fails_at_start_fails_dataset_itself(
    small_dataset: list[pathlib.Path],
) -> None:
    pytest.importorskip("tensorflow")
    with pytest.raises(WorkerError, match="no_such_module_h5feed"):
        h5feed.dataset(
            small_dataset[:1], clip_len=1, transform="no_such_module_h5feed:f", workers=1
        )


def test_the_hook_seeds_the_global_generators_per_sample_and_leaves_rng_alone() -> None:
    """Issue 22: a transform drawing from ``random``/``np.random`` keeps the same-seed
    guarantee; one drawing from ``rng`` gives what it gave before (``rng`` is not drawn)."""
    clip = np.zeros((1, 2, 2, 3), np.uint8)
    glob = Transform("sample_transforms:global_random", None, TRUSTED)
    first, again, other = (glob(clip, seed, "f.h5", "v") for seed in (7, 7, 8))
    np.testing.assert_array_equal(first, again)
    assert (first != other).all()
    rng_only = Transform("sample_transforms:rng_only", None, TRUSTED)
    np.testing.assert_array_equal(
        rng_only(clip, 7, "f.h5", "v"), np.random.default_rng(7).random(4)
    )
