"""The ``h5feed bench`` subcommand: argument parsing here (cheap to import), the benchmark
itself loaded when it runs. ``h5feed bench`` alone runs the comparison; ``h5feed bench NAME``
runs one of the other measurements (:mod:`h5feed.bench.subcommands`)."""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import shlex
import sys

from h5feed.bench.shapes import parse_dataset_shape, parse_dataset_shapes
from h5feed.common.cli_args import Subcommand, int_list

__all__ = ["parse_dataset_shape", "register", "run"]

DESCRIPTION = """\
Benchmark h5feed against the alternatives on one workload: 16-frame clips of 320x240 JPEG
videos in HDF5, resize 128x171, random crop 112, flip, batch 8. Contenders: h5feed.dataset with
1..N workers; tf.data (from_generator + interleave, with and without num_parallel_calls;
map(py_function); py_function bytes + tf.io.decode_jpeg); keras PyDataset; PyTorch DataLoader;
Grain; and the per-core limit (the same per-clip work in one process, no IPC). Then the
consumer ceiling: ready-made batches from synthetic producers, GB/s next to memcpy.

Method: every contender in a fresh process; a one-epoch check (one clip per video, frames
[16, 112, 112, 3] uint8) before timing; warm-up, then --repeats windows of --window-s, each
right after a window of the per-core limit; medians. Writes OUT.json, OUT.md and OUT.png.
Contenders whose package is missing are reported as "not installed" (pip install
'h5feed[bench]'); the ones that cannot run the workload are listed with the reason."""

EPILOG = """\
examples:
  h5feed bench                               # everything, 10 s windows (~20 min on 2 cores)
  h5feed bench --workers 1,2,4,8,16 --out docs/bench/gpu-16cores
  h5feed bench --contenders h5feed,torch --repeats 5
  h5feed bench --ceiling                     # the consumer ceiling only
  h5feed bench --ceiling --transports tcp,curve   # over TCP between network namespaces (root)
  h5feed bench --quick --out /tmp/smoke      # CI smoke run: 1 s windows, tiny dataset
  h5feed bench scale --help                  # one of the other measurements (listed above)"""


TRANSPORTS = ("ipc", "tcp", "curve")


def _sorted_int_set(text: str) -> list[int]:
    """``--workers 4,1,2,2`` as [1, 2, 4]."""
    return sorted(set(int_list(text)))


