"""The ``h5feed`` command line (also ``python -m h5feed``).

Subcommands:

* ``h5feed demo``: make the sample dataset if missing, train a tiny Keras model on it through
  ``h5feed.dataset(...)`` and report clips/s and the trainer's input wait share.
* ``h5feed make-sample DIR``: write the sample dataset and nothing else.
* ``h5feed inspect FILE...``: a file's layout, counts, sizes and a sample.
* ``h5feed pack SRC OUT``: video files or image folders into sharded HDF5 files
  (:mod:`h5feed.pack`).

Guarantees of :func:`main`: it returns the exit status (0 success, 1 a reported error such as a
missing file or a bad value, 130 interrupted by Ctrl-C) and lets argparse exit with status 2 on
a usage error (``SystemExit``, as ``--help`` and ``--version`` exit with 0). Importing this
module is cheap: it imports neither TensorFlow nor OpenCV, NumPy or h5py; each subcommand
imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from h5feed import __version__

if TYPE_CHECKING:
    from h5feed.producer.sample_data import SampleSpec

__all__ = ["build_parser", "main"]

_log = logging.getLogger("h5feed")

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

_Handler = Callable[[argparse.Namespace], int]


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's and epilog's line breaks (their examples are laid out)."""


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for integers >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)

#: (flag, environment variable, metavar, help) of `h5feed produce`.
_PRODUCE_OPTIONS = (
    ("--connect", "H5FEED_CONNECT", "ADDR", "the trainer's address, e.g. tcp://trainer-host:5555"),
    ("--data-root", "H5FEED_DATA_ROOT", "DIR", "the job's relative file paths resolve under this"),
    (
        "--workers",
        "H5FEED_WORKERS",
        "N",
        "worker processes; default: the CPUs this process may use, cgroup CPU quota included",
    ),
    ("--name", "H5FEED_NAME", "NAME", "prefix of the workers' names; default: host-pid"),
    ("--health-file", "H5FEED_HEALTH_FILE", "PATH", "keep writing liveness here (h5feed health)"),
    ("--key", "H5FEED_KEY", "FILE", "CURVE: this producer's .key_secret file (h5feed keys)"),
    ("--server-key", "H5FEED_SERVER_KEY", "FILE", "CURVE: the trainer's public .key file"),
    ("--metrics-port", "H5FEED_METRICS_PORT", "PORT", "serve /metrics and /stats (0: a free port)"),
)

