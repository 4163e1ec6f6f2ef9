"""The tf.data side: model.fit, train + validation at once, and exits that never hang."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from conftest import own_worker_pids, wait_until_gone, worker_pids

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf = pytest.importorskip(
    "tensorflow"
)  # the tf extra is part of the test install: never skipped in CI
keras = pytest.importorskip("keras")

import h5feed  # noqa: E402

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40), "flip": True}


def tiny_model() -> object:
    model = keras.Sequential(
        [
            keras.layers.Input((4, 40, 40, 3)),
            keras.layers.Rescaling(1 / 255.0),
            keras.layers.GlobalAveragePooling3D(),
            keras.layers.Dense(4),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_element_spec_and_batch_contents(small_dataset: list[pathlib.Path]) -> None:
    ds = h5feed.dataset(small_dataset, **CLIP, batch_size=8, workers=2)
    assert set(ds.element_spec) == {"frames", "label", "file", "video", "start"}
    assert ds.element_spec["frames"].shape.as_list() == [None, 4, 40, 40, 3]
    batches = list(ds)
    assert [int(b["label"].shape[0]) for b in batches] == [8, 8, 8]
    first = batches[0]
    assert first["frames"].dtype == tf.uint8 and first["label"].dtype == tf.int64
    assert first["file"].dtype == tf.string and first["video"].numpy()[0].startswith(b"video_")


def test_model_fit_three_epochs_makes_three_full_different_passes(
    small_dataset: list[pathlib.Path],
) -> None:
    ds = h5feed.dataset(small_dataset, **CLIP, batch_size=6, workers=2, seed=1)
    seen: list[list[tuple[bytes, bytes]]] = []

    def record(files: np.ndarray, videos: np.ndarray) -> np.int64:
        seen.append(list(zip(files.tolist(), videos.tolist(), strict=True)))
        return np.int64(0)

    def to_xy(b: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        marker = tf.numpy_function(record, [b["file"], b["video"]], tf.int64)
        with tf.control_dependencies([marker]):
            return tf.identity(b["frames"]), b["label"]

    history = tiny_model().fit(ds.map(to_xy), epochs=3, verbose=0)  # type: ignore[attr-defined]
    assert len(history.history["loss"]) == 3
    assert len(seen) == 3 * 4, "every epoch must see all 4 batches of 6"
    passes = [
        sorted(pair for batch in seen[i * 4 : (i + 1) * 4] for pair in batch) for i in range(3)
    ]
    assert passes[0] == passes[1] == passes[2] and len(set(passes[0])) == 24
    orders = [[pair for batch in seen[i * 4 : (i + 1) * 4] for pair in batch] for i in range(3)]
    assert orders[0] != orders[1] != orders[2], "the three epochs used the same plan"
    # The last epoch's workers are kept by the dataset until it is closed.
    kept = [worker["pid"] for worker in ds.stats()["workers"]]  # type: ignore[attr-defined]
    assert len(kept) == 2 and wait_until_gone(kept, 0) == kept
    ds.close()  # type: ignore[attr-defined]
    assert wait_until_gone(own_worker_pids(), 10) == []


def test_train_and_validation_datasets_at_once(small_dataset: list[pathlib.Path]) -> None:
    train = h5feed.dataset(small_dataset, **CLIP, batch_size=8, workers=1)
    val = h5feed.dataset(
        small_dataset,
        clip_len=4,
        resize=(48, 64),
        crop=(40, 40),
        crop_mode="center",
        flip=False,
        clip_start="center",
        shuffle=False,
        batch_size=8,
        workers=1,
    )
    xy = lambda b: (b["frames"], b["label"])  # noqa: E731
    history = tiny_model().fit(  # type: ignore[attr-defined]
        train.map(xy), validation_data=val.map(xy), epochs=2, verbose=0
    )
    assert len(history.history["val_loss"]) == 2
    first, second = list(val), list(val)  # evaluation data is the same every time
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a["frames"].numpy(), b["frames"].numpy())
    kept = [w["pid"] for ds in (train, val) for w in ds.stats()["workers"]]  # type: ignore[attr-defined]
    assert len(kept) == 2 and wait_until_gone(kept, 0) == kept  # one kept by each dataset
    train.close()  # type: ignore[attr-defined]
    val.close()  # type: ignore[attr-defined]
    assert wait_until_gone(own_worker_pids(), 10) == []


def test_worker_error_reaches_the_trainer_through_tf(tmp_path: pathlib.Path) -> None:
    from h5feed.producer.sample_data import write_video_file

    path = tmp_path / "bad.h5"
    write_video_file(path, {"video_007": ([b"junk"] * 3, 0)})
    ds = h5feed.dataset(path, clip_len=2, workers=1)
    with pytest.raises(tf.errors.OpError, match=r"(?s)bad\.h5.*video_007.*frame 0"):
        list(ds)


def run_script(body: str, timeout_s: float = 90) -> subprocess.CompletedProcess[str]:
    """Run ``body`` as a fresh Python program (no __main__ guard), bounded by ``timeout_s``."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )


def test_script_without_main_guard_works(small_dataset: list[pathlib.Path]) -> None:
    result = run_script(
        f"""
        import h5feed
        ds = h5feed.dataset({[str(p) for p in small_dataset]!r}, clip_len=4, resize=(24, 32))
        print("clips", sum(int(b["label"].shape[0]) for b in ds))
        """
    )
    assert result.returncode == 0, result.stderr
    assert "clips 24" in result.stdout


