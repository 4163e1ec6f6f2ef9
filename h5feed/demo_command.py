"""The ``h5feed demo`` and ``h5feed make-sample`` commands: the sample dataset and a short
training run on it. Importing this module is cheap (argparse only); each command imports
what it needs when it runs."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from h5feed.common.cli_args import Subcommand, non_negative_int, positive_int

if TYPE_CHECKING:
    from h5feed.producer.sample_data import SampleSpec

#: Defaults of the sample dataset, the same as ``SampleSpec()`` (checked by the tests; not
#: imported from there, which would import OpenCV and h5py with the CLI).
SAMPLE_DEFAULTS = {
    "files": 4,
    "videos_per_file": 24,
    "min_frames": 24,
    "max_frames": 72,
    "height": 240,
    "width": 320,
    "seed": 0,
}

#: (flag, parser, default, help) of the demo's integer options.
_DEMO_INT_OPTIONS = (
    ("--steps", positive_int, 60, "training steps"),
    ("--workers", positive_int, 2, "decoding worker processes per dataset"),
    ("--batch-size", positive_int, 8, "clips per batch"),
    ("--clip-len", positive_int, 16, "frames per clip"),
    (
        "--seed",
        non_negative_int,
        0,
        "seed of the shuffle, the augmentation and the model's weights",
    ),
    (
        "--warmup",
        non_negative_int,
        5,
        "first steps left out of the measurement: worker start, graph tracing; at most steps - 1",
    ),
)

#: (flag, SampleSpec field, metavar, help) of the sample-data options.
_SAMPLE_OPTIONS = (
    ("--files", "files", "N", "number of HDF5 files"),
    ("--videos-per-file", "videos_per_file", "N", "videos in each file"),
    ("--min-frames", "min_frames", "N", "fewest frames of a video"),
    ("--max-frames", "max_frames", "N", "most frames of a video"),
    ("--height", "height", "PX", "frame height in pixels"),
    ("--width", "width", "PX", "frame width in pixels"),
)


def _add_sample_options(parser: argparse.ArgumentParser, title: str, *, seed: bool) -> None:
    group = parser.add_argument_group(title)
    for flag, field, metavar, text in _SAMPLE_OPTIONS:
        group.add_argument(
            flag,
            type=positive_int,
            default=SAMPLE_DEFAULTS[field],
            metavar=metavar,
            help=f"{text} (default: %(default)s)",
        )
    if seed:
        group.add_argument(
            "--seed", type=non_negative_int, default=SAMPLE_DEFAULTS["seed"], metavar="N",
            help="seed of the content (default: %(default)s)",
        )  # fmt: skip


def _sample_spec(args: argparse.Namespace, seed: int) -> SampleSpec:
    from h5feed.producer.sample_data import SampleSpec

    sizes = {field: getattr(args, field) for _, field, _, _ in _SAMPLE_OPTIONS}
    return SampleSpec(**sizes, seed=seed)


_DEMO_DESCRIPTION = """\
Train a tiny Keras model (Conv3D + max pooling + Dense) on the sample dataset, fed by h5feed
worker processes through h5feed.dataset(), and report how fast input arrived.

What it does, in order:
  1. makes the sample dataset in --data if files of it are missing (files already there
     are kept as they are; only the sample files sample_NNN.h5 are read);
  2. trains for --steps steps on clips of --clip-len frames, resized to 128x171, randomly
     cropped to 112x112 and flipped, from a shuffled dataset that repeats forever;
  3. validates on one epoch of centre clips from a second dataset, while the training
     dataset still exists (two datasets, each with its own workers, in one process);
  4. prints clips/s over the steps after the first --warmup ones, and the input wait
     share: time in next(iterator) / (time in next(iterator) + time in train_on_batch).

Guarantees: exit status 0 only if training and validation ran to the end; every worker
process it started has stopped before it exits. Needs TensorFlow (pip install 'h5feed[tf]')."""

_DEMO_EPILOG = """\
examples:
  h5feed demo                              # ./sample_data, 60 steps, 2 workers
  h5feed demo --data /tmp/h5 --steps 200 --workers 4
  h5feed demo --files 2 --videos-per-file 8 --steps 20   # a quicker, smaller run"""

