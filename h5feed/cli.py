"""The ``h5feed`` command line (also ``python -m h5feed``).

Subcommands, each registered by the module that owns it:

* ``h5feed demo`` and ``h5feed make-sample DIR`` (:mod:`h5feed.demo_command`): a short
  training run on the sample dataset with clips/s and input wait; the dataset alone.
* ``h5feed produce``, ``keys``, ``health`` (:mod:`h5feed.producer.service.command`): the producer
  service, its CURVE key pairs, its liveness check.
* ``h5feed inspect FILE...`` and ``h5feed top URL...`` (here): a file's layout, counts, sizes
  and a sample; a live view of ``/stats`` endpoints.
* ``h5feed pack SRC OUT`` (:mod:`h5feed.pack.command`) and ``h5feed bench``
  (:mod:`h5feed.bench.command`).
* ``h5feed lineage FILE --step N`` (:mod:`h5feed.lineage_command`): the rows one training
  step trained, from a ``lineage=`` record; ``--show ROW``: that row's clip as a PNG.

Guarantees of :func:`main`: it returns the exit status (0 success, 1 a reported error such as a
missing file or a bad value, 2 a refused configuration such as ``h5feed produce --connect``
beyond loopback without keys or ``--insecure``, 130 interrupted by Ctrl-C) and lets argparse
exit with status 2 on a usage error (``SystemExit``, as ``--help`` and ``--version`` exit
with 0). Importing this
module is cheap: it imports neither TensorFlow nor OpenCV, NumPy or h5py; each subcommand
imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from h5feed import __version__
from h5feed.common.cli_args import HelpFormatter

__all__ = ["build_parser", "main"]

_log = logging.getLogger("h5feed")

_Handler = Callable[[argparse.Namespace], int]


# --------------------------------------------------------------------------------------------
# Subcommands


def _cmd_top(args: argparse.Namespace) -> int:
    from h5feed.top import run_top

    return run_top(args.url, once=args.once, interval_s=args.interval, timeout_s=args.timeout)


def _cmd_inspect(args: argparse.Namespace) -> int:
    from h5feed.producer.inspection import run

    output, errors = run(args.files, args.layout, args.json)
    if output:
        print(output)
    for line in errors:
        print(f"h5feed inspect: error: {line}", file=sys.stderr)
    return 1 if errors else 0


# --------------------------------------------------------------------------------------------
# The parser


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
        formatter_class=HelpFormatter,
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
            formatter_class=HelpFormatter,
        )

    from h5feed import demo_command  # argparse only: cheap
    from h5feed.producer.service import command as producer_command  # the same

    demo_command.register(subcommand)
    producer_command.register(subcommand)

    inspect = subcommand(
        "inspect",
        "show a file's layout, counts, sizes, labels, frame shape and a sample video",
        "Show what h5feed reads in HDF5 files: the layout recognised (as layout='auto' "
        "does) and how to pass it, videos and frames (min/median/max per video), sizes "
        "(on disk; mean stored frame, sampled), the label histogram (20 most frequent), "
        "the shape of a decoded frame and the first video.\n\nExit status 1 if a file "
        "cannot be read or its layout is not recognised (the error says what it holds and "
        "the layout= that fits it).",
        "examples:\n  h5feed inspect data/*.h5\n  h5feed inspect a.h5 --json\n"
        "  h5feed inspect s3://bucket/data/a.h5   (h5feed[storage]; credentials from the "
        "environment)\n"
        '  h5feed inspect a.h5 --layout \'{"kind": "flat", "jpeg": "frames"}\'',
    )
    inspect.add_argument(
        "files", nargs="+", metavar="FILE", help="HDF5 files (paths, or URLs: s3://...)"
    )
    inspect.add_argument("--json", action="store_true", help="one JSON array, a dict per file")
    inspect.add_argument(
        "--layout", default="auto", metavar="LAYOUT",
        help="auto, groups, frame_datasets, raw, flat, video, blobs, or a JSON object with "
        "'kind' and the layout's names, e.g. '{\"kind\": \"raw\", \"scale\": 255.0}' "
        "(default: %(default)s)",
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

    from h5feed import lineage_command  # argparse only: cheap

    lineage_command.register(subcommand)

    from h5feed.bench.command import register as register_bench  # argparse only: cheap

    register_bench(subcommand)
    return parser


def _configure_logging(verbose: int) -> None:
    """h5feed's lines to stderr (library use stays quiet: a NullHandler only). Every line
    carries its writer's ids (see h5feed/common/system/logs.py); worker processes started from here
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
        said = str(exc) or f"{type(exc).__name__} (no message)"  # a bare TimeoutError()
        print(f"h5feed {args.command}: error: {said}", file=sys.stderr)
        return 1
