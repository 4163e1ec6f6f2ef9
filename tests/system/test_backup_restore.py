"""``h5feed.BackupAndRestore`` end to end: a real Keras trainer (tests/support/backup_trainer.py,
run as
a subprocess with real local workers and HDF5 files) SIGKILLs itself at seeded steps and is
rerun from its backup directory until it completes.

What "continues exactly where the model's checkpoint is" means, and what is checked: a run
restores the weights and the position saved together at its last save point, so the batches
it trained after that save (before the kill) are trained *again* by the next run. Counting,
for each run, only what it trained before the next run's restore point (and all of the last
run), every batch of the uninterrupted run is trained exactly once, in its order, with the
same sample ids and the same frames (byte for byte).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
from typing import Any

import pytest
from paths import SUPPORT

import h5feed
from h5feed.consumer.position.resume import read_position
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

pytest.importorskip("tensorflow")  # the tf extra is part of the test install: never skipped
TRAINER = SUPPORT.joinpath("backup_trainer.py")
#: 2 files x 9 videos, batch_size 2: 9 batches per epoch, an odd count, so
#: steps_per_execution=2 ends each epoch with a partial execution.
DATA = SampleSpec(files=2, videos_per_file=9, min_frames=3, max_frames=6, height=16, width=16)
ARGS: dict[str, Any] = {"clip_len": 2, "batch_size": 2, "seed": 5, "flip": True}
EPOCHS, LENGTH = 3, 9

Record = tuple[int, int, tuple[int, ...], str]


def _config(tmp: pathlib.Path, files: list[str], **extra: Any) -> pathlib.Path:
    tmp.mkdir()
    config = {
        "files": files,
        "clip_len": ARGS["clip_len"],
        "args": ARGS,
        "epochs": EPOCHS,
        "backup_dir": str(tmp / "backup"),
        "log": str(tmp / "trained.jsonl"),
        **extra,
    }
    path = tmp / "config.json"
    path.write_text(json.dumps(config))
    return path


def _run(config: pathlib.Path, run: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TRAINER), str(config), str(run)],
        capture_output=True,
        text=True,
        timeout=120,
        # The script's own directory comes first on its sys.path, not the checkout's root:
        # make it import this checkout's h5feed (as `python -m pytest` does here).
        env={
            **os.environ,
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONPATH": os.pathsep.join(
                [str(TRAINER.parent.parent), os.environ.get("PYTHONPATH", "")]
            ),
        },
    )


def _until_done(config: pathlib.Path, kills: int, keep: dict[int, pathlib.Path]) -> list[int]:
    """Run the trainer until it completes; its exit codes. ``keep[run]``: a copy of the
    backup directory as that (killed) run left it."""
    backup = pathlib.Path(json.loads(config.read_text())["backup_dir"])
    codes = []
    for run in range(kills + 1):
        result = _run(config, run)
        codes.append(result.returncode)
        if run < kills:
            assert result.returncode == -9, f"run {run} was not killed:\n{result.stderr[-3000:]}"
            if run in keep:
                shutil.copytree(backup, keep[run])
        else:
            assert result.returncode == 0, f"run {run} failed:\n{result.stderr[-3000:]}"
    return codes


def _records(log: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _key(line: dict[str, Any]) -> Record:
    return (line["epoch"], line["batch"], tuple(line["samples"]), line["frames"])


def _result(config: pathlib.Path, run: int) -> dict[str, Any]:
    return json.loads((config.parent / f"result-{run}.json").read_text())  # type: ignore[no-any-return]


def _check_exactly_once(config: pathlib.Path, runs: int, reference: list[Record]) -> list[Any]:
    """The property in the module docstring; returns each run's restore point."""
    lines = _records(config.parent / "trained.jsonl")
    assert all(line["keras_epoch"] == line["epoch"] for line in lines), "Keras's epoch drifted"
    per_run = [[_key(line) for line in lines if line["run"] == run] for run in range(runs)]
    # A killed run leaves no result: its successor's restore point is in its own first record.
    starts = [(0, 0)] + [per_run[run][0][:2] for run in range(1, runs)]
    assert tuple(_result(config, runs - 1)["start"]) == starts[-1]
    position = {key[:2]: i for i, key in enumerate(reference)}
    union: list[Record] = []
    for run, trained in enumerate(per_run):
        first = position[trained[0][:2]]
        # From its restore point on, once each, in plan order; nothing before it.
        assert trained == reference[first : first + len(trained)], f"run {run}"
        assert trained[0][:2] == starts[run]
        if run + 1 < runs:
            upto = position[starts[run + 1]]
            assert first <= upto <= first + len(trained), f"run {run + 1} restored elsewhere"
            union += trained[: upto - first]
        else:
            union += trained
    assert union == reference, "the union of trained batches is not the uninterrupted run's"
    return starts