_MAKE_SAMPLE_DESCRIPTION = """\
Write h5feed's sample dataset: DIR/sample_000.h5, sample_001.h5, ... in the default
layout (one group per video, one JPEG per frame, an integer label per video), with
moving, natural-looking scenes whose class shows in colour and in motion.

Guarantees: the output is deterministic (same options, same bytes with the same OpenCV
build); every file is written atomically, so a sample_NNN.h5 is always complete; files
already in DIR are kept as they are (not checked against the options), so an interrupted
run can simply be repeated. Exit status 0 means all --files files are in DIR."""

_MAKE_SAMPLE_EPILOG = """\
examples:
  h5feed make-sample ./sample_data
  h5feed make-sample /tmp/tiny --files 2 --videos-per-file 4 --min-frames 8 --max-frames 16"""


def register(subcommand: Subcommand) -> None:
    """Add ``demo`` and ``make-sample`` to the ``h5feed`` command."""
    demo = subcommand(
        "demo",
        "train a tiny Keras model on the sample data and report clips/s and input wait",
        _DEMO_DESCRIPTION,
        _DEMO_EPILOG,
    )
    demo.add_argument(
        "--data", default="sample_data", metavar="DIR",
        help="directory of the sample dataset, made there if missing (default: ./%(default)s)",
    )  # fmt: skip
    for flag, parse, default, text in _DEMO_INT_OPTIONS:
        demo.add_argument(
            flag, type=parse, default=default, metavar="N", help=f"{text} (default: %(default)s)"
        )
    demo.add_argument(
        "--no-progress", action="store_true",
        help="no progress bars (shown only when stderr is a terminal anyway)",
    )  # fmt: skip
    _add_sample_options(demo, "sample data (used only when --data lacks files of it)", seed=False)
    demo.set_defaults(handler=_cmd_demo)

    make_sample = subcommand(
        "make-sample",
        "write the sample dataset (HDF5 files of JPEG frames) into a directory",
        _MAKE_SAMPLE_DESCRIPTION,
        _MAKE_SAMPLE_EPILOG,
    )
    make_sample.add_argument("dir", metavar="DIR", help="directory to write (made if missing)")
    _add_sample_options(make_sample, "dataset", seed=True)
    make_sample.set_defaults(handler=_cmd_make_sample)


def _cmd_demo(args: argparse.Namespace) -> int:
    """Run :func:`h5feed.demo.run_demo`; its report goes to stdout, progress to stderr."""
    # Before TensorFlow is imported (by run_demo): quiet its C++ logging unless asked.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from h5feed.demo import run_demo

    spec = _sample_spec(args, seed=SAMPLE_DEFAULTS["seed"])
    try:
        run_demo(
            args.data,
            steps=args.steps,
            workers=args.workers,
            batch_size=args.batch_size,
            clip_len=args.clip_len,
            seed=args.seed,
            spec=spec,
            warmup=args.warmup,
            progress=not args.no_progress,
        )
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] in ("tensorflow", "keras"):
            print(
                f"h5feed demo: error: the demo needs TensorFlow ({exc}); "
                "install it with: pip install 'h5feed[tf]'",
                file=sys.stderr,
            )
            return 1
        raise
    return 0


def _cmd_make_sample(args: argparse.Namespace) -> int:
    """Write the sample dataset into ``args.dir``; print a one-line summary to stdout."""
    import h5py

    from h5feed.demo import Progress
    from h5feed.producer.sample_data import make_sample_dataset, sample_file_name

    spec = _sample_spec(args, seed=args.seed)
    directory = os.fspath(args.dir)
    kept = sum(
        os.path.exists(os.path.join(directory, sample_file_name(i))) for i in range(spec.files)
    )
    began = time.monotonic()
    progress = Progress("sample data", spec.files)
    paths = make_sample_dataset(directory, spec, progress=lambda done, _: progress.update(done))
    elapsed = time.monotonic() - began
    progress.close(f"{elapsed:.1f}s")
    size_mb = sum(p.stat().st_size for p in paths) / 1e6
    videos = 0
    for path in paths:  # counted, not assumed: files kept from another run may differ
        with h5py.File(path, "r") as handle:
            videos += len(handle)
    print(
        f"sample data: {len(paths)} files in {directory} ({len(paths) - kept} written, "
        f"{kept} already there and kept), {videos} videos, {size_mb:.1f} MB, {elapsed:.1f}s"
    )
    return 0
