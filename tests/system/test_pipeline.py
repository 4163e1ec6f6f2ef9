"""What arrives, how often, in what order: the semantics of the plan, through real workers."""

from __future__ import annotations

import collections
import pathlib
import time
from typing import Any

import cv2
import h5py
import numpy as np
import pytest
from conftest import own_worker_pids, wait_until_gone

import h5feed
from h5feed.common.config import ClipSpec
from h5feed.consumer.plan.epoch_plan import EpochPlan, Index, PlanOptions

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40), "flip": True}


def read_index(paths: list[pathlib.Path]) -> Index:
    """The index, read straight from the files with h5py (not through h5feed's reader)."""
    videos = []
    for path in paths:
        with h5py.File(path, "r") as f:
            videos.append(
                [
                    (name, f[name]["frames"].shape[0], int(f[name].attrs["label"]))
                    for name in sorted(f)
                ]
            )
    return Index.build([str(p) for p in paths], videos)


def collect(feed: Any) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v) for k, v in batch.items()} for batch in feed]


def test_every_clip_exactly_once_per_epoch_over_three_epochs(
    small_dataset: list[pathlib.Path],
) -> None:
    feed = h5feed.batches(
        small_dataset, **CLIP, clips_per_video=2, batch_size=5, epochs=3, workers=2, seed=1
    )
    batches = collect(feed)
    index = read_index(small_dataset)
    per_epoch: dict[int, collections.Counter[tuple[bytes, bytes]]] = collections.defaultdict(
        collections.Counter
    )
    samples: dict[int, list[int]] = collections.defaultdict(list)
    for batch in batches:
        epochs = set(batch["epoch"].tolist())
        assert len(epochs) == 1, "a batch straddles epochs"
        epoch = epochs.pop()
        per_epoch[epoch].update(zip(batch["file"].tolist(), batch["video"].tolist(), strict=True))
        samples[epoch].extend(batch["sample"].tolist())
    assert sorted(per_epoch) == [0, 1, 2]
    expected = {
        (f, n) for f, n in zip(index.file_names.tolist(), index.names.tolist(), strict=True)
    }
    for epoch, counts in per_epoch.items():
        assert set(counts) == expected, f"epoch {epoch} lost or invented videos"
        assert set(counts.values()) == {2}, f"epoch {epoch}: not exactly clips_per_video clips"
        assert sorted(samples[epoch]) == list(range(index.num_videos * 2))
    # 48 samples, batch 5: 9 full batches and one of 3 per epoch
    sizes = [len(b["label"]) for b in batches]
    assert sizes == ([5] * 9 + [3]) * 3
    assert samples[0] != samples[1], "two epochs with the same order: the plan is not per epoch"


def test_drop_remainder_leaves_out_each_epochs_partial_batch(
    small_dataset: list[pathlib.Path],
) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=5, epochs=2, drop_remainder=True)
    sizes = [len(b["label"]) for b in feed]
    assert sizes == [5] * 4 * 2  # 24 videos: 4 full batches per epoch, the 4 left over dropped


def test_batches_mix_files_as_the_global_plan_says(small_dataset: list[pathlib.Path]) -> None:
    options = {"batch_size": 6, "seed": 3, "shuffle": True}
    feed = h5feed.batches(small_dataset, **CLIP, **options, workers=4, epochs=1)
    batches = collect(feed)
    plan = EpochPlan(
        read_index(small_dataset),
        ClipSpec(**CLIP),  # type: ignore[arg-type]
        PlanOptions(
            batch_size=6,
            shuffle=True,
            seed=3,
            drop_remainder=False,
            shard=(0, 1),
        ),
        epoch=0,
        clips_per_video=1,
        clip_start="random",
    )
    assert len(batches) == len(plan)
    for got, want in zip(batches, plan, strict=True):
        assert got["sample"].tolist() == want.samples.tolist()
        assert got["start"].tolist() == want.starts.tolist()
    files_per_batch = [len(set(b["file"].tolist())) for b in batches]
    assert max(files_per_batch) >= 3, f"batches do not mix files: {files_per_batch}"


def test_shuffle_false_is_file_then_video_order(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=7, shuffle=False, workers=3)
    order = [
        pair for b in feed for pair in zip(b["file"].tolist(), b["video"].tolist(), strict=True)
    ]
    index = read_index(small_dataset)
    assert order == list(zip(index.file_names.tolist(), index.names.tolist(), strict=True))


