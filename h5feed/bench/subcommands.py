"""The subcommands of ``h5feed bench`` beside the comparison itself: one measurement each,
its arguments here (argparse only: cheap to import), its code in its own module, imported when
it runs.

* ``h5feed bench scale`` (:mod:`h5feed.bench.scale`): the first batch, index memory and open
  files at thousands of files;
* ``h5feed bench soak`` (:mod:`h5feed.bench.soak`): full rate with workers SIGKILLed, memory
  and descriptors over time, from local files or (``--storage s3``) a local S3 server;
* ``h5feed bench open-files`` (:mod:`h5feed.bench.open_files`): what ``max_open_files`` costs;
* ``h5feed bench reduced-decode`` (:mod:`h5feed.bench.reduced_decode`): speed and pixels of
  ``reduced_decode=True``;
* ``h5feed bench lineage`` (:mod:`h5feed.bench.lineage_cost`): the trainer's CPU per clip
  without and with ``lineage=``;
* ``h5feed bench auto`` (:mod:`h5feed.bench.auto_workers`): ``workers="auto"`` against 1, 2
  and 3 workers;
* ``h5feed bench object-storage`` (:mod:`h5feed.bench.object_storage`): clips/s over
  ``s3://`` (moto's server, a latency per request) against the same files on disk (its help
  and arguments in :mod:`h5feed.bench.storage_study`);
* ``h5feed bench gpu-train`` (:mod:`h5feed.bench.gpu.train`): a GPU trainer fed by h5feed,
  against a cached batch and PyTorch's DataLoader (its help and arguments in
  :mod:`h5feed.bench.gpu.study`);
* ``h5feed bench many-workers`` (:mod:`h5feed.bench.many_workers`) and ``h5feed bench
  balance`` (:mod:`h5feed.bench.balance`): their help and arguments in
  :mod:`h5feed.bench.worker_studies`.

Each writes what it measured (a table on stdout, JSON where asked); none judges it: the
figures an issue asked for live with the issue and the docs (docs/performance/), not in the
installed package.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pathlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from h5feed.bench import storage_study, worker_studies
from h5feed.bench.gpu import study as gpu_study
from h5feed.common.cli_args import HelpFormatter, int_in, int_list, positive_int


@dataclass(frozen=True)
class Study:
    """One subcommand: its name, help and arguments, and the module whose ``run(args)`` runs
    it (imported only then)."""

    name: str
    summary: str
    description: str
    epilog: str
    arguments: Callable[[argparse.ArgumentParser], None]
    module: str


def own_arguments(name: str) -> list[str]:
    """The arguments after ``bench NAME`` on this process's command line (for the report;
    empty when the command was called in process, e.g. by a test)."""
    argv = sys.argv
    for i in range(len(argv) - 1):
        if argv[i] == "bench" and argv[i + 1] == name:
            return argv[i + 2 :]
    return []


# -- scale ----------------------------------------------------------------------------------

_SCALE = """\
Time to the first batch, index memory and open files at thousands of files.

