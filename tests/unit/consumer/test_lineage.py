"""The lineage record (``lineage=PATH``, h5feed/consumer/position/lineage.py): each row says which
step
trained it and what the plan made it from; steps once each across resumes; only complete
lines after a kill. Real workers, files and processes."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
from paths import SUPPORT

import h5feed
from h5feed.consumer.hdf5.config import hdf_config
from h5feed.consumer.plan.epoch_plan import Index
from h5feed.consumer.position import lineage
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

TINY = SampleSpec(
    files=2, videos_per_file=5, min_frames=6, max_frames=11, height=20, width=24, seed=7
)
# 10 videos x 2 clips = 20 samples: 7 batches of 3 per epoch (the last one of 2 rows).
ARGS: dict[str, Any] = dict(
    clip_len=3, batch_size=3, workers=2, seed=11, flip=True, clips_per_video=2,
    resize=(16, 20), crop=(12, 14),
)  # fmt: skip
PER_EPOCH = 7


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return [str(p) for p in make_sample_dataset(tmp_path_factory.mktemp("tiny"), TINY)]


def _steps(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["step"], []).append(row)
    return out


def _plan_rows(files: list[str], index: Index, epoch: int, batch: int, **args: Any) -> Any:
    config = hdf_config(files, args)
    return config.epoch_plan(index, epoch).batch(batch)


def test_rows_are_the_batches_sample_ids_and_the_plan(tiny: list[str], tmp_path: Any) -> None:
    path = str(tmp_path / "lineage.ndjson")
    feed = h5feed.batches(tiny, epochs=2, lineage=path, **ARGS)
    with feed.stream() as stream:
        batches = list(stream)
        index = stream.scheduler.index
    assert index is not None and len(batches) == 2 * PER_EPOCH
    rows = lineage.read_rows(path)
    by_step = _steps(rows)
    assert sorted(by_step) == list(range(2 * PER_EPOCH))  # step = e * L + b, once each
    for step, batch in enumerate(batches):
        got = by_step[step]
        epoch, position = int(batch["epoch"][0]), int(batch["batch"][0])
        assert step == epoch * PER_EPOCH + position
        assert [r["sample"] for r in got] == batch["sample"].tolist()
        assert [r["row"] for r in got] == list(range(len(got)))
        assert [r["file"].encode() for r in got] == batch["file"].tolist()
        assert [r["video"].encode() for r in got] == batch["video"].tolist()
        assert [r["start"] for r in got] == batch["start"].tolist()
        assert [r["label"] for r in got] == batch["label"].tolist()
        planned = _plan_rows(tiny, index, epoch, position, **ARGS)
        assert [r["flip"] for r in got] == planned.flips.tolist()
        assert [r["crop_u"] for r in got] == planned.crop_uniforms.tolist()
        for r in got:  # the workers' own offset function, on the resized frame
            assert r["crop_top"] == min(int(r["crop_u"][0] * (16 - 12 + 1)), 16 - 12)
            assert r["crop_left"] == min(int(r["crop_u"][1] * (20 - 14 + 1)), 20 - 14)
        assert {"seed", "valid"}.isdisjoint(got[0])  # no transform, no on_error="skip"
    head = lineage.read_header(path)
    assert head["files"] == tiny and head["clip"]["crop"] == [12, 14]
    assert head["fingerprint"]["seed"] == 11


def test_pandas_reads_the_record(tiny: list[str], tmp_path: Any) -> None:
    import pandas  # the test extra's: a reader of NDJSON, as DuckDB's read_json_auto is

    path = str(tmp_path / "lineage.ndjson")
    with h5feed.batches(tiny, lineage=path, **ARGS).stream() as stream:
        samples = [s for b in stream for s in b["sample"].tolist()]
    frame = pandas.read_json(path, lines=True)
    assert frame["sample"].tolist() == samples
    assert frame.groupby("step").size().tolist() == [3] * 6 + [2]


def test_later_iterations_continue_the_steps_and_a_new_feed_starts_afresh(
    tiny: list[str], tmp_path: Any
) -> None:
    path = str(tmp_path / "lineage.ndjson")
    feed = h5feed.batches(tiny, lineage=path, **ARGS)
    for _ in range(2):  # epochs 0 and 1: one iteration each
        with feed.stream() as stream:
            for _batch in stream:
                pass
    steps = [r["step"] for r in lineage.read_rows(path)]
    assert sorted(set(steps)) == list(range(2 * PER_EPOCH)) and steps == sorted(steps)
    h5feed.batches(tiny, lineage=path, **ARGS)  # a fresh run: the record starts empty
    assert lineage.read_rows(path) == []


def test_resume_cuts_the_record_to_the_state_no_step_twice(tiny: list[str], tmp_path: Any) -> None:
    path = str(tmp_path / "lineage.ndjson")
    reference = str(tmp_path / "reference.ndjson")
    with h5feed.batches(tiny, epochs=2, lineage=reference, **ARGS).stream() as stream:
        for _batch in stream:
            pass
    stream = h5feed.batches(tiny, epochs=2, lineage=path, **ARGS).stream()
    for _ in range(9):  # steps 0..8; the state is saved after step 5 (epoch 0 batch ... 5)
        next(stream)
        if _ == 5:
            state = stream.state()
    stream.close()  # steps 6..8 were taken after the state: trained again after the resume
    assert max(r["step"] for r in lineage.read_rows(path)) == 8
    resumed = h5feed.batches(tiny, epochs=2, lineage=path, resume=state, **ARGS)
    assert max(r["step"] for r in lineage.read_rows(path)) == 5  # cut at once
    with resumed.stream() as again:
        for _batch in again:
            pass
    rows = lineage.read_rows(path)
    assert [r["step"] for r in rows] == [r["step"] for r in lineage.read_rows(reference)]
    assert rows == lineage.read_rows(reference)  # exactly the uninterrupted run's record


def test_resume_of_an_unordered_run_keeps_the_batches_its_state_took(
    tiny: list[str], tmp_path: Any
) -> None:
    path = str(tmp_path / "lineage.ndjson")
    args = {**ARGS, "deterministic": False}
    stream = h5feed.batches(tiny, lineage=path, **args).stream()
    taken = [next(stream) for _ in range(4)]
    state = stream.state()
    next(stream)  # taken after the state
    stream.close()
    h5feed.batches(tiny, lineage=path, resume=state, **args)
    rows = lineage.read_rows(path)
    # Unordered: the epoch's short last batch (2 rows) may be among the four taken.
    assert [r["step"] for r in rows] == [s for s, b in enumerate(taken) for _ in b["sample"]]
    assert [r["sample"] for r in rows] == [s for b in taken for s in b["sample"].tolist()]


def test_a_file_that_is_not_a_record_is_refused_not_truncated(
    tiny: list[str], tmp_path: Any
) -> None:
    path = tmp_path / "train.py"
    path.write_text("print('my training script')\n")
    with pytest.raises(ValueError, match="not an h5feed lineage record"):
        h5feed.batches(tiny, lineage=str(path), **ARGS)
    assert path.read_text() == "print('my training script')\n"


def test_a_cut_last_line_is_left_out_and_cut_on_resume(tiny: list[str], tmp_path: Any) -> None:
    """A machine crash may leave the last line cut: readers and a resume drop it."""
    path = str(tmp_path / "lineage.ndjson")
    stream = h5feed.batches(tiny, lineage=path, **ARGS).stream()
    next(stream)
    next(stream)
    state = stream.state()
    stream.close()
    with open(path, "ab") as out:
        out.write(b'{"step":2,"epoch":0,"batch":2,"row":0,"sam')
    assert [r["step"] for r in lineage.read_rows(path)] == [0] * 3 + [1] * 3
    h5feed.batches(tiny, lineage=path, resume=state, **ARGS)
    assert pathlib.Path(path).read_bytes().endswith(b"}\n")
    assert len(lineage.read_rows(path)) == 6


_KILLED_TRAINER = textwrap.dedent(
    """
    import sys
    import h5feed

    files, path = sys.argv[1].split(","), sys.argv[2]
    feed = h5feed.batches(files, lineage=path, epochs=None, **{args!r})
    for i, batch in enumerate(feed.stream()):
        if i == 3:
            print("running", flush=True)
    """
)


def test_a_trainer_killed_while_writing_leaves_only_complete_lines(
    tiny: list[str], tmp_path: Any
) -> None:
    """SIGKILL while batches are being taken and written (epochs=None: it never stops):
    every line of the record parses, and its steps run 0, 1, 2, ... without a gap."""
    path = str(tmp_path / "lineage.ndjson")
    script = _KILLED_TRAINER.format(args={**ARGS, "workers": 1})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", script, ",".join(tiny), path],
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its workers go with the group
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"running\n"  # blocks until 4 batches are taken
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    raw = pathlib.Path(path).read_bytes()
    assert raw.endswith(b"\n")
    rows = [json.loads(line) for line in raw.splitlines()]
    steps = [r["step"] for r in rows]
    assert len(steps) >= 12 and steps == sorted(steps)
    assert sorted(set(steps)) == list(range(steps[-1] + 1))
    counts = np.bincount(steps)  # whole batches: 3 rows, 2 for an epoch's last
    assert counts.tolist() == [
        2 if s % PER_EPOCH == PER_EPOCH - 1 else 3 for s in range(len(counts))
    ]


# -- h5feed lineage FILE --step N [--show ROW] -------------------------------------------


def _run_cli(*argv: str) -> int:
    from h5feed.cli import main

    return main(list(argv))


def test_cli_step_prints_the_rows_of_that_step(
    tiny: list[str], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "lineage.ndjson")
    with h5feed.batches(tiny, epochs=2, lineage=path, **ARGS).stream() as stream:
        batches = list(stream)
    assert _run_cli("lineage", path, "--step", "8") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "step 8: epoch 1, batch 1, 3 rows"
    assert lines[1].split() == [
        "row", "sample", "file", "video", "label", "start", "flip", "crop_top", "crop_left",
        "crop_u",
    ]  # fmt: skip
    batch = batches[8]
    for row, line in enumerate(lines[2:]):
        cells = line.split()
        assert cells[:6] == [
            str(row), str(batch["sample"][row]), batch["file"][row].decode(),
            batch["video"][row].decode(), str(batch["label"][row]), str(batch["start"][row]),
        ]  # fmt: skip
    assert len(lines) == 2 + 3
    assert _run_cli("lineage", path, "--step", "99") == 1
    err = capsys.readouterr().err
    assert "step 99 is not in the lineage record" in err and "holds steps 0..13" in err


@pytest.mark.parametrize(
    "clip",
    [
        {"resize": (16, 20), "crop": (12, 14)},  # offsets in pixels in the record
        {"resize": None, "crop": (15, 17)},  # the stored size decides: from the plan's draws
    ],
)
def test_cli_show_writes_exactly_the_batch_clip(
    tiny: list[str], tmp_path: Any, clip: dict[str, Any]
) -> None:
    import cv2

    path = str(tmp_path / "lineage.ndjson")
    args = {**ARGS, **clip}
    with h5feed.batches(tiny, lineage=path, **args).stream() as stream:
        batches = [{k: np.array(v) for k, v in b.items()} for b in stream]
    rows = lineage.read_rows(path)
    flipped = [r for r in rows if r["flip"]]
    plain = [r for r in rows if not r["flip"]]
    assert flipped and plain
    for row in (flipped[0], plain[0], rows[-1]):
        png = str(tmp_path / f"step{row['step']}-{row['row']}.png")
        assert _run_cli("lineage", path, "--step", str(row["step"]), "--show",
                        str(row["row"]), "--out", png) == 0  # fmt: skip
        strip = cv2.imread(png, cv2.IMREAD_UNCHANGED)[:, :, ::-1]  # PNG: BGR on disk
        frames = batches[row["step"]]["frames"][row["row"]]  # [T, H, W, 3] RGB
        assert strip.shape == (frames.shape[1], frames.shape[0] * frames.shape[2], 3)
        np.testing.assert_array_equal(np.stack(np.split(strip, frames.shape[0], axis=1)), frames)


def test_cli_show_of_a_row_the_step_lacks_is_an_error(
    tiny: list[str], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "lineage.ndjson")
    with h5feed.batches(tiny, lineage=path, **ARGS).stream() as stream:
        next(stream)
    assert _run_cli("lineage", path, "--step", "0", "--show", "3") == 1
    assert "step 0 has 3 rows (0..2)" in capsys.readouterr().err


# -- Keras: steps_per_execution, keras_batches' peek, BackupAndRestore ----------------------


def _plan_of(files: list[str], epochs: int, **args: Any) -> list[tuple[int, int, list[int]]]:
    """(epoch, batch, sample ids) of every batch of ``epochs`` epochs, from a NumPy run."""
    with h5feed.batches(files, epochs=epochs, **args).stream() as stream:
        return [(int(b["epoch"][0]), int(b["batch"][0]), b["sample"].tolist()) for b in stream]


def _record_steps(path: str) -> list[tuple[int, int, list[int]]]:
    """(epoch, batch, sample ids) of each step of the record, checking steps run 0, 1, ...
    once each with their rows together and in order."""
    by_step = _steps(lineage.read_rows(path))
    assert sorted(by_step) == list(range(len(by_step)))
    out = []
    for step in range(len(by_step)):
        rows = by_step[step]
        assert [r["row"] for r in rows] == list(range(len(rows))), f"step {step} twice?"
        out.append((rows[0]["epoch"], rows[0]["batch"], [r["sample"] for r in rows]))
    return out


@pytest.mark.timeout(300)
def test_keras_batches_peek_and_steps_per_execution_each_step_once(
    tiny: list[str], tmp_path: Any
) -> None:
    """``model.fit(keras_batches(...), steps_per_execution=2)``: Keras peeks at items to
    build the model and gets them back; the record's step s is the s-th batch the model
    trained (its train step notes the sample ids it trains, in order)."""
    keras = pytest.importorskip("keras")  # the tf extra is part of the test install
    import tensorflow as tf

    path = str(tmp_path / "lineage.ndjson")
    trained: list[list[int]] = []

    def note(sample: np.ndarray) -> np.ndarray:
        trained.append(sample.tolist())
        return np.int64(0)

    class Net(keras.Model):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.pool = keras.layers.GlobalAveragePooling3D()
            self.dense = keras.layers.Dense(4)

        def call(self, x: Any) -> Any:
            return self.dense(self.pool(tf.cast(x["frames"], "float32") / 255.0))

        def train_step(self, data: Any) -> Any:
            x, y = data
            mark = tf.numpy_function(note, [x["sample"]], tf.int64, stateful=True)
            with tf.control_dependencies([mark]):
                frames = tf.identity(x["frames"])
            return super().train_step(({"frames": frames, "sample": x["sample"]}, y))

    ds = h5feed.keras_batches(tiny, x=("frames", "sample"), y="label", lineage=path, **ARGS)
    served = [0]
    base = type(ds)

    def counted(self: Any, index: int) -> Any:
        served[0] += 1
        return base.__getitem__(self, index)

    ds.__class__ = type("Counted", (base,), {"__getitem__": counted})
    with ds:
        model = Net()
        model.compile(
            keras.optimizers.SGD(0.01),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=2,
            jit_compile=False,  # the train step calls back into Python
        )
        model.fit(ds, epochs=2, verbose=0)
        iterations = int(model.optimizer.iterations.numpy())
    record = _record_steps(path)
    assert iterations == 2 * PER_EPOCH
    assert served[0] > iterations  # Keras peeked at items and got them back
    assert [samples for _e, _b, samples in record] == trained  # step s: the s-th trained
    assert record == _plan_of(tiny, 2, **ARGS)  # and the plan's batch (e, s - e * L)


TRAINER = SUPPORT.joinpath("backup_trainer.py")


@pytest.mark.timeout(300)
def test_backup_and_restore_after_a_kill_cuts_the_steps_trained_again(
    tmp_path: pathlib.Path,
) -> None:
    """tests/support/backup_trainer.py (model.fit, steps_per_execution=2, h5feed.BackupAndRestore
    saving every 3 steps, tf.data prefetching ahead) SIGKILLed in epoch 1, then run again to
    the end: the record holds each step of the run once, the plan's batch, although the
    killed run had written steps past its last save (prefetched, or trained and lost)."""
    pytest.importorskip("tensorflow")
    data = SampleSpec(files=2, videos_per_file=9, min_frames=3, max_frames=6, height=16, width=16)
    files = [str(p) for p in make_sample_dataset(tmp_path / "data", data)]
    args = {"clip_len": 2, "batch_size": 2, "seed": 5, "flip": True}  # 9 batches per epoch
    path = str(tmp_path / "lineage.ndjson")
    config = {
        "files": files, "clip_len": 2, "args": {**args, "lineage": path}, "epochs": 2,
        "backup_dir": str(tmp_path / "backup"), "log": str(tmp_path / "trained.jsonl"),
        "save_freq": 3, "steps_per_execution": 2, "workers": [1], "kill": [9 + 5],
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": os.pathsep.join([str(TRAINER.parent.parent), *sys.path]),
    }
    killed_at = None
    for run, expected in ((0, -9), (1, 0)):
        result = subprocess.run(
            [sys.executable, str(TRAINER), str(tmp_path / "config.json"), str(run)],
            capture_output=True, text=True, timeout=200, env=env,
        )  # fmt: skip
        assert result.returncode == expected, result.stderr[-3000:]
        if run == 0:
            killed_at = max(r["step"] for r in lineage.read_rows(path))
    lines = [json.loads(x) for x in (tmp_path / "trained.jsonl").read_text().splitlines()]
    first_of_run_1 = next(x for x in lines if x["run"] == 1)
    restore_step = first_of_run_1["epoch"] * 9 + first_of_run_1["batch"]
    assert killed_at is not None and killed_at >= 9 + 4 > restore_step  # rows were cut
    record = _record_steps(path)
    assert record == _plan_of(files, 2, **args)  # 18 steps, once each, the plan's batches
    # What the runs trained, each from its restore point: step s is the s-th batch trained.
    union = [x for x in lines if x["run"] == 0][:restore_step]
    union += [x for x in lines if x["run"] == 1]
    assert [(x["epoch"], x["batch"], x["samples"]) for x in union] == record


# -- source= and transform=: the columns that exist ----------------------------------------


def test_a_map_source_records_its_item_indices(tmp_path: Any) -> None:
    path = str(tmp_path / "lineage.ndjson")
    feed = h5feed.batches(
        source="user_sources:make_squares", source_args={"n": 11}, batch_size=4, workers=2,
        epochs=2, lineage=path,
    )  # fmt: skip
    with feed.stream() as stream:
        batches = [b["i"].tolist() for b in stream]
    record = _record_steps(path)  # 3 batches an epoch: steps 0..5, (e, b) = divmod(s, 3)
    assert [(e, b) for e, b, _ in record] == [divmod(s, 3) for s in range(6)]
    assert [samples for _e, _b, samples in record] == batches  # item i holds "i": i
    assert set(lineage.read_rows(path)[0]) == {"step", "epoch", "batch", "row", "sample"}
    assert lineage.read_header(path)["kind"] == "source"


def test_a_keras_source_records_one_row_per_batch_with_its_item(tmp_path: Any) -> None:
    pytest.importorskip("keras")
    path = str(tmp_path / "lineage.ndjson")
    feed = h5feed.batches(
        source="user_keras:Batches", source_args={"n_batches": 3, "batch": 4, "rows": 10},
        workers=1, lineage=path,
    )  # fmt: skip
    with feed.stream() as stream:
        firsts = [int(x[0, 0]) // 4 for x, _y in stream]  # batch b's rows start at 4 b
    rows = lineage.read_rows(path)
    assert [r["item"] for r in rows] == firsts and [r["step"] for r in rows] == [0, 1, 2]
    assert [r["rows"] for r in rows] == [4 if i < 2 else 2 for i in firsts]


def test_a_generator_source_records_one_row_per_batch(tmp_path: Any) -> None:
    path = str(tmp_path / "lineage.ndjson")
    feed = h5feed.batches(
        source="user_sources:count_up", source_args={"n": 10}, batch_size=4, workers=1,
        lineage=path,
    )  # fmt: skip
    with feed.stream() as stream:
        sizes = [len(b["value"]) for b in stream]
    rows = lineage.read_rows(path)
    assert [(r["step"], r["rows"]) for r in rows] == list(enumerate(sizes))
    assert set(rows[0]) == {"step", "epoch", "batch", "row", "rows"}


def test_a_transform_adds_each_rows_seed(tiny: list[str], tmp_path: Any) -> None:
    path = str(tmp_path / "lineage.ndjson")
    args = {**ARGS, "transform": "sample_transforms:mean_pool"}
    with h5feed.batches(tiny, lineage=path, **args).stream() as stream:
        next(stream)
        index = stream.scheduler.index
    assert index is not None
    rows = lineage.read_rows(path)
    planned = _plan_rows(tiny, index, 0, 0, **args)
    assert [r["seed"] for r in rows] == planned.seeds.tolist()


def test_names_that_need_escaping_make_valid_json() -> None:
    """File and video names are written as JSON strings: quotes, backslashes, newlines and
    bytes that are not UTF-8 still give one line that parses."""
    from h5feed.consumer.core.assembly import Batch
    from h5feed.consumer.plan.epoch_plan import PlannedBatch

    names = np.array([b'a"b\\c\nd', b"\xff\xfe video"], dtype=object)
    planned = PlannedBatch(
        3, 4, np.array([5, 6]), np.array([0, 1]), np.array([7, 8]), np.array([[0.5, 0.25]] * 2),
        np.array([True, False]), np.array([1, 2], np.uint64),
    )  # fmt: skip
    arrays = {"file": names, "video": names[::-1], "label": np.array([1, 2])}
    columns = lineage.HdfColumns(crop=lambda uy, ux: (None, 3))
    text = lineage.hdf5_lines(9, Batch(3, 4, arrays, planned=planned), planned, columns,
                              lineage.JsonNames())  # fmt: skip
    lines = text.splitlines(keepends=True)
    assert len(lines) == 2 and all(line.endswith("}\n") for line in lines)
    rows = [json.loads(line) for line in lines]
    assert rows[0]["file"] == 'a"b\\c\nd' and rows[1]["file"] == "\ufffd\ufffd video"
    assert rows[0]["crop_top"] is None and rows[0]["crop_left"] == 3
    assert rows[0]["crop_u"] == [0.5, 0.25] and [r["flip"] for r in rows] == [True, False]


def test_cli_show_finds_files_under_the_data_root(
    tiny: list[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files named relative to ``data_root`` (as producers on other hosts see them): the
    header keeps the root, and --show reads them there, from any working directory."""
    path = str(tmp_path / "lineage.ndjson")
    root = str(pathlib.Path(tiny[0]).parent)
    names = [pathlib.Path(f).name for f in tiny]
    with h5feed.batches(names, data_root=root, lineage=path, **ARGS).stream() as stream:
        frames = np.array(next(stream)["frames"][1])
    monkeypatch.chdir(tmp_path)
    assert lineage.read_rows(path)[1]["file"] in names
    assert _run_cli("lineage", path, "--step", "0", "--show", "1", "--out", "clip.png") == 0
    import cv2

    strip = cv2.imread(str(tmp_path / "clip.png"), cv2.IMREAD_UNCHANGED)[:, :, ::-1]
    np.testing.assert_array_equal(np.stack(np.split(strip, len(frames), axis=1)), frames)