@pytest.mark.timeout(300)
def test_killed_trainers_resume_exactly_where_the_checkpoint_is(tmp_path: pathlib.Path) -> None:
    files = [str(p) for p in make_sample_dataset(tmp_path / "data", DATA)]
    # Index once, so every run knows the epoch's length (Keras then trains the same batches
    # to other weights than with an unknown length: see the end of this test).
    with h5feed.batches(files, **ARGS).stream() as stream:
        next(stream)
    assert h5feed.batches(files, **ARGS).length == LENGTH
    ref = _config(tmp_path / "ref", files, reference=True, workers=[2], steps_per_execution=1)
    # A: save every 3 batches, steps_per_execution=2, 1 worker, two kills in epoch 1 (the
    # second after a save inside the resumed epoch), no index cache (the length comes from
    # the backup). Kills at the 14th batch of run 0 = (1, 4) and the 6th of run 1.
    a = _config(
        tmp_path / "a", files, save_freq=3, steps_per_execution=2, workers=[1],
        index_cache=False, kill=[LENGTH + 5, 6],
    )  # fmt: skip
    # B: save at epoch ends, 2 workers then 1, killed at (1, 3).
    b = _config(
        tmp_path / "b", files, save_freq="epoch", steps_per_execution=1, workers=[2, 1],
        kill=[LENGTH + 4],
    )  # fmt: skip
    kept = {0: tmp_path / "a-backup-after-kill-0"}
    outcome: dict[str, Any] = {}

    def chain(name: str, config: pathlib.Path, kills: int, keep: dict[int, pathlib.Path]) -> None:
        try:
            outcome[name] = _until_done(config, kills, keep)
        except BaseException as exc:  # re-raised below, in the test's thread
            outcome[name] = exc

    # Three chains at once: TensorFlow's import dominates and overlaps on 2 cores.
    threads = [
        threading.Thread(target=chain, args=("ref", ref, 0, {})),
        threading.Thread(target=chain, args=("a", a, 2, kept)),
        threading.Thread(target=chain, args=("b", b, 1, {})),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=280)
        assert not thread.is_alive()
    for value in outcome.values():
        if isinstance(value, BaseException):
            raise value

    reference = [_key(line) for line in _records(ref.parent / "trained.jsonl")]
    assert len(reference) == EPOCHS * LENGTH
    assert [r[:2] for r in reference] == [(e, i) for e in range(EPOCHS) for i in range(LENGTH)]

    starts = _check_exactly_once(a, 3, reference)
    # The saves: every 3 batches by Keras's count (which counts a first execution of 2 as 1).
    assert starts == [(0, 0), (1, 2), (1, 6)]
    trained = [_key(line)[:2] for line in _records(a.parent / "trained.jsonl")]
    assert trained.count((1, 2)) == 2 and trained.count((1, 6)) == 2, "retrained after a kill"
    starts = _check_exactly_once(b, 2, reference)
    assert starts == [(0, 0), (1, 0)]
    assert not _result(a, 2)["backup_left"], "delete_checkpoint: the backup is removed at the end"
    assert not _result(b, 1)["backup_left"]
    # The model continues exactly where its checkpoint is: the final weights are the
    # uninterrupted run's, bit for bit (op determinism on). This needs the same epoch length
    # known to all: Keras trains the same batches in the same order to other weights when
    # the length is unknown (steps None, "ran out of data" each epoch) than when it is known.
    weights = _result(ref, 0)["weights"]
    assert _result(a, 2)["weights"] == weights and _result(b, 1)["weights"] == weights

    # A resumed fit's shorter first epoch: Keras is told the full epoch's length (steps 9),
    # trains the 3 batches left, then ends that epoch with one "Your input ran out of data"
    # warning and goes on with full epochs (docs/trainer/resume.md).
    last = _result(a, 2)
    assert (last["start"], last["steps"], last["ran_out"], last["epochs"]) == ([1, 6], 9, 1, 2)
    resumed = _result(b, 1)  # at an epoch's start: nothing short, no warning
    assert (resumed["start"], resumed["steps"], resumed["ran_out"], resumed["epochs"]) == (
        [1, 0], 9, 0, 2,
    )  # fmt: skip

    # The backup run 0 of A left, restored with another batch size: refused, naming it.
    with pytest.raises(h5feed.ResumeError, match=r"batch_size: saved 2, now 3"):
        h5feed.batches(files, resume=str(kept[0]), **{**ARGS, "batch_size": 3})