Makes N files of --videos short videos each (tiny 8x8 JPEG frames: the point is counts, not
pixels), then, for each N of --files, with --workers local workers:

  cold_s     time from iter() to the first batch with an empty index cache (the files'
             pages are in the OS page cache, as they were just written)
  warm_s     the same with the index cache the cold run filled
  dropped_s  warm index cache after the OS page cache was dropped (echo 3 >
             /proc/sys/vm/drop_caches: root only, and it drops the whole machine's cache;
             otherwise, or with --no-drop, the row says why not)
  second_s   the second iteration of the same dataset (persistent workers: no start-up,
             indexes in the workers' memory)
  index_bytes_per_video   the trainer's memory for the index (arrays, names, paths)
  open_files_per_worker   HDF5 files each worker holds open (/proc/PID/fd) after the
             steady run
  clips_per_s             steady rate over --steady-batches batches after the first

Files are made once per N by the pack writer (the format `h5feed pack` writes, with its
per-file index) and copied; --plain makes files without the pack index (files from
elsewhere: the workers walk their groups). Only the public API measures."""


def _scale_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--files",
        type=int_list,
        default="1000,10000",
        metavar="N,...",
        help="file counts, comma-separated (default %(default)s)",
    )
    add("--videos", type=positive_int, default=100, help="videos per file (default %(default)s)")
    add("--workers", type=positive_int, default=2, help="local workers (default %(default)s)")
    add("--steady-batches", type=positive_int, default=100, help="batches timed (default 100)")
    add("--plain", action="store_true", help="files without the pack index")
    add("--data", default=None, help="directory of the files (kept; default a temporary one)")
    add(
        "--json",
        default=os.path.join("docs", "bench", "scale-2cores.json"),
        help="where to write the results (default %(default)s)",
    )
    add("--no-drop", action="store_true", help="do not drop the OS page cache (it is global)")


# -- soak -----------------------------------------------------------------------------------

_SOAK = """\
A soak run: full rate for --minutes with a local worker SIGKILLed every --kill-every
seconds; reports the trainer's and the workers' memory (RSS) and open descriptors over time.

Each epoch's samples are checked to arrive exactly once (the run fails otherwise), every kill
must be answered by a replacement, and the growth of the trainer's RSS and open descriptors
is reported after a warm-up (the first --warmup seconds: allocator pools, caches and slots
fill up then). No batch for --hang-after seconds fails the run, naming how long it waited
(every thread's stack on stderr); the stream's unit_timeout_s is half of it, so a worker
that stops answering is replaced by the stream first (reported: workers lost without a kill).

--storage s3 reads the same files as s3:// URLs from moto's S3 server (pure Python, in this
process, on loopback; needs h5feed[storage] and moto[server], the test extra), through a
proxy that answers every --fault-every-th request 503 SlowDown, resets the connection of
every --reset-every-th, cuts every --truncate-every-th ranged GET short and delays each
request by --latency-ms; the workers read blocks of --block-kib. Reported besides: the
requests, 503s, resets and cut bodies the proxy saw, and the live workers' own request and
retry counts."""


def _soak_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--minutes", type=float, default=10.0, help="how long (default %(default)s)")
    add("--kill-every", type=float, default=60.0, help="seconds between kills (default 60)")
    add("--sample-every", type=float, default=10.0, help="seconds per sample (default 10)")
    add("--warmup", type=float, default=120.0, help="seconds left out of growth (default 120)")
    add("--hang-after", type=float, default=120.0, help="no batch this long fails (default 120)")
    add("--seed", type=int, default=0, help="(default %(default)s)")
    add("--json", type=pathlib.Path, help="also write the result here")
    add("--storage", choices=("local", "s3"), default="local", help="(default %(default)s)")
    add("--fault-every", type=int_in(0), default=50, help="s3: 503 every Nth request (50; 0 none)")
    add("--truncate-every", type=int_in(0), default=0, help="s3: cut every Nth GET (default none)")
    add("--reset-every", type=int_in(0), default=0, help="s3: reset every Nth (default none)")
    add("--latency-ms", type=float, default=5.0, help="s3: added per request (default 5)")
    add("--block-kib", type=positive_int, default=256, help="s3: one ranged GET (default 256)")


# -- open-files -----------------------------------------------------------------------------

_OPEN_FILES = """\
What keeping at most max_open_files HDF5 files open costs, end to end.

--files small files (one video of --frames JPEG frames of --size x --size pixels each) are
read by one local worker with a global shuffle (clips of 4 frames, batches of 32), twice:
with max_open_files at its default (128: a shuffled read finds its file open with a chance
of about 128 / files, so nearly every clip reopens its file) and with every file open.
Reported: clips/s of each, from the first batch to the end of --epochs epochs (the index,
read when the iteration starts, is left out), the best of --repeats runs. Small frames make
decoding cheap, so the reopen cost shows at its largest; with real frames (--size 320) it is
a smaller share."""


def _open_files_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--files", type=positive_int, default=2000, help="(default %(default)s)")
    add("--frames", type=int_in(4), default=8, help="frames per video, >= 4 (default 8)")
    add("--size", type=positive_int, default=64, help="frame height and width (default 64)")
    add("--epochs", type=positive_int, default=2, help="(default %(default)s)")
    add("--repeats", type=positive_int, default=2, help="(default %(default)s)")
    add("--json", default=None, help="also write the figures here")


# -- lineage --------------------------------------------------------------------------------

_LINEAGE = """\
What the lineage record (lineage=PATH) costs the trainer, per clip.

h5feed's sample data (--files files of --videos-per-file 320x240 JPEG videos) is read with
h5feed.batches as `h5feed bench` reads it (16-frame clips, resize (128, 171), random crop
(112, 112), flip, batches of 8) by --workers local workers for --epochs epochs, without and
with lineage=, in --repeats interleaved pairs. Reported: the trainer process's CPU per clip
(time.process_time, every thread of it: ZeroMQ's, the loop's, the caller's) from the first
batch to the end, median of each; and the record alone: LineageLog.record of one real batch
(rows from its plan, JSON, one write) timed in five blocks of --calls calls, the median
block in microseconds per clip."""


def _lineage_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--files", type=positive_int, default=2, help="(default %(default)s)")
    add("--videos-per-file", type=positive_int, default=12, help="(default %(default)s)")
    add("--epochs", type=positive_int, default=2, help="(default %(default)s)")
    add("--workers", type=positive_int, default=2, help="(default %(default)s)")
    add("--repeats", type=positive_int, default=3, help="pairs, off and on (default 3)")
    add("--calls", type=positive_int, default=2000, help="records per timed block (2000)")
    add("--json", default=None, help="also write the figures here")


# -- reduced-decode -------------------------------------------------------------------------

_REDUCED = """\
What reduced_decode=True does to speed and to pixels, on one core, in one process.

For each stored size (640x480 and 1280x720 JPEG videos of h5feed's sample data, quality 90)
and each target resize, every frame of a sample of clips is decoded and resized twice, with
the code the workers run (h5feed.producer.worker.decode): in full (cv2.imdecode then cv2.resize,
INTER_LINEAR) and reduced (libjpeg's DCT scaling to 1/2, 1/4 or 1/8, then the same resize).
Reported: ms per frame of each (median of --repeats passes), the speed-up, and how far the
reduced pixels are from the full ones on the resized frame (mean and max absolute difference
over all channels, and PSNR in dB)."""


def _reduced_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--data-dir", default="bench_data/reduced", help="sample videos (kept; %(default)s)")
    add("--frames", type=positive_int, default=200, help="frames per case (default 200)")
    add("--repeats", type=positive_int, default=5, help="timed passes (default 5)")
    add("--json", default=None, help="also write the results here")


# -- auto -------------------------------------------------------------------------------------

_AUTO = """\
workers="auto" against fixed counts of local workers: clips/s, the trainer's wait, workers.

For each of --workers in turn (the order rotated each round), --repeats times: h5feed.batches
over sample data (--files x --videos-per-file; the main bench's clip: 16 frames, resized,
cropped, flipped, batches of 8) for --epochs epochs, taken as fast as they come, or with
--step-ms of simulated training per batch. Reported, medians over the repeats:

  clips/s   from the first batch to the end
  waited    the share of that time the trainer waited for a batch
  at end    workers running at the end ("auto": where it settled)
  started   workers started during the run ("auto": its growth)

"auto" starts at 1 and grows at most once per 10 s, so runs shorter than a few tens of
seconds show its start more than its steady state: give --epochs accordingly."""


def _worker_list(text: str) -> str:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or any(n != "auto" and not (n.isdigit() and int(n) >= 1) for n in names):
        raise argparse.ArgumentTypeError(f"counts >= 1 or auto, comma-separated; got {text!r}")
    return ",".join(names)


def _auto_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--workers", type=_worker_list, default="1,2,3,auto", help="(default %(default)s)")
    add("--files", type=positive_int, default=4, help="(default %(default)s)")
    add("--videos-per-file", type=positive_int, default=12, help="(default %(default)s)")
    add("--epochs", type=positive_int, default=20, help="(default %(default)s)")
    add("--repeats", type=positive_int, default=1, help="(default %(default)s)")
    add("--step-ms", type=float, default=0.0, help="simulated training per batch (0)")
    add("--json", default=None, help="also write the figures here")


STUDIES: tuple[Study, ...] = (
    Study(
        "scale",
        "the first batch, index memory and open files at thousands of files",
        _SCALE,
        "examples:\n"
        "  h5feed bench scale                               # N = 1,000 and 10,000\n"
        "  h5feed bench scale --files 1000 --plain --json /tmp/plain.json",
        _scale_arguments,
        "h5feed.bench.scale",
    ),
    Study(
        "soak",
        "full rate with workers SIGKILLed: memory and descriptors over time",
        _SOAK,
        "examples:\n"
        "  h5feed bench soak                                # 10 minutes, a kill a minute\n"
        "  h5feed bench soak --minutes 1 --kill-every 10 --json docs/bench/soak.json\n"
        "  h5feed bench soak --storage s3 --minutes 20 --json docs/bench/soak-s3-2cores.json",
        _soak_arguments,
        "h5feed.bench.soak",
    ),
    Study(
        "open-files",
        "what keeping at most max_open_files HDF5 files open costs",
        _OPEN_FILES,
        "examples:\n"
        "  h5feed bench open-files                          # prints both figures\n"
        "  h5feed bench open-files --size 320 --json out.json",
        _open_files_arguments,
        "h5feed.bench.open_files",
    ),
    Study(
        "lineage",
        "what the lineage record costs the trainer: CPU per clip without and with it",
        _LINEAGE,
        "examples:\n"
        "  h5feed bench lineage                             # prints both figures\n"
        "  h5feed bench lineage --repeats 5 --json docs/bench/lineage-2cores.json",
        _lineage_arguments,
        "h5feed.bench.lineage_cost",
    ),
    Study(
        "reduced-decode",
        "speed and pixels of reduced_decode=True, on one core",
        _REDUCED,
        "examples:\n  h5feed bench reduced-decode --json docs/bench/reduced-decode-2cores.json",
        _reduced_arguments,
        "h5feed.bench.reduced_decode",
    ),
    Study(
        "auto",
        'workers="auto" against 1, 2 and 3 workers: clips/s, the wait, workers',
        _AUTO,
        "examples:\n"
        "  h5feed bench auto                                # 1,2,3,auto, taken at full speed\n"
        "  h5feed bench auto --step-ms 400 --json out.json  # a slow trainer",
        _auto_arguments,
        "h5feed.bench.auto_workers",
    ),
    Study(
        "object-storage",
        "clips/s over s3:// (moto, a latency per request) against local files",
        storage_study.OBJECT_STORAGE,
        "examples:\n"
        "  h5feed bench object-storage                      # 0 and 20 ms per request\n"
        "  h5feed bench object-storage --files 2 --videos 96 --block-kib 256 --json out.json",
        storage_study.object_storage_arguments,
        "h5feed.bench.object_storage",
    ),
    Study(
        "gpu-train",
        "a 3D CNN on a GPU fed by h5feed, a cached batch and DataLoader (needs torch)",
        gpu_study.GPU_TRAIN,
        "examples:\n"
        "  h5feed bench gpu-train --calibrate --need-from OUT/scale.json --json OUT/train.json\n"
        "  h5feed bench gpu-train --device cpu --workers 2 --seconds 2 --warmup 2 --widths 4,8",
        gpu_study.gpu_train_arguments,
        "h5feed.bench.gpu.train",
    ),
    Study(
        "many-workers",
        "one trainer with 100 to 1,000 synthetic workers: loop CPU, first batch, hand-over",
        worker_studies.MANY_WORKERS,
        "examples:\n"
        "  h5feed bench many-workers                        # 100, 300 and 1,000 workers\n"
        "  h5feed bench many-workers --workers 100,300 --json docs/bench/many-workers.json",
        worker_studies.many_workers_arguments,
        "h5feed.bench.many_workers",
    ),
    Study(
        "balance",
        "each worker's share of the clips with sleeping workers, over 1, 3 and 32 files",
        worker_studies.BALANCE,
        "examples:\n"
        "  h5feed bench balance                             # 8 and 15 workers\n"
        "  h5feed bench balance --workers 8 --files 1,3 --json docs/bench/balance.json",
        worker_studies.balance_arguments,
        "h5feed.bench.balance",
    ),
)


def _runner(module: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        result: int = importlib.import_module(module).run(args)
        return result

    return run


def register(subparsers: Any) -> None:
    """One parser per study under ``h5feed bench`` (``subparsers``: its ``add_subparsers``)."""
    for study in STUDIES:
        parser = subparsers.add_parser(
            study.name,
            help=study.summary,
            description=study.description,
            epilog=study.epilog,
            formatter_class=HelpFormatter,
        )
        study.arguments(parser)
        parser.set_defaults(handler=_runner(study.module))