def _transports(text: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [v for v in values if v not in TRANSPORTS]
    if not values or unknown:
        raise argparse.ArgumentTypeError(f"transports are {', '.join(TRANSPORTS)}; got {text!r}")
    return list(dict.fromkeys(values))


def _own_arguments() -> list[str]:
    """The arguments after ``bench`` on this process's command line (for the report)."""
    return sys.argv[sys.argv.index("bench") + 1 :] if "bench" in sys.argv else []


def register(subcommand: Subcommand) -> None:
    """Add ``bench`` to the ``h5feed`` command (``subcommand`` as in h5feed.cli)."""
    parser = subcommand(
        "bench",
        "benchmark h5feed against tf.data, keras, PyTorch and Grain; the consumer ceiling",
        DESCRIPTION,
        EPILOG,
    )
    add = parser.add_argument
    add("--window-s", type=float, default=None, help="seconds per timed window (default 10)")
    add("--repeats", type=int, default=None, help="timed windows per contender (default 3)")
    add("--warmup-s", type=float, default=None, help="untimed seconds before each (default 3)")
    add(
        "--workers",
        type=_sorted_int_set,
        default=None,
        metavar="N,N,...",
        help="worker counts (default 1, 2, 4, ... up to the cores available, and that)",
    )
    add(
        "--contenders",
        default=None,
        metavar="NAME,...",
        help="only these (per-core-parallel, h5feed, h5feed-numpy, tf-interleave, "
        "tf-interleave-parallel, tf-map-py-function, tf-decode-jpeg, keras, torch, grain; "
        "default all)",
    )
    add(
        "--data-dir",
        type=pathlib.Path,
        default=pathlib.Path("bench_data"),
        help="the generated dataset, reused when present (default ./bench_data)",
    )
    add(
        "--out",
        type=pathlib.Path,
        default=None,
        metavar="PREFIX",
        help="writes PREFIX.json, .md and .png (default docs/bench/bench-Ncores)",
    )
    add("--seed", type=int, default=0, help="seed of the plans (default 0)")
    add("--ceiling", action="store_true", help="run only the consumer ceiling")
    add("--no-ceiling", action="store_true", help="leave the consumer ceiling out")
    add(
        "--producers",
        type=int,
        default=None,
        help="synthetic producers of the ceiling "
        "(default: the CPUs left after the trainer's, at most 4)",
    )
    add(
        "--transports",
        type=_transports,
        default=["ipc"],
        metavar="T,...",
        help="paths of the consumer ceiling: ipc (local producers, shared-memory batches), "
        "tcp and curve (producers in a network namespace over TCP, plain and CURVE "
        "encrypted, next to raw ZeroMQ; needs root and `ip`) (default ipc)",
    )
    add(
        "--io-threads",
        type=int,
        default=1,
        metavar="N",
        help="ZeroMQ I/O threads of the socket ceiling's raw receiver, where CURVE decrypts "
        "(default 1, as the trainer's)",
    )
    add(
        "--dataset",
        type=parse_dataset_shapes,
        metavar="SHAPE,...",
        help="the generated dataset: FILESxVIDEOS (files and videos per file; default 32x12: "
        "384 videos) or V1+V2+... (one file per term, of that many videos: files of unequal "
        "sizes, e.g. 60+10+5+5). A comma-separated list is a file-count sweep: the loaders "
        "run once per shape (e.g. --dataset 1x60,2x30,3x20,5x12,60+10+5+5 --workers 2 "
        "--contenders per-core-parallel,h5feed,torch,grain) and PREFIX.json/.md/.png give "
        "h5feed / the parallel limit and h5feed / the best alternative per shape (no ceiling "
        "in a sweep). Workers share files as needed (1 file on N workers: all N read it), so "
        "any file count keeps every worker busy",
    )
    add(
        "--targets",
        type=pathlib.Path,
        default=None,
        metavar="FILE",
        help="judge the figures against the targets in FILE (JSON; see h5feed.bench.targets) "
        "(default docs/bench/targets.json when the working directory has it, as a checkout "
        "does; else judge nothing)",
    )
    add(
        "--quick",
        action="store_true",
        help="CI smoke run: 1 s windows, 1 repeat, 0.5 s warm-up, a 2 x 4 video dataset; "
        "its figures mean nothing",
    )
    parser.set_defaults(handler=run)
    # Whole option names only: with abbreviations, argparse would read a subcommand's option
    # (``scale --data``) as an ambiguous prefix of this parser's (--data-dir, --dataset).
    parser.allow_abbrev = False
    from h5feed.bench import subcommands  # argparse only: cheap

    subcommands.register(
        parser.add_subparsers(
            dest="study",
            metavar="SUBCOMMAND",
            title="other measurements (h5feed bench SUBCOMMAND --help)",
        )
    )


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; the report goes to stdout and the files, progress to stderr."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # for the contender processes
    from h5feed.bench.main import Options, run_bench
    from h5feed.bench.targets import default_path as default_targets

    quick = bool(args.quick)
    window, repeats, warmup = (1.0, 1, 0.5) if quick else (10.0, 3, 3.0)
    options = Options(
        window_s=args.window_s if args.window_s is not None else window,
        repeats=args.repeats if args.repeats is not None else repeats,
        warmup_s=args.warmup_s if args.warmup_s is not None else warmup,
        workers=args.workers,
        contenders=[c for c in (args.contenders or "").split(",") if c] or None,
        data_dir=args.data_dir,
        out=args.out,
        seed=args.seed,
        loaders=not args.ceiling,
        ceiling=not args.no_ceiling,
        producers=args.producers,
        transports=args.transports,
        io_threads=args.io_threads,
        quick=quick,
        datasets=tuple(args.dataset or ()),
        command=" ".join(["h5feed bench", *(shlex.quote(a) for a in _own_arguments())]),
        targets=args.targets if args.targets is not None else default_targets(),
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )
    return run_bench(options)
