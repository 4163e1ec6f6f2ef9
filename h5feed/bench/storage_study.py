"""The help and arguments of ``h5feed bench object-storage`` (:mod:`h5feed.bench.object_storage`;
argparse only: cheap to import; registered by :mod:`h5feed.bench.subcommands`)."""

from __future__ import annotations

import argparse
import os

from h5feed.common.cli_args import frame_size, int_in, positive_int

__all__ = ["OBJECT_STORAGE", "object_storage_arguments"]

OBJECT_STORAGE = """\
HDF5 over s3:// against the same files on local disk: clips/s, requests, bytes read.

Writes --files files of --videos JPEG videos (--min-frames to --max-frames frames of
--frame-size, default 128x160: about 3 KB each, so that requests, not decoding, set the pace),
uploads them to moto's S3 server (pure Python, in this process: it shares the cores with the
trainer and the workers, so its figures are a floor, not a cloud's), and reads them with
--workers local workers (clips of --clip-len frames, 4 per video, 2 epochs, the two epochs
after the first batch timed): from disk, then through s3:// behind a proxy that counts
requests and bytes and adds 0 ms, then --latency-ms, per request (a distant store's round
trip). Reported per row: clips/s and x local, requests (and per clip), and bytes read per
byte stored.

Each worker caches 4 blocks per open file; --block-kib sets a block (default the workers'
4096 KiB, given to them as default_block_size in $H5FEED_STORAGE_OPTIONS): files larger
than 4 blocks make requests as clips are read, which is what a study of a store's latency
needs (the issue asks for files at least 10 x a worker's cache). Needs h5feed[storage] and
moto[server] (the test extra).

--server local-latency reads the same files through h5feed-bench://, a test-only fsspec
filesystem over the local files that sleeps --latency-ms per request (h5feed/bench/latency_fs.py:
what a distant store costs, with no server CPU), through the same worker code as s3://; its
requests and bytes are the workers' own counts (stats()["workers"]), over the whole run and
after the first batch (the opens and index walks come before it); --layout pack writes the
same frames with `h5feed pack` (the layout to upload) instead of the sample writer's."""


def object_storage_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--files", type=positive_int, default=4, help="HDF5 files (default %(default)s)")
    add("--videos", type=positive_int, default=48, help="videos per file (default %(default)s)")
    add("--min-frames", type=int_in(8), default=24, help="(default %(default)s)")
    add("--max-frames", type=int_in(8), default=32, help="(default %(default)s)")
    add(
        "--frame-size",
        type=frame_size,
        default=(128, 160),
        metavar="HxW",
        help="stored frames, JPEG quality 90 (default 128x160; 240x320: the main bench's, "
        "about 5 x the bytes and the decoding)",
    )
    add("--workers", type=positive_int, default=2, help="local workers (default %(default)s)")
    add("--clip-len", type=positive_int, default=8, help="<= --min-frames (default 8)")
    add("--latency-ms", type=float, default=20.0, help="added per request (default 20)")
    add("--block-kib", type=positive_int, default=4096, help="one ranged GET (default 4096)")
    add(
        "--server",
        choices=("moto", "local-latency"),
        default="moto",
        help="moto's S3 server behind a proxy, or local files behind a latency (default moto)",
    )
    add(
        "--layout",
        choices=("groups", "pack"),
        default="groups",
        help="with --server local-latency: the sample writer's groups, or the same frames "
        "written by `h5feed pack` (a pack index, a CRC per frame) in about --files shards "
        "(default groups)",
    )
    add(
        "--node-cache",
        action="store_true",
        help="with --server local-latency: two more runs at --latency-ms with a node-local "
        "cache of whole objects ($H5FEED_NODE_CACHE in a temporary directory)",
    )
    add(
        "--json",
        default=os.path.join("docs", "bench", "object-storage-2cores.json"),
        help="where to write the figures (default %(default)s)",
    )