@pytest.mark.timeout(300)
def test_the_backups_of_two_shards_resume_on_one(tmp_path: pathlib.Path) -> None:
    """Two trainers of shards (0, 2) and (1, 2) SIGKILLed at the same step; their backup
    directories merged (``h5feed.merge_states(..., into=)``) and resumed on one trainer,
    which is killed once more inside the rest of the epoch (it saves after every batch
    there: format-2 positions) and resumed again. Every sample of the interrupted epoch is
    trained exactly once over the old shards' batches before their saves and the new runs'
    (one shard: nothing left out, not even the old shards' remainder), the rest in the
    epoch's order; the next epoch is the unsharded one."""
    files = [str(p) for p in make_sample_dataset(tmp_path / "data", DATA)]
    order: dict[int, list[int]] = {0: [], 1: []}  # the unsharded plan, from NumPy batches
    with h5feed.batches(files, epochs=2, **ARGS).stream() as stream:
        for batch in stream:
            order[int(batch["epoch"][0])] += batch["sample"].tolist()
    # 18 samples, 9 per old shard: 5 batches; saves every 3, killed in the 4th batch.
    shards = [{**ARGS, "shard": [i, 2]} for i in range(2)]
    extra = {"save_freq": 3, "steps_per_execution": 1, "workers": [1], "kill": [4], "epochs": 2}
    ranks = [
        _config(tmp_path / f"rank{i}", files, args=args, **extra) for i, args in enumerate(shards)
    ]
    codes: dict[int, Any] = {}

    def rank(i: int) -> None:
        codes[i] = _run(ranks[i], 0)

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=150)
        assert not thread.is_alive()
    for i in range(2):
        assert codes[i].returncode == -9, f"rank {i} was not killed:\n{codes[i].stderr[-3000:]}"
    backups = [json.loads(r.read_text())["backup_dir"] for r in ranks]
    assert [(p["epoch"], p["batch"]) for p in map(read_position, backups)] == [(0, 3)] * 2
    one = _config(
        tmp_path / "one", files, args={**ARGS, "shard": [0, 1]}, save_freq=1,
        steps_per_execution=1, workers=[1], kill=[2], epochs=2,
    )  # fmt: skip
    into = json.loads(one.read_text())["backup_dir"]
    merged = h5feed.merge_states(backups, into=into)
    assert read_position(into) == merged and merged["rest"] == [[[3, []], [3, []]]]
    assert os.path.exists(os.path.join(into, merged["weights"]))
    inside = tmp_path / "one-backup-after-kill-0"
    _until_done(one, 1, {0: inside})
    # Saved inside the rest: format 2, the rest kept (with one shard the rest is the tail of
    # the epoch's order, so only this tells it from a plain position at batch 7).
    saved = read_position(str(inside))
    assert saved is not None and (saved["format"], saved["epoch"], saved["batch"]) == (2, 0, 7)
    assert saved["rest"] == merged["rest"] and saved["fingerprint"]["shard"] == [0, 1]

    old = [
        sample
        for r in ranks
        for line in _records(r.parent / "trained.jsonl")
        if (line["epoch"], line["batch"]) < (0, 3)  # before the save: in the weights
        for sample in line["samples"]
    ]
    lines = _records(one.parent / "trained.jsonl")
    assert [(line["run"], line["epoch"], line["batch"]) for line in lines[:4]] == [
        (0, 0, 6), (0, 0, 7), (1, 0, 7), (1, 0, 8),
    ]  # fmt: skip
    kept = [line for line in lines if line["run"] == 1 or (line["epoch"], line["batch"]) < (0, 7)]
    rest = [s for line in kept if line["epoch"] == 0 for s in line["samples"]]
    assert sorted(old + rest) == sorted(order[0]), "not every sample of the epoch once"
    assert rest == [s for s in order[0] if s not in old], "the rest, not in the epoch's order"
    assert [s for line in kept if line["epoch"] == 1 for s in line["samples"]] == order[1]
    resumed = _result(one, 1)  # from inside the rest: Keras told the full length
    assert (resumed["start"], resumed["steps"], resumed["ran_out"], resumed["epochs"]) == (
        [0, 7], LENGTH, 1, 2,
    )  # fmt: skip