def test_exit_is_prompt_while_tf_waits_inside_the_generator(
    small_dataset: list[pathlib.Path],
) -> None:
    # The workers are frozen (SIGSTOP), so tf.data's prefetch thread is blocked inside the
    # generator waiting for a batch when the program ends. Exit must not wait on it.
    result = run_script(
        f"""
        import os, pathlib, signal, sys, time
        import h5feed
        ds = h5feed.dataset({[str(p) for p in small_dataset]!r}, clip_len=4, resize=(24, 32),
                            epochs=None, unit_timeout_s=600,
                            prefetch=64)  # more than can arrive: it ends up waiting
        it = iter(ds)
        next(it)
        me = str(os.getpid())
        for proc in pathlib.Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    stat = (proc / "stat").read_text()
                except OSError:
                    continue
                if stat.rsplit(")", 1)[1].split()[1] == me:
                    os.kill(int(proc.name), signal.SIGSTOP)
                    print("stopped", proc.name, flush=True)

        def waiting_in_next():  # a thread inside h5feed's BatchStream.__next__
            for frame in sys._current_frames().values():
                while frame is not None:
                    code = frame.f_code
                    if code.co_name == "__next__" and code.co_filename.endswith("stream.py"):
                        return True
                    frame = frame.f_back
            return False

        deadline = time.monotonic() + 30
        while not waiting_in_next():  # tf.data's thread has asked for the next batch
            assert time.monotonic() < deadline, "no thread waits for a batch"
            time.sleep(0.01)
        print("exiting", flush=True)
        """,
        timeout_s=60,
    )
    assert result.returncode == 0, result.stderr
    stopped = [
        int(line.split()[1]) for line in result.stdout.splitlines() if line.startswith("stopped")
    ]
    assert len(stopped) == 2 and "exiting" in result.stdout
    assert wait_until_gone(stopped, 10) == [], "frozen workers were left behind"


def test_ctrl_c_stops_the_trainer_and_its_workers(small_dataset: list[pathlib.Path]) -> None:
    script = textwrap.dedent(
        f"""
        import faulthandler, signal, time
        import h5feed
        faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's diagnosis on a hang
        # As from a terminal: Ctrl-C raises KeyboardInterrupt. An ignored SIGINT survives exec,
        # and an earlier test in this pytest process may have left it ignored (a child that
        # starts with SIGINT ignored never gets Python's handler: every press is lost).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        ds = h5feed.dataset({[str(p) for p in small_dataset]!r}, clip_len=4, resize=(24, 32),
                            epochs=None)
        for i, batch in enumerate(ds):
            if i == 2:
                print("running", flush=True)
            time.sleep(0.01)
        """
    )
    trainer = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    try:
        assert trainer.stdout is not None
        assert trainer.stdout.readline().strip() == "running"
        workers = worker_pids(trainer.pid)
        assert len(workers) == 2
        began = time.monotonic()
        try:
            # Like a user, press Ctrl-C again if the first one is lost: TensorFlow now and then
            # swallows a SIGINT that arrives while the main thread is inside its C++ iterator
            # (a CI run's thread dump showed the main thread still in this loop 30 s after
            # one SIGINT, no KeyboardInterrupt printed, no h5feed thread blocked). What this
            # test pins is h5feed's part: once Python raises KeyboardInterrupt, the trainer
            # exits and its workers go; a hang in h5feed fails it after every press. Three
            # presses were swallowed in a row once (a full run on 2 cores; the thread dump: the
            # main thread in this script's loop, no exception printed anywhere), one in six
            # runs here needed the third: so up to six presses, 6 s apart.
            _, stderr = _interrupt(trainer, presses=_PRESSES, wait_s=_PRESS_EVERY_S)
        except subprocess.TimeoutExpired:
            # Say where it hangs: every thread's Python stack, and who is still alive.
            alive = wait_until_gone(workers, 0)
            trainer.send_signal(signal.SIGUSR1)
            time.sleep(2)
            trainer.kill()
            _, stderr = trainer.communicate(timeout=10)
            pytest.fail(
                f"no exit after {_PRESSES} SIGINTs {_PRESS_EVERY_S:g} s apart "
                f"(trainer exit code {trainer.returncode}, "
                f"workers alive {alive}); its stderr:\n{stderr[-6000:]}"
            )
        assert time.monotonic() - began < _PRESSES * _PRESS_EVERY_S + 10
        assert "KeyboardInterrupt" in stderr
        assert wait_until_gone(workers, 10) == []
    finally:
        if trainer.poll() is None:
            trainer.kill()


_PRESSES = 6
_PRESS_EVERY_S = 6.0


def _interrupt(process: subprocess.Popen[str], presses: int, wait_s: float) -> tuple[str, str]:
    """Send SIGINT up to ``presses`` times, ``wait_s`` apart, until ``process`` exits; its
    (stdout, stderr). subprocess.TimeoutExpired when it is still running after the last."""
    for press in range(presses):
        process.send_signal(signal.SIGINT)
        try:
            return process.communicate(timeout=wait_s)
        except subprocess.TimeoutExpired:
            if press == presses - 1:
                raise
    raise AssertionError("unreachable")