def test_same_seed_same_batches_with_one_or_three_workers(
    small_dataset: list[pathlib.Path],
) -> None:
    def run(workers: int) -> list[dict[str, np.ndarray]]:
        return collect(
            h5feed.batches(small_dataset, **CLIP, batch_size=4, seed=11, workers=workers)
        )

    one, three = run(1), run(3)
    assert len(one) == len(three)
    for a, b in zip(one, three, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    flips = [
        not np.array_equal(b["frames"][i], b["frames"][i][:, :, ::-1])
        for b in one
        for i in range(2)
    ]
    assert any(flips)  # the frames are real images, so the comparison above means something


def test_non_deterministic_mode_yields_the_same_batches(small_dataset: list[pathlib.Path]) -> None:
    kwargs: dict[str, Any] = {**CLIP, "batch_size": 4, "seed": 5, "workers": 3}
    ordered = collect(h5feed.batches(small_dataset, **kwargs))
    loose = collect(h5feed.batches(small_dataset, **kwargs, deterministic=False))
    key = lambda b: b["sample"].tolist()  # noqa: E731
    assert sorted(map(key, loose)) == sorted(map(key, ordered))


def test_shards_are_disjoint_and_complete(small_dataset: list[pathlib.Path]) -> None:
    parts = [
        {
            (int(e), int(s))
            for b in h5feed.batches(
                small_dataset, **CLIP, shard=(i, 3), epochs=2, seed=9, workers=1
            )
            for e, s in zip(b["epoch"], b["sample"], strict=True)
        }
        for i in range(3)
    ]
    assert all(a.isdisjoint(b) for i, a in enumerate(parts) for b in parts[i + 1 :])
    assert set().union(*parts) == {(e, s) for e in range(2) for s in range(24)}
    assert sorted(len(p) for p in parts) == [16, 16, 16]


def test_iterations_continue_the_epoch_count(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, batch_size=8, epochs=1, seed=2, workers=1)
    first = collect(feed)
    second = collect(feed)
    assert {int(e) for b in first for e in b["epoch"]} == {0}
    assert {int(e) for b in second for e in b["epoch"]} == {1}
    assert [b["sample"].tolist() for b in first] != [b["sample"].tolist() for b in second]


def test_credits_bound_the_batches_in_flight(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(
        small_dataset, **CLIP, batch_size=2, workers=2, max_inflight_batches=3, epochs=1
    )
    with feed.stream() as stream:
        next(stream)
        time.sleep(1.0)  # a slow trainer: workers would run ahead if nothing held them back
        stats = stream.stats()
        assert stats["batches_dispatched"] == 1 + 3, stats  # taken + budget, not more
        for _ in stream:
            time.sleep(0.01)
        stats = stream.stats()
    assert stats["max_inflight_batches"] <= 3
    assert stats["batches"] == 12 and stats["clips"] == 24


def test_pixels_match_a_direct_opencv_decode(small_dataset: list[pathlib.Path]) -> None:
    feed = h5feed.batches(
        small_dataset, clip_len=3, stride=2, resize=(40, 52), batch_size=4, shuffle=True, seed=4
    )
    checked = 0
    for batch in feed:
        for row in range(len(batch["label"])):
            path, video = batch["file"][row].decode(), batch["video"][row].decode()
            start = int(batch["start"][row])
            with h5py.File(path, "r") as f:
                stored = f[video]["frames"]
                for t in range(3):
                    jpeg = stored[start + 2 * t]
                    bgr = cv2.imdecode(jpeg, cv2.IMREAD_COLOR)
                    want = cv2.cvtColor(
                        cv2.resize(bgr, (52, 40), interpolation=cv2.INTER_LINEAR),
                        cv2.COLOR_BGR2RGB,
                    )
                    np.testing.assert_array_equal(batch["frames"][row, t], want)
                    checked += 1
    assert checked == 24 * 3


def test_clip_start_center_and_first(small_dataset: list[pathlib.Path]) -> None:
    index = read_index(small_dataset)
    frames = dict(
        zip(
            zip(index.file_names.tolist(), index.names.tolist(), strict=True),
            index.frames.tolist(),
            strict=True,
        )
    )
    for mode in ("center", "first"):
        feed = h5feed.batches(
            small_dataset, clip_len=4, resize=(24, 32), clip_start=mode, shuffle=False
        )
        for batch in feed:
            for f, v, s in zip(
                batch["file"].tolist(),
                batch["video"].tolist(),
                batch["start"].tolist(),
                strict=True,
            ):
                room = frames[(f, v)] - 4
                assert s == (max(room, 0) + 1) // 2 if mode == "center" else s == 0


def test_no_worker_left_after_an_iteration(small_dataset: list[pathlib.Path]) -> None:
    collect(h5feed.batches(small_dataset, **CLIP, workers=2))
    assert wait_until_gone(own_worker_pids(), timeout_s=10) == []


@pytest.mark.parametrize("policy", ["loop", "repeat_last"])
def test_short_videos(tmp_path: pathlib.Path, policy: str) -> None:
    from h5feed.producer.sample_data import write_video_file

    images = [np.full((16, 16, 3), 40 * i, np.uint8) for i in range(3)]
    jpegs = [cv2.imencode(".png", im)[1].tobytes() for im in images]  # lossless: exact pixels
    path = tmp_path / "short.h5"
    write_video_file(path, {"video_000": (jpegs, 1)})
    (batch,) = h5feed.batches(path, clip_len=5, short_video=policy, batch_size=1, workers=1)
    assert batch["start"].tolist() == [0]
    want = [0, 1, 2, 0, 1] if policy == "loop" else [0, 1, 2, 2, 2]
    got = [int(batch["frames"][0, t, 0, 0, 0]) for t in range(5)]
    assert got == [40 * i for i in want]
