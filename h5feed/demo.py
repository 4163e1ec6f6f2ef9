"""``h5feed demo``: train a tiny Keras model on the sample dataset, fed by local h5feed workers.

:func:`run_demo` guarantees:

1. The sample dataset is complete in ``data_dir`` when training starts: missing files are
   written (atomically, see :func:`h5feed.producer.sample_data.make_sample_dataset`); files
   already there are used as they are. Only the spec's own files are read, never other files
   in the directory.
2. The numbers are measured in the training loop itself, over ``iter(dataset)``: the time in
   ``next(it)`` is input wait, the time in ``model.train_on_batch`` (synchronous: it returns
   the loss as a NumPy value) is compute. The first ``warmup`` steps (worker start, graph
   tracing) are excluded from ``clips_per_s`` and ``input_wait_share``, and the report says so.
3. A validation dataset (one epoch, centre crops, no flip, no shuffle) is iterated to its end
   while the training dataset still holds its workers: two datasets in one process.
4. When it returns (or raises), every worker process it started has been stopped: it closes
   both datasets' iterators and the datasets (their workers are kept across iterations) and
   checks its own child processes (``workers_left`` in the
   result).

Progress goes to stderr (a rich progress bar on a terminal, the final line otherwise, nothing
with ``progress=False``); the report goes to stdout.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import IO, Any

from h5feed.demo_report import input_wait_lines
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset
from h5feed.progress import progress_bar

__all__ = ["Progress", "run_demo", "worker_children"]

#: Input geometry of the demo's training workload: the classic C3D/R(2+1)D recipe.
RESIZE = (128, 171)
CROP = (112, 112)

# Lines TensorFlow's native code prints on import whatever TF_CPP_MIN_LOG_LEVEL says.
_NATIVE_NOISE = (
    "All log messages before absl::InitializeLog() is called",
    "oneDNN custom operations are on",
)


class Progress:
    """A one-line progress display: ``label [#####     ] done/total note``.

    On a terminal the line is rewritten in place (carriage return), at most every
    ``min_interval_s``; elsewhere (a pipe, a log file) only the final line is written, by
    :meth:`close`, so logs do not fill with partial lines.
    """

    def __init__(
        self, label: str, total: int, stream: IO[str] | None = None, min_interval_s: float = 0.1
    ) -> None:
        self.label = label
        self.total = max(total, 0)
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval_s = min_interval_s
        self.done = 0
        self.note = ""
        self._live = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_draw = 0.0
        self._width = 0
        self._closed = False

    def _line(self) -> str:
        filled = 20 * self.done // self.total if self.total else 20
        bar = "#" * filled + " " * (20 - filled)
        note = f"  {self.note}" if self.note else ""
        return f"{self.label} [{bar}] {self.done}/{self.total}{note}"

    def _draw(self, end: str) -> None:
        line = self._line()
        pad = " " * max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write(f"\r{line}{pad}{end}" if self._live else f"{line}{end}")
        self.stream.flush()

    def update(self, done: int, note: str | None = None) -> None:
        """Set the count (and the note, if given); redraw if on a terminal and due."""
        self.done = done
        if note is not None:
            self.note = note
        now = time.monotonic()
        if self._live and (now - self._last_draw >= self.min_interval_s or done >= self.total):
            self._last_draw = now
            self._draw("")

    def close(self, note: str | None = None) -> None:
        """Write the final line and end it; idempotent."""
        if self._closed:
            return
        self._closed = True
        if note is not None:
            self.note = note
        self._draw("\n")


@contextlib.contextmanager
def _filtered_native_stderr() -> Iterator[None]:
    """Hold back what native code writes to file descriptor 2 meanwhile, then write it out
    without TensorFlow's known import-time notices (nothing else is dropped). Off with
    ``h5feed -v`` (the ``h5feed`` logger at INFO), so a native crash on import shows as is."""
    if logging.getLogger("h5feed").isEnabledFor(logging.INFO):
        yield
        return
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2: nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode("utf-8", errors="replace")
            kept = [line for line in text.splitlines(True) if not _is_noise(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def _is_noise(line: str) -> bool:
    return any(marker in line for marker in _NATIVE_NOISE)


def worker_children(parent_pid: int | None = None) -> list[int]:
    """Pids of the live ``h5feed.producer.worker`` processes whose parent is ``parent_pid``
    (default: this process). Linux only (reads ``/proc``); elsewhere returns ``[]``."""
    parent = os.getpid() if parent_pid is None else parent_pid
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        # /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 2 or fields[0] == b"Z":  # a zombie is already dead
            continue
        if int(fields[1]) == parent and b"h5feed.producer.worker" in cmdline:
            found.append(int(entry))
    return found


def _wait_for_no_workers(timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        gc.collect()  # a tf.data iterator's generator is closed when it is collected
        left = worker_children()
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def _build_model(keras: Any, clip_len: int, num_classes: int) -> Any:
    """Rescaling + Conv3D(8, 3, stride 2) + global max pooling + Dense: under a thousand
    parameters, so the step is cheap and the demo shows the input pipeline, not the model.
    Max pooling (not average) lets it find the class-coloured blob within 60 steps."""
    inputs = keras.Input(shape=(clip_len, *CROP, 3), dtype="uint8", name="frames")
    x = keras.layers.Rescaling(1.0 / 255.0)(inputs)
    x = keras.layers.Conv3D(8, 3, strides=2, activation="relu")(x)
    x = keras.layers.GlobalMaxPooling3D()(x)
    outputs = keras.layers.Dense(num_classes)(x)
    model = keras.Model(inputs, outputs, name="tiny_c3d")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def run_demo(
    data_dir: str | os.PathLike[str],
    steps: int = 60,
    workers: int = 2,
    batch_size: int = 8,
    clip_len: int = 16,
    seed: int = 0,
    *,
    spec: SampleSpec | None = None,
    warmup: int = 5,
    out: IO[str] | None = None,
    progress_stream: IO[str] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Make the sample data if missing, train for ``steps`` steps, validate; return the numbers.

    ``spec`` is the sample dataset to use (default ``SampleSpec()``). ``warmup`` steps are left
    out of the measurement (at most ``steps - 1``, so at least one step is measured). The result
    has ``steps``, ``warmup_steps``, ``measured_steps``, ``measured_clips``, ``measured_s``,
    ``clips_per_s``, ``wait_s``, ``compute_s``, ``input_wait_share`` (wait / (wait + compute)
    over the measured steps), ``final_loss``, ``val_clips``, ``val_accuracy``, ``data_s``,
    ``total_s``, ``workers_left`` (worker processes still running at the end: 0) and
    ``verdict`` (the report's last input-wait line: :func:`input_wait_lines`).

    What the numbers do not hide: the first measured step finds the buffers full (workers run
    ahead during warm-up: up to ``max(4, 2 * workers)`` batches in h5feed plus tf.data's
    prefetch), so in an input-bound run of few steps clips/s is somewhat flattered; more
    ``steps`` give the steady state.
    """
    for name, value in (("steps", steps), ("workers", workers), ("batch_size", batch_size)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if clip_len < 1:
        raise ValueError(f"clip_len must be >= 1, got {clip_len}")
    report = out if out is not None else sys.stdout
    progress_to = progress_stream if progress_stream is not None else sys.stderr
    spec = spec if spec is not None else SampleSpec()
    warmup = max(0, min(warmup, steps - 1))
    began = time.monotonic()

    def say(text: str) -> None:
        report.write(text + "\n")
        report.flush()

    # 1. The data.
    data_progress = progress_bar(
        "sample data", spec.files, progress_to, enabled=progress, plain=Progress
    )
    files = make_sample_dataset(data_dir, spec, progress=lambda done, _: data_progress.update(done))
    data_s = time.monotonic() - began
    data_progress.close(f"{data_s:.1f}s")
    paths = [str(p) for p in files]
    say(
        f"data: {len(paths)} files x {spec.videos_per_file} videos "
        f"({spec.min_frames}-{spec.max_frames} frames of {spec.height}x{spec.width}, "
        f"{spec.num_classes} classes) in {os.fspath(data_dir)}"
    )

    # 2. TensorFlow, Keras and the model.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _filtered_native_stderr():
        import keras
        import tensorflow as tf

        import h5feed

    keras.utils.set_random_seed(seed)
    model = _build_model(keras, clip_len, spec.num_classes)
    say(
        f"model: {model.name}, {model.count_params()} parameters; "
        f"tensorflow {tf.__version__}, keras {keras.__version__}"
    )

    # 3. Both datasets exist together: train (forever, augmented) and val (one epoch, centre).
    common: dict[str, Any] = {
        "clip_len": clip_len,
        "resize": RESIZE,
        "crop": CROP,
        "batch_size": batch_size,
        "workers": workers,
        "seed": seed,
    }
    train_ds = h5feed.dataset(
        paths, crop_mode="random", flip=True, clip_start="random", shuffle=True, epochs=None,
        **common,
    )  # fmt: skip
    val_ds = h5feed.dataset(
        paths, crop_mode="center", flip=False, clip_start="center", shuffle=False, epochs=1,
        **common,
    )  # fmt: skip
    say(
        f"train: {steps} steps of {batch_size} clips of {clip_len} frames, resize {RESIZE}, "
        f"random crop {CROP}, flip; {workers} worker processes"
    )

    wait_s = compute_s = 0.0
    pipeline: dict[str, Any] = {"verdict": "no figures (training did not finish)"}
    measured_clips = 0
    measured_from = 0.0
    final_loss = float("nan")
    val_correct = val_clips = 0
    val_s = 0.0
    train_it: Iterator[Any] | None = None
    val_it: Iterator[Any] | None = None
    bar = progress_bar("train", steps, progress_to, enabled=progress, plain=Progress)
    try:
        train_it = iter(train_ds)
        for step in range(1, steps + 1):
            if step == warmup + 1:
                measured_from = time.monotonic()
            t0 = time.monotonic()
            batch = next(train_it)
            t1 = time.monotonic()
            logs = model.train_on_batch(batch["frames"], batch["label"], return_dict=True)
            t2 = time.monotonic()
            final_loss = float(logs["loss"])
            if step > warmup:
                wait_s += t1 - t0
                compute_s += t2 - t1
                measured_clips += int(batch["label"].shape[0])
                rate = measured_clips / max(t2 - measured_from, 1e-9)
                share = wait_s / max(wait_s + compute_s, 1e-9)
                note = f"loss {final_loss:.3f}  {rate:.1f} clips/s  wait {share:.0%}"
            else:
                note = f"loss {final_loss:.3f}  (warm-up)"
            bar.update(step, note)
        measured_s = time.monotonic() - measured_from
        bar.close()
        pipeline = train_ds.stats()  # h5feed's own view, from inside the pipeline

        # Validation while the training iterator (and its workers) is still alive.
        t0 = time.monotonic()
        val_it = iter(val_ds)
        for batch in val_it:
            logits = model.predict_on_batch(batch["frames"])
            labels = batch["label"].numpy()
            val_correct += int((logits.argmax(axis=-1) == labels).sum())
            val_clips += int(labels.shape[0])
        val_s = time.monotonic() - t0
    finally:
        bar.close()  # no-op if closed; else ends the line where an error stopped training
        # Drop the iterators: tf.data then closes the generators, whose streams end; close the
        # datasets, which stops the workers they keep across iterations. Wait (bounded) until
        # none of our worker processes is left.
        train_it = val_it = None
        train_ds.close()
        val_ds.close()
        del train_ds, val_ds
        workers_left = _wait_for_no_workers(timeout_s=10.0)

    measured_steps = steps - warmup
    clips_per_s = measured_clips / measured_s if measured_s > 0 else 0.0
    share = wait_s / (wait_s + compute_s) if wait_s + compute_s > 0 else 0.0
    val_accuracy = val_correct / val_clips if val_clips else 0.0
    total_s = time.monotonic() - began

    say(
        f"throughput: {clips_per_s:.1f} clips/s over steps {warmup + 1}-{steps} "
        f"({measured_clips} clips in {measured_s:.2f}s; the first {warmup} steps are warm-up "
        "and not counted)"
    )
    wait_lines = input_wait_lines(wait_s, compute_s, pipeline)
    for line in wait_lines:
        say(line)
    say(
        f"validation accuracy: {val_accuracy:.3f} on {val_clips} clips "
        f"(chance {1 / spec.num_classes:.3f}; {val_s:.1f}s), final train loss {final_loss:.3f}"
    )
    say(f"workers left running: {len(workers_left)}; total time {total_s:.1f}s")
    return {
        "steps": steps,
        "warmup_steps": warmup,
        "measured_steps": measured_steps,
        "measured_clips": measured_clips,
        "measured_s": measured_s,
        "clips_per_s": clips_per_s,
        "wait_s": wait_s,
        "compute_s": compute_s,
        "input_wait_share": share,
        "final_loss": final_loss,
        "val_clips": val_clips,
        "val_accuracy": val_accuracy,
        "data_s": data_s,
        "total_s": total_s,
        "workers_left": len(workers_left),
        "verdict": wait_lines[-1].removeprefix("verdict: "),
    }
