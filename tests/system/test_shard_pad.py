"""The remainder rules of ``shard=(i, n)`` (h5feed/consumer/plan/epoch_plan.py guarantee 3): *pad*
gives
every sample of an epoch exactly once across the n shards, shards still of equal batch counts,
padded rows zeros that no worker makes, ``sample`` -1 and ``valid`` False, counted in
``stats()["padded_samples"]``; *drop* stays the default; the refusals. Real worker processes,
real HDF5 files."""

from __future__ import annotations

import collections
import pathlib
from typing import Any

import numpy as np
import pytest
from conftest import one_file_of_tiny_videos

import h5feed
from h5feed.common.config import ClipSpec
from h5feed.common.errors import H5FeedError, ResumeError, SourceError
from h5feed.consumer.plan.epoch_plan import PAD_SAMPLE, EpochPlan, Index, PlanOptions, epoch_order
from h5feed.consumer.position.fingerprint import fingerprint

VIDEOS = 17  # 2 shards: 9 + 8 real (the second padded); 3 shards: 6 + 6 + 5
EPOCHS = 2
#: Batches of 4: with 2 shards the second's last batch is its padded row alone (no worker
#: makes any of it); with 3 the third's last batch has one real row and one padded.
BATCH = 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return one_file_of_tiny_videos(tmp_path_factory.mktemp("pad"), VIDEOS)


def feed_args(**more: Any) -> dict[str, Any]:
    return {
        "clip_len": 2, "workers": 1, "seed": 3, "batch_size": BATCH, "epochs": EPOCHS,
        "shard_remainder": "pad", **more,
    }  # fmt: skip


def numpy_shard(data: pathlib.Path, shard: tuple[int, int], **more: Any) -> tuple[list, dict]:
    """Every batch of ``shard`` (arrays copied) and the iteration's final stats()."""
    feed = h5feed.batches(data, **feed_args(shard=shard, **more))
    batches = [{k: np.array(v) for k, v in b.items()} for b in feed]
    return batches, feed.stats()