#: (flag, parser, default, help) of the demo's integer options.
_DEMO_INT_OPTIONS = (
    ("--steps", _positive_int, 60, "training steps"),
    ("--workers", _positive_int, 2, "decoding worker processes per dataset"),
    ("--batch-size", _positive_int, 8, "clips per batch"),
    ("--clip-len", _positive_int, 16, "frames per clip"),
    (
        "--seed",
        _non_negative_int,
        0,
        "seed of the shuffle, the augmentation and the model's weights",
    ),
    (
        "--warmup",
        _non_negative_int,
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
            type=_positive_int,
            default=SAMPLE_DEFAULTS[field],
            metavar=metavar,
            help=f"{text} (default: %(default)s)",
        )
    if seed:
        group.add_argument(
            "--seed", type=_non_negative_int, default=SAMPLE_DEFAULTS["seed"], metavar="N",
            help="seed of the content (default: %(default)s)",
        )  # fmt: skip


def _sample_spec(args: argparse.Namespace, seed: int) -> SampleSpec:
    from h5feed.producer.sample_data import SampleSpec

    sizes = {field: getattr(args, field) for _, field, _, _ in _SAMPLE_OPTIONS}
    return SampleSpec(**sizes, seed=seed)


# --------------------------------------------------------------------------------------------
# Subcommands


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


def _cmd_produce(args: argparse.Namespace) -> int:
    """Run :func:`h5feed.producer.service.run_producer` until SIGTERM/SIGINT."""
    from h5feed.producer.cpus import available_cpus
    from h5feed.producer.service import run_producer

    workers = int(args.workers) if args.workers is not None else available_cpus()
    if (args.key is None) != (args.server_key is None):
        raise ValueError("CURVE needs both --key and --server-key")
    curve = (args.key, args.server_key) if args.key is not None else None
    metrics_port = None
    if args.metrics_port is not None:
        from h5feed.common.metrics_http import port_from_env

        metrics_port = port_from_env({"H5FEED_METRICS_PORT": args.metrics_port})
    return run_producer(
        args.connect, args.data_root, workers, args.name, args.health_file, curve, metrics_port
    )


def _cmd_top(args: argparse.Namespace) -> int:
    from h5feed.top import run_top

    return run_top(args.url, once=args.once, interval_s=args.interval, timeout_s=args.timeout)


def _cmd_keys(args: argparse.Namespace) -> int:
    import zmq.auth

    os.makedirs(args.dir, exist_ok=True)
    public, secret = zmq.auth.create_certificates(args.dir, args.name)
    print(f"public key: {public}\nsecret key: {secret} (keep it private)")
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from h5feed.producer.inspection import run

    output, errors = run(args.files, args.layout, args.json)
    if output:
        print(output)
    for line in errors:
        print(f"h5feed inspect: error: {line}", file=sys.stderr)
    return 1 if errors else 0


def _cmd_health(args: argparse.Namespace) -> int:
    from h5feed.producer.service import check_health

    problem = check_health(args.path, args.max_age)
    if problem is not None:
        print(f"h5feed health: {problem}", file=sys.stderr)
        return 1
    return 0


_PRODUCE_DESCRIPTION = """\
Start decoding workers that serve an h5feed consumer (a trainer that called
h5feed.dataset(..., listen="tcp://*:5555")). Every flag has an H5FEED_* environment variable.

Guarantees: the workers may start before the trainer and wait for it; they serve its jobs
(file list, clip and preprocessing parameters come from the trainer) and outlive its
iterations and restarts; a worker that dies is restarted; SIGTERM stops the service within
10 s with exit status 0; a trainer of another protocol version is refused (exit status 2,
both versions named)."""

_PRODUCE_EPILOG = """\
examples:
  h5feed produce --connect tcp://trainer-host:5555 --data-root /data --workers 8
  H5FEED_CONNECT=tcp://127.0.0.1:5555 h5feed produce --data-root ./videos"""


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


# --------------------------------------------------------------------------------------------
# The parser


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

_TOP_DESCRIPTION = """\
Show, refreshed every second, what feeds and producer services report on their /stats
endpoint: a trainer's h5feed.dataset(..., metrics_port=N) (or $H5FEED_METRICS_PORT) and
`h5feed produce --metrics-port N`. For a trainer: rates, input wait, credits, one row per
worker and per host, and the input-bound verdict; for a producer: one row per worker.

Guarantees: each request times out after --timeout seconds; an endpoint that does not answer
is shown as unreachable. With --once: exit status 1 if any endpoint could not be read."""

_MAIN_DESCRIPTION = """\
h5feed keeps a trainer fed from HDF5 video datasets: JPEG decoding in worker processes,
batches over ZeroMQ into tf.data."""

_MAIN_EPILOG = """\
examples:
  h5feed demo                        # sample data + a short training run, with numbers
  h5feed make-sample ./sample_data   # just the sample dataset
  h5feed COMMAND --help              # the options of one command"""


def build_parser() -> argparse.ArgumentParser:
    """The ``h5feed`` argument parser, with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="h5feed",
        description=_MAIN_DESCRIPTION,
        epilog=_MAIN_EPILOG,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"h5feed {__version__}")
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS,
        help="log h5feed's INFO messages to stderr, -vv DEBUG too (default: warnings only)",
    )  # fmt: skip
    parser.add_argument(
        "-v", "--verbose", action="count", default=0,
        help="log h5feed's INFO messages to stderr, -vv DEBUG too (default: warnings only)",
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def subcommand(name: str, summary: str, description: str, epilog: str) -> Any:
        return commands.add_parser(
            name,
            parents=[verbose],
            help=summary,
            description=description,
            epilog=epilog,
            formatter_class=_Formatter,
        )

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

    produce = subcommand(
        "produce",
        "serve a trainer: decoding workers that connect to its h5feed consumer",
        _PRODUCE_DESCRIPTION,
        _PRODUCE_EPILOG,
    )
    # The environment is read here, in the entry point, never at import time; an empty
    # variable (compose's ${VAR:-}) counts as unset.
    env = {k: v for k, v in os.environ.items() if k.startswith("H5FEED_") and v}
    for flag, variable, metavar, text in _PRODUCE_OPTIONS:
        produce.add_argument(
            flag,
            default=env.get(variable),
            required=flag == "--connect" and variable not in env,
            type=_positive_int if flag == "--workers" else str,
            metavar=metavar,
            help=f"{text} (env {variable})",
        )
    produce.set_defaults(handler=_cmd_produce)

    keys = subcommand(
        "keys",
        "make a CURVE key pair (NAME.key public, NAME.key_secret secret) with pyzmq",
        "Make a CURVE key pair with pyzmq's certificate helpers.\n\nThe trainer keeps "
        "its NAME.key_secret and lists the producers' public .key files in one directory "
        "(curve_authorized=); each producer keeps its own .key_secret and the trainer's "
        ".key (--key, --server-key).",
        "example:\n  h5feed keys keys/ --name trainer && h5feed keys keys/ --name producer1",
    )
    keys.add_argument("dir", metavar="DIR", help="directory to write the two files into")
    keys.add_argument("--name", default="h5feed", help="file name stem (default: %(default)s)")
    keys.set_defaults(handler=_cmd_keys)

    health = subcommand(
        "health",
        "exit 0 if the producer writing PATH is alive with running workers (a HEALTHCHECK)",
        "Read the health file of `h5feed produce --health-file PATH`.\n\nGuarantees: exit 0 "
        "only if the file was written within --max-age seconds by a producer with at least "
        "one running worker; else exit 1, saying why.",
        "example:\n  h5feed health /tmp/h5feed-producer.health",
    )
    health.add_argument("path", metavar="PATH", help="the producer's --health-file")
    health.add_argument(
        "--max-age", type=float, default=10.0, metavar="S",
        help="seconds after which the file is stale (default: %(default)s)",
    )  # fmt: skip
    health.set_defaults(handler=_cmd_health)

    inspect = subcommand(
        "inspect",
        "show a file's layout, counts, sizes, labels, frame shape and a sample video",
        "Show what h5feed reads in HDF5 files: the layout recognised (as layout='auto' "
        "does) and how to pass it, videos and frames (min/median/max per video), sizes "
        "(on disk; mean stored frame, sampled), the label histogram (20 most frequent), "
        "the shape of a decoded frame and the first video.\n\nExit status 1 if a file "
        "cannot be read or its layout is not recognised (the error says what it holds).",
        "examples:\n  h5feed inspect data/*.h5\n  h5feed inspect a.h5 --json\n"
        '  h5feed inspect a.h5 --layout \'{"kind": "flat", "jpeg": "frames"}\'',
    )
    inspect.add_argument("files", nargs="+", metavar="FILE", help="HDF5 files")
    inspect.add_argument("--json", action="store_true", help="one JSON array, a dict per file")
    inspect.add_argument(
        "--layout", default="auto", metavar="LAYOUT",
        help="auto, groups, frame_datasets, raw, flat, or a JSON object with 'kind' and the "
        "layout's names (default: %(default)s)",
    )  # fmt: skip
    inspect.set_defaults(handler=_cmd_inspect)

    from h5feed.pack import command as pack_command  # light: argparse only

    pack = subcommand(
        "pack",
        "pack video files or image folders into sharded HDF5 files (resumable, verified)",
        pack_command.DESCRIPTION,
        pack_command.EPILOG,
    )
    pack_command.add_arguments(pack)
    pack.set_defaults(handler=pack_command.run_command)

    top = subcommand(
        "top",
        "a live view of feeds and producers: rates per worker and host, the input verdict",
        _TOP_DESCRIPTION,
        "examples:\n  h5feed top localhost:9100            # a trainer with metrics_port=9100\n"
        "  h5feed top --once trainer:9100 producer-1:9100 producer-2:9100",
    )
    top.add_argument("url", nargs="+", metavar="URL", help="host:port or http://host:port[/stats]")
    top.add_argument("--once", action="store_true", help="print one snapshot and exit")
    top.add_argument(
        "--interval", type=float, default=1.0, metavar="S",
        help="seconds between refreshes (default: %(default)s)",
    )  # fmt: skip
    top.add_argument(
        "--timeout", type=float, default=2.0, metavar="S",
        help="seconds one request may take (default: %(default)s)",
    )  # fmt: skip
    top.set_defaults(handler=_cmd_top)
    return parser


def _configure_logging(verbose: int) -> None:
    """h5feed's lines to stderr (library use stays quiet: a NullHandler only). Every line
    carries its writer's ids (see h5feed/common/logs.py); worker processes started from here
    log at the same level."""
    level = logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _log.setLevel(level)
    if verbose:
        os.environ.setdefault("H5FEED_LOG_LEVEL", logging.getLevelName(level))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``h5feed`` command line with ``argv`` (default ``sys.argv[1:]``); return the
    exit status. See the module docstring for what the statuses mean."""
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = int(getattr(args, "verbose", 0) or 0)
    _configure_logging(verbose)
    handler: _Handler = args.handler
    from h5feed.common.errors import H5FeedError  # light: no third-party import

    try:
        return handler(args)
    except KeyboardInterrupt:
        print(f"\nh5feed {args.command}: interrupted", file=sys.stderr)
        return 130
    except (H5FeedError, OSError, ValueError) as exc:
        if verbose:
            _log.exception("h5feed %s failed", args.command)
        print(f"h5feed {args.command}: error: {exc}", file=sys.stderr)
        return 1