# -- what a record claims never costs what it claims (issue 38, item 5) ----------------------


@pytest.fixture(scope="module")
def record(tiny: list[str], tmp_path_factory: pytest.TempPathFactory) -> str:
    """A record of one epoch of ``tiny`` (absolute paths, no data root)."""
    path = str(tmp_path_factory.mktemp("record") / "lineage.ndjson")
    with h5feed.batches(tiny, lineage=path, **ARGS).stream() as stream:
        next(stream)
    return path


def _copy_record(record: str, tmp_path: Any, **header: Any) -> str:
    """A copy of ``record`` whose header has ``header``'s keys changed (None: removed)."""
    path = str(tmp_path / "copy.ndjson")
    pathlib.Path(path).write_bytes(pathlib.Path(record).read_bytes())
    head = json.loads(pathlib.Path(lineage.header_path(record)).read_text())
    for key, value in header.items():
        if value is None:
            head.pop(key)
        else:
            head[key] = value
    pathlib.Path(lineage.header_path(path)).write_text(json.dumps(head))
    return path


def _show(path: str, tmp_path: Any, *more: str) -> int:
    out = str(tmp_path / "clip.png")
    return _run_cli("lineage", path, "--step", "0", "--show", "0", "--out", out, *more)


@pytest.mark.parametrize(
    ("clip", "said"),
    [
        # 3 frames of 5000x9000: 135 MP of output, past the producers' 16 x 4K UHD (133 MP)
        ({"clip_len": 3, "resize": [5000, 9000], "crop": None}, "max_clip_pixels"),
        # a 12x14 crop of frames resized to 40000x40000 (4.5 GB a frame, before the crop)
        ({"resize": [40000, 40000], "crop": [12, 14]}, "max_frame_pixels"),
        ({"clip_len": 16, "resize": [40000, 40000], "crop": None}, "max_clip_pixels"),
    ],
)
def test_cli_show_makes_no_clip_past_the_producers_caps(
    record: str, tmp_path: Any, capsys: pytest.CaptureFixture[str], clip: dict[str, Any], said: str
) -> None:
    """A header asking for huge clips is refused before anything is allocated (today: 2.5
    GiB for 6000x6000, a 71.5 GiB attempt and a traceback for 40000x40000)."""
    head = json.loads(pathlib.Path(lineage.header_path(record)).read_text())
    path = _copy_record(record, tmp_path, clip={**head["clip"], **clip})
    assert _show(path, tmp_path) == 1
    err = capsys.readouterr().err
    assert err.startswith("h5feed lineage: error:") and said in err
    assert not (tmp_path / "clip.png").exists()


