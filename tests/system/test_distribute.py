"""h5feed under tf.distribute: equal shards, the shard a multi-worker TF_CONFIG gives, no tf.data
auto-sharding, and every sample exactly once per epoch across replicas (MirroredStrategy over 2
logical CPUs; MultiWorkerMirroredStrategy with 2 trainer processes on localhost)."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import sys
from collections.abc import Callable

import pytest
import tf_cluster
from conftest import one_file_of_tiny_videos
from paths import REPO

import h5feed
from h5feed.common.config import ClipSpec
from h5feed.consumer.plan.epoch_plan import EpochPlan, Index, PlanOptions
from h5feed.consumer.trainers.distribute import cluster_kwargs, cluster_shard

ROOT = REPO
TRAINER = ROOT / "tests" / "support" / "distribute_trainer.py"
VIDEOS = 17  # odd: two shards of 8 (the drop rule leaves one sample out of each epoch)


@pytest.fixture(scope="module")
def odd_dataset(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return one_file_of_tiny_videos(tmp_path_factory.mktemp("odd"), VIDEOS)


def tf_config(ports: list[int], kind: str, index: int, chief: bool = False) -> str:
    hosts = [f"localhost:{p}" for p in ports]
    cluster = {"chief": hosts[:1], "worker": hosts[1:]} if chief else {"worker": hosts}
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})


def test_equal_shards_drop_the_remainder_of_each_epoch() -> None:
    index = Index.build(["f"], [[(f"v{i}", 10, 0) for i in range(VIDEOS)]])
    for count in (2, 3, 4):
        for batch_size in (1, 4, 5):
            options = dict(shuffle=True, seed=5)
            dropped = []
            for epoch in (0, 1, 2):
                plans = [
                    EpochPlan(
                        index,
                        ClipSpec(clip_len=2),
                        PlanOptions(batch_size, drop_remainder=False, shard=(i, count), **options),
                        epoch,
                        clips_per_video=1,
                        clip_start="first",
                    )
                    for i in range(count)
                ]
                orders = [p.order.tolist() for p in plans]
                assert len({len(p) for p in plans}) == 1, "shards yield different batch counts"
                assert len({len(o) for o in orders}) == 1, "shards of different sizes"
                flat = [s for o in orders for s in o]
                assert len(flat) == len(set(flat)) == VIDEOS - VIDEOS % count
                dropped.append(set(range(VIDEOS)) - set(flat))
            if count > 1:  # shuffled: another sample left out each epoch
                assert len({frozenset(d) for d in dropped}) > 1


def test_tf_config_gives_the_shard() -> None:
    ports = [1, 2, 3]
    assert cluster_shard({}) is None
    assert cluster_shard({"TF_CONFIG": tf_config(ports, "worker", 2)}) == (2, 3)
    assert cluster_shard({"TF_CONFIG": tf_config(ports, "chief", 0, chief=True)}) == (0, 3)
    assert cluster_shard({"TF_CONFIG": tf_config(ports, "worker", 0, chief=True)}) == (1, 3)
    assert cluster_shard({"TF_CONFIG": tf_config(ports[:1], "worker", 0)}) is None  # one
    assert cluster_shard({"TF_CONFIG": tf_config(ports, "evaluator", 0)}) is None
    with pytest.raises(ValueError, match="TF_CONFIG is not a valid"):
        cluster_shard({"TF_CONFIG": "{not json"})
    with pytest.raises(ValueError, match="not in its cluster"):
        cluster_shard({"TF_CONFIG": tf_config(ports, "worker", 7)})
    env = {"TF_CONFIG": tf_config(ports, "worker", 1)}
    assert cluster_kwargs({"workers": 1}, env) == {"workers": 1, "shard": (1, 3)}
    assert cluster_kwargs({"shard": (1, 3)}, env) == {"shard": (1, 3)}
    assert cluster_kwargs({"shard": (0, 2)}, {}) == {"shard": (0, 2)}


def test_dataset_refuses_a_shard_that_contradicts_tf_config(
    small_dataset: list[pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TF_CONFIG", tf_config([1, 2], "worker", 1))
    with pytest.raises(ValueError, match=r"shard=\(0, 2\) contradicts TF_CONFIG.*worker 1 of 2"):
        h5feed.dataset(small_dataset, shard=(0, 2))


def test_dataset_turns_tf_data_auto_sharding_off(small_dataset: list[pathlib.Path]) -> None:
    import tensorflow as tf

    ds = h5feed.dataset(small_dataset, clip_len=2).map(lambda b: b["frames"])
    policy = ds.options().experimental_distribute.auto_shard_policy
    assert policy == tf.data.experimental.AutoShardPolicy.OFF


def test_distribute_sets_shard_and_batch_size_itself() -> None:
    with pytest.raises(TypeError, match="sets shard itself"):
        h5feed.distribute(object(), "x", global_batch_size=4, shard=(0, 1))


def run_trainers(
    mode: str,
    data: pathlib.Path,
    out: pathlib.Path,
    configs: Callable[[list[int]], list[str | None]],
    ports: int = 0,
) -> list[dict]:
    """Run one trainer process per TF_CONFIG that ``configs(ports fresh free ports)`` gives
    (None: none), together and bounded (tests/support/tf_cluster.py); their JSON results."""

    def commands(free: list[int]) -> list[tf_cluster.Command]:
        runs: list[tf_cluster.Command] = []
        for i, config in enumerate(configs(free)):
            env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
            env.pop("TF_CONFIG", None)
            if config is not None:
                env["TF_CONFIG"] = config
            runs.append(
                ([sys.executable, str(TRAINER), mode, str(data), str(out / f"result{i}.json")], env)
            )
        return runs

    count = len(configs([0] * ports))
    tf_cluster.run_cluster(commands, ports, [out / f"trainer{i}.log" for i in range(count)])
    return [json.loads((out / f"result{i}.json").read_text()) for i in range(count)]


def per_epoch(rows: list[list[int]]) -> dict[int, collections.Counter[int]]:
    counts: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for _replica, epoch, sample in rows:
        counts[epoch][sample] += 1
    return counts


@pytest.mark.timeout(tf_cluster.TEST_TIMEOUT_S)
def test_mirrored_strategy_two_replicas_every_sample_once(
    odd_dataset: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    (result,) = run_trainers("mirrored", odd_dataset, tmp_path, lambda _: [None])
    assert result["replicas"] == 2
    for way in ("from_function", "distribute_dataset"):
        rows = result[way]
        counts = per_epoch(rows)
        assert sorted(counts) == [0, 1], way
        for epoch, seen in counts.items():  # one worker: one shard, nothing dropped
            assert seen == collections.Counter(range(VIDEOS)), (way, epoch)
        assert {replica for replica, _, _ in rows} == {0, 1}, f"{way}: a replica got nothing"
    assert result["fit_steps"] == [5, 5]  # Keras 3 fit: 2 epochs of ceil(17 / 4) steps


@pytest.mark.xdist_group("machine")  # two TensorFlow trainers and a cluster on localhost
@pytest.mark.timeout(tf_cluster.TEST_TIMEOUT_S)
def test_multi_worker_mirrored_two_processes_every_sample_once(
    odd_dataset: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    def configs(ports: list[int]) -> list[str | None]:
        return [tf_config(ports, "worker", i) for i in range(2)]

    results = run_trainers("multiworker", odd_dataset, tmp_path, configs, ports=2)
    assert [r["replicas"] for r in results] == [2, 2]
    for way in ("from_function", "distribute_dataset"):
        workers = [per_epoch(r[way]) for r in results]
        for epoch in (0, 1):
            a, b = workers[0][epoch], workers[1][epoch]
            # equal shards: the same number of rows (hence of steps) on both workers
            assert sum(a.values()) == sum(b.values()) == VIDEOS // 2, (way, epoch)
            both = a + b
            assert set(a).isdisjoint(b), f"{way}: a sample on both workers in epoch {epoch}"
            assert max(both.values()) == 1, f"{way}: a sample twice in epoch {epoch}"
            assert len(both) == VIDEOS - 1  # the drop rule: 17 % 2 samples left out
        seen = [set(workers[0][e]) | set(workers[1][e]) for e in (0, 1)]
        assert seen[0] != seen[1], "the same sample dropped each epoch despite shuffle"
    assert all(r["from_function"] == r["distribute_dataset"] for r in results)