def check_exact(shards: list[list[dict[str, Any]]], count: int) -> None:
    """Every sample of each epoch once across the shards (valid rows), equal batch counts and
    sizes per shard, padded rows as the rule says."""
    for epoch in range(EPOCHS):
        valid: collections.Counter[int] = collections.Counter()
        sizes = []
        for batches in shards:
            mine = [b for b in batches if int(b["epoch"][0]) == epoch]
            sizes.append(sorted(len(b["sample"]) for b in mine))  # any order of release
            for b in mine:
                valid.update(int(s) for s in b["sample"][b["valid"]])
                pad = ~b["valid"]
                assert (b["sample"][pad] == PAD_SAMPLE).all()
                assert (b["sample"][b["valid"]] >= 0).all()
                assert not b["frames"][pad].any(), "a padded row is not zeros"
                assert all(row.any() for row in b["frames"][b["valid"]]), "a real row of zeros"
        assert valid == collections.Counter(range(VIDEOS)), f"epoch {epoch}: {valid}"
        assert len({tuple(s) for s in sizes}) == 1, f"shards differ in batches: {sizes}"
        assert sum(sizes[0]) == -(-VIDEOS // count)


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("resize", [None, (16, 16)])  # over the socket; in shared memory
def test_pad_gives_every_sample_once_in_equal_numpy_shards(
    tiny: pathlib.Path, count: int, resize: tuple[int, int] | None
) -> None:
    runs = [numpy_shard(tiny, (i, count), resize=resize) for i in range(count)]
    shards = [batches for batches, _stats in runs]
    check_exact(shards, count)
    for i, (batches, stats) in enumerate(runs):
        padded = sum(int((b["sample"] == PAD_SAMPLE).sum()) for b in batches)
        real = len(range(i, VIDEOS, count))
        assert padded == (-(-VIDEOS // count) - real) * EPOCHS
        assert stats["padded_samples"] == padded  # apart from skipped
        assert stats["skipped"] == 0
        for b in batches:
            pad = b["sample"] == PAD_SAMPLE
            assert (b["label"][pad] == 0).all() and (b["start"][pad] == 0).all()
            assert all(name == b"" for name in b["video"][pad])
    if count == 2:  # the second shard's last batch of each epoch is padding only
        last = [b for b in shards[1] if int(b["batch"][0]) == 2]
        assert [b["sample"].tolist() for b in last] == [[PAD_SAMPLE]] * EPOCHS


def test_pad_as_batches_complete_still_every_sample_once(tiny: pathlib.Path) -> None:
    """``deterministic=False``: a batch of padding only is released as soon as it is made,
    whatever the batches before it do."""
    shards = [numpy_shard(tiny, (i, 2), deterministic=False, workers=2)[0] for i in range(2)]
    check_exact(shards, 2)


def test_pad_no_worker_is_sent_a_padded_row(tiny: pathlib.Path) -> None:
    """A shard of 16 real samples and one padded row: the workers made exactly 16 clips per
    epoch, and the padded row came out all the same."""
    feed = h5feed.batches(tiny, **feed_args(shard=(1, 2), batch_size=8))
    batches = list(feed)
    stats = feed.stats()
    assert [len(b["sample"]) for b in batches] == [8, 1] * EPOCHS
    assert sum(w["clips"] for w in stats["workers"]) == 8 * EPOCHS  # 17 // 2: no padding
    assert stats["padded_samples"] == EPOCHS


@pytest.mark.parametrize("count", [2, 3])
def test_pad_gives_every_sample_once_in_equal_tf_data_shards(
    tiny: pathlib.Path, count: int
) -> None:
    shards = []
    for i in range(count):
        ds = h5feed.dataset(
            tiny, keys=("frames", "label", "sample", "epoch"),
            **feed_args(shard=(i, count), resize=(16, 16)),
        )  # fmt: skip
        shards.append([{k: np.asarray(v) for k, v in b.items()} for b in ds.as_numpy_iterator()])
    assert all("valid" in b for s in shards for b in s)  # emitted whenever pad is on
    check_exact(shards, count)


def test_drop_stays_the_default_and_emits_no_valid_in_tf_data(tiny: pathlib.Path) -> None:
    assert PlanOptions().shard_remainder == "drop"
    ds = h5feed.dataset(tiny, clip_len=2, workers=1, batch_size=4, shard=(0, 2))
    element = next(iter(ds))
    assert set(element) == {"frames", "label", "file", "video", "start"}
    plain = h5feed.batches(tiny, clip_len=2, workers=1, batch_size=4, shard=(1, 2))
    samples = [int(s) for b in plain for s in b["sample"]]
    assert len(samples) == VIDEOS // 2 and PAD_SAMPLE not in samples
    assert plain.stats()["padded_samples"] == 0


def test_pad_plans_every_sample_once_for_many_shapes() -> None:
    """The plan itself, for many totals, shard counts and batch sizes: the shards' real
    samples are a partition of the epoch, every shard the same number of batches of the same
    sizes, each shard at most one padded row, at its end."""
    for total in (1, 5, 16, 17):
        index = Index.build(["f"], [[(f"v{i}", 10, 0) for i in range(total)]])
        for count in range(1, 6):
            if count > total:
                continue
            for batch_size in (1, 3, 4):
                options = [PlanOptions(batch_size, shard=(i, count), shard_remainder="pad")
                           for i in range(count)]  # fmt: skip
                orders = [epoch_order(total, o, 1) for o in options]
                real = [s for order in orders for s in order.tolist() if s != PAD_SAMPLE]
                assert sorted(real) == list(range(total))
                for order in orders:
                    pads = np.flatnonzero(order == PAD_SAMPLE)
                    assert len(pads) <= 1 and all(p == len(order) - 1 for p in pads)
                plans = [EpochPlan(index, ClipSpec(clip_len=2), o, 1, 1, "first") for o in options]
                shapes = {tuple(len(b.samples) for b in plan) for plan in plans}
                assert len(shapes) == 1, (total, count, batch_size, shapes)


def test_pad_with_drop_remainder_is_refused(tiny: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="shard_remainder='pad' cannot go with drop_remainder"):
        h5feed.batches(tiny, shard=(0, 2), shard_remainder="pad", drop_remainder=True)
    with pytest.raises(ValueError, match="shard_remainder must be one of"):
        h5feed.batches(tiny, shard=(0, 2), shard_remainder="even")


def test_a_shard_with_no_sample_is_refused(tmp_path: pathlib.Path) -> None:
    """Three videos in four shards: the fourth would be padding only (nothing tells the
    clips' shape, nor would it evaluate anything): refused with the numbers."""
    data = one_file_of_tiny_videos(tmp_path, 3)
    with pytest.raises(H5FeedError, match=r"shard \(3, 4\) has no sample"):
        list(h5feed.batches(data, clip_len=2, workers=1, shard=(3, 4), shard_remainder="pad"))


def test_the_rule_is_in_the_fingerprint(tiny: pathlib.Path) -> None:
    drop = h5feed.batches(tiny, clip_len=2, workers=1, batch_size=4, shard=(0, 2))
    pad = h5feed.batches(tiny, **feed_args(shard=(0, 2)))
    assert fingerprint(drop.config) != fingerprint(pad.config)
    assert "shard_remainder" not in fingerprint(drop.config)  # older states still resume
    with drop.stream() as stream:
        next(stream)
        state = stream.state()
    with pytest.raises(ResumeError, match="shard_remainder"):
        h5feed.batches(tiny, resume=state, **feed_args(shard=(0, 2)))
    with pad.stream() as stream:
        next(stream)
        padded_state = stream.state()
    with pytest.raises(ResumeError, match="shard_remainder"):
        h5feed.batches(tiny, clip_len=2, workers=1, batch_size=4, shard=(0, 2),
                       resume=padded_state)  # fmt: skip
    resumed = h5feed.batches(tiny, resume=padded_state, **feed_args(shard=(0, 2)))
    assert len(list(resumed)) == EPOCHS * 3 - 1  # 9 rows: 3 batches an epoch, one taken


@pytest.mark.parametrize("count", [2, 3])
def test_a_map_source_pads_every_item_once_with_zero_rows(count: int) -> None:
    """Tokens (a varying-length field, a string, a number) of 13 items in batches of 2: the
    shards' valid items are every item once, padded rows are zeros of length 0 with an empty
    name, ``sample`` -1 and ``valid`` False; every shard the same batch sizes. With 2 shards
    the second's last batch is its padded row alone (made without a worker)."""
    items = 13
    shards = []
    for i in range(count):
        feed = h5feed.batches(
            source="user_sources:Tokens", source_args={"n": items}, batch_size=2, seed=4,
            workers=1, shard=(i, count), shard_remainder="pad",
        )  # fmt: skip
        shards.append(list(feed))
        padded = sum(int((b["sample"] == PAD_SAMPLE).sum()) for b in shards[-1])
        assert (
            feed.stats()["padded_samples"]
            == padded
            == -(-items // count) - len(range(i, items, count))
        )
    assert len({tuple(len(b["sample"]) for b in s) for s in shards}) == 1
    valid = collections.Counter(
        int(s) for batches in shards for b in batches for s in b["sample"][b["valid"]]
    )
    assert valid == collections.Counter(range(items))
    for b in (b for batches in shards for b in batches):
        pad = ~b["valid"]
        assert (b["sample"][pad] == PAD_SAMPLE).all()
        assert (b["tokens_length"][pad] == 0).all() and not b["tokens"][pad].any()
        assert (b["label"][pad] == 0).all() and all(n == b"" for n in b["name"][pad])
        real = b["sample"][b["valid"]]
        assert b["label"][b["valid"]].tolist() == real.tolist()  # rows are their items
    if count == 2:
        assert [b["sample"].tolist() for b in shards[1]][-1] == [PAD_SAMPLE]


def test_a_map_source_pads_in_tf_data_with_sample_and_valid() -> None:
    ds = h5feed.dataset(
        source="user_sources:Squares", source_args={"n": 5}, batch_size=2, shuffle=False,
        workers=1, shard=(1, 2), shard_remainder="pad",
    )  # fmt: skip
    batches = list(ds.as_numpy_iterator())
    assert [b["sample"].tolist() for b in batches] == [[1, 3], [PAD_SAMPLE]]
    assert [b["valid"].tolist() for b in batches] == [[True, True], [False]]
    assert batches[1]["x"].tolist() == [[0.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    ("source", "args", "why"),
    [
        ("user_sources:count_up", {"n": 10}, "generator source: .* its length is unknown"),
        ("user_keras:Batches", {"n_batches": 5, "batch": 2, "rows": 10}, "keras source: .*"),
        ("user_sources:Nested", {}, "map source: .* not dicts"),
    ],
)
def test_a_source_that_cannot_pad_is_refused_before_any_data_moves(
    source: str, args: dict[str, Any], why: str
) -> None:
    feed = h5feed.batches(
        source=source, source_args=args, shard=(0, 2), shard_remainder="pad", workers=1
    )
    with pytest.raises(SourceError, match=f"(?s){why}.*shard_remainder='drop'"):
        next(iter(feed))
    assert feed.stats()["batches"] == 0 and feed.stats()["padded_samples"] == 0


def test_keras_batches_weigh_the_padded_rows_out(tiny: pathlib.Path) -> None:
    """keras_batches with pad: (x, y, w), w = valid, so Keras's loss and weighted metrics
    leave the padded rows out; without targets, or with source=, pad is refused."""
    with h5feed.keras_batches(
        tiny, clip_len=2, resize=(8, 8), workers=1, batch_size=4, seed=3, shard=(1, 2),
        shard_remainder="pad",
    ) as ds:  # fmt: skip
        items = [ds[i] for i in range(len(ds))]
    assert len(items) == 3 and all(len(item) == 3 for item in items)
    assert [item[2].tolist() for item in items] == [[1.0] * 4, [1.0] * 4, [0.0]]
    assert not items[2][0].any() and items[2][2].dtype == np.float32
    with pytest.raises(ValueError, match="give y="):
        h5feed.keras_batches(tiny, y=None, shard=(0, 2), shard_remainder="pad")
    with pytest.raises(ValueError, match=r"keras_batches\(source=...\) cannot take"):
        h5feed.keras_batches(
            source="user_sources:Squares", source_args={"n": 5}, shard=(0, 2),
            shard_remainder="pad",
        )  # fmt: skip