@pytest.mark.parametrize("size", [lineage.MAX_LINE_BYTES + 1, 1 << 30])
def test_a_line_past_the_bound_is_refused_unread(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], size: int
) -> None:
    """A record of one 1 GiB line (sparse: 4 KiB on disk) costs what a 64 KiB line does
    (today: read whole, 2 GiB); it is no row, and the command says so."""
    import tracemalloc

    path = tmp_path / "huge.ndjson"
    start = b'{"step":0,"epoch":0,"batch":0,"row":0,"pad":"'
    with open(path, "wb") as handle:
        handle.write(start)
        handle.truncate(size - 3)  # NUL bytes, never written
        handle.seek(0, os.SEEK_END)
        handle.write(b'"}\n')
    tracemalloc.start()
    try:
        assert _run_cli("lineage", str(path), "--step", "0") == 1
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    assert f"line 1 of {path} is longer than {lineage.MAX_LINE_BYTES} bytes" in (
        capsys.readouterr().err
    )
    with pytest.raises(ValueError, match="longer than"):
        lineage.read_rows(str(path))


def test_cli_show_reads_only_a_file_the_header_lists(
    record: str, tiny: list[str], tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row naming a file the header does not list is refused, with a data root of null or
    "/" as with none (today: read, whatever it is)."""
    import shutil

    other = tmp_path / "other.h5"
    shutil.copy(tiny[0], other)  # a readable HDF5 file, listed nowhere
    rows = pathlib.Path(record).read_text().splitlines(keepends=True)
    first = json.loads(rows[0])
    for root, named in ((None, str(other)), ("/", str(other).lstrip("/"))):
        path = _copy_record(record, tmp_path, data_root=root or "")
        if root is None:  # null, as a record of absolute paths has it
            head = json.loads(pathlib.Path(lineage.header_path(path)).read_text())
            head["data_root"] = None
            pathlib.Path(lineage.header_path(path)).write_text(json.dumps(head))
        forged = json.dumps({**first, "file": named}, separators=(",", ":")) + "\n"
        pathlib.Path(path).write_text(forged + "".join(rows[1:]))
        assert _show(path, tmp_path) == 1
        assert "is not among the files the header lists" in capsys.readouterr().err
    assert not (tmp_path / "clip.png").exists()


def test_cli_show_reads_only_under_the_data_root_given(
    record: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--data-root`` confines --show to a directory, whatever the header says."""
    (tmp_path / "root").mkdir()
    assert _show(record, tmp_path, "--data-root", str(tmp_path / "root")) == 1
    assert "is outside the data root" in capsys.readouterr().err
    tiny_root = str(pathlib.Path(lineage.read_rows(record)[0]["file"]).parent)
    assert _show(record, tmp_path, "--data-root", tiny_root) == 0


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"layout": None}, "not a lineage record h5feed wrote"),
        ({"files": None}, "not a lineage record h5feed wrote"),
        ({"clip": "16"}, ""),
    ],
)
def test_a_malformed_record_is_an_error_line_not_a_traceback(
    record: str,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, Any],
    said: str,
) -> None:
    path = _copy_record(record, tmp_path, **change)
    assert _show(path, tmp_path) == 1
    err = capsys.readouterr().err
    assert err.startswith("h5feed lineage: error:") and said in err


def test_a_deeply_nested_header_or_row_is_an_error_line(
    record: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """1 MiB of "[" is a ValueError naming the file (today: RecursionError)."""
    path = _copy_record(record, tmp_path)
    pathlib.Path(lineage.header_path(path)).write_text("[" * ((1 << 20) - 1))
    assert _show(path, tmp_path) == 1
    assert "nested too deeply" in capsys.readouterr().err
    deep = '{"step":0,"epoch":0,"batch":0,"row":' + "[" * 60_000 + "\n"
    pathlib.Path(path).write_text(deep)
    assert _run_cli("lineage", path, "--step", "0") == 1
    assert "nested too deeply" in capsys.readouterr().err
