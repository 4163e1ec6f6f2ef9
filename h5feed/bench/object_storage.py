"""HDF5 over ``s3://`` against the same files on disk: clips/s, requests per clip and bytes
read per byte stored, printed as measured (``h5feed bench object-storage``; its help and
arguments in :mod:`h5feed.bench.storage_study`).

The S3 server is moto's (``ThreadedMotoServer``, pure Python, in this process: it shares the
cores with the trainer and its workers, so its figures are a floor, not a cloud's); a proxy
(:mod:`h5feed.bench.s3_proxy`) in front of it counts requests and bytes and adds a latency
per request (``--latency-ms``, a distant store's round trip); ``--block-kib`` sets the
workers' block (``default_block_size`` in their ``$H5FEED_STORAGE_OPTIONS``), so files
larger than a worker's cache of a file (4 blocks) can be studied without gigabytes. Every
run reads the same files with the same plan: two epochs after their first batch are timed.
Needs ``h5feed[storage]`` and ``moto[server]`` (the test extra). No figure is asserted:
targets go in the docs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import pathlib
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

from h5feed.bench.latency_study import run_local_latency, timed_epochs
from h5feed.bench.study_files import frame_label, study_spec
from h5feed.common import storage_config
from h5feed.producer.files import remote_files
from h5feed.producer.sample_data import make_sample_dataset

_BUCKET = "h5feed-bench"
#: The files :func:`moto_bucket` uploads, as one glob.
DATA_URL = f"s3://{_BUCKET}/data/*.h5"


def run(args: argparse.Namespace) -> int:
    """Start the server, write and upload the files, print each figure as it is measured;
    write them to ``args.json`` (when not None)."""
    if args.clip_len > args.min_frames or args.min_frames > args.max_frames:
        raise ValueError("needs --clip-len <= --min-frames <= --max-frames")
    if getattr(args, "server", "moto") == "local-latency":
        return run_local_latency(args)
    if getattr(args, "layout", "groups") != "groups":
        raise ValueError("--layout pack is measured with --server local-latency only")
    if getattr(args, "node_cache", False):
        raise ValueError("--node-cache is measured with --server local-latency only")
    from h5feed.bench.s3_proxy import FaultProxy

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="h5feed-object-storage-") as tmp:
        spec = study_spec(args)
        paths = sorted(str(p) for p in make_sample_dataset(pathlib.Path(tmp), spec))
        stored = sum(os.path.getsize(p) for p in paths)
        per_file = stored / len(paths)
        block = args.block_kib << 10
        cache = block * remote_files.MAX_BLOCKS
        results.update(
            frame_size=frame_label(spec), files=args.files, videos_per_file=args.videos,
            workers=args.workers,
            clip_len=args.clip_len, block_bytes=block, cache_bytes_per_file=cache,
            file_bytes=int(per_file), file_to_cache=round(per_file / cache, 1),
        )  # fmt: skip
        print(
            f"{len(paths)} files of {per_file / 2**20:.1f} MiB; a worker's cache "
            f"of a file {cache / 2**20:.2f} MiB ({block >> 10} KiB blocks): files "
            f"{results['file_to_cache']} x the cache",
            flush=True,
        )
        with moto_bucket(paths) as endpoint:
            timed = timed_epochs(paths, args)
            local = timed.rate
            print(f"{'local files':>28}: {local:8.1f} clips/s ({timed.clips} clips)", flush=True)
            results["local_clips_per_s"] = round(local, 1)
            for latency_ms in sorted({0.0, args.latency_ms}):
                proxy = FaultProxy(endpoint, delay_s=latency_ms / 1000)
                os.environ[storage_config.STORAGE_ENV] = json.dumps(
                    {"endpoint_url": proxy.endpoint, "default_block_size": block}
                )
                try:
                    rate, clips, *_ = timed_epochs(DATA_URL, args)
                finally:
                    proxy.stop()
                label = f"s3 (moto, +{latency_ms:g} ms/request)"
                print(
                    f"{label:>28}: {rate:8.1f} clips/s ({rate / local:.2f} x local); "
                    f"{proxy.requests} requests ({proxy.requests / clips:.3f} per clip), "
                    f"{proxy.body_bytes / stored:.2f} bytes read per byte stored",
                    flush=True,
                )
                results[f"s3_{latency_ms:g}ms"] = {
                    "clips_per_s": round(rate, 1),
                    "requests": proxy.requests,
                    "requests_per_clip": round(proxy.requests / clips, 4),
                    "bytes_read_per_byte_stored": round(proxy.body_bytes / stored, 3),
                }
        results["stored_bytes"] = stored
    if args.json is not None:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


@contextlib.contextmanager
def moto_bucket(paths: Sequence[str]) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, in this process, with ``paths`` uploaded under
    :data:`DATA_URL`'s prefix, and nothing else in its bucket (moto keeps its state per
    process: what an earlier server of this process uploaded is removed first); yields the
    server's endpoint (``http://host:port``).

    Bench credentials go in the environment where none are (the trainer and its local
    workers read them there, as a producer does); ``$H5FEED_STORAGE_OPTIONS``, which the
    caller points at the endpoint (or a proxy in front of it), is restored on exit (a test
    may run a bench in its own process), and the server is stopped. Needs ``moto[server]``.
    """
    from moto.server import ThreadedMotoServer

    for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
        os.environ.setdefault(name, value)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's server logs each request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    saved = os.environ.get(storage_config.STORAGE_ENV)
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        fs = storage_config.filesystem(
            "s3", {"endpoint_url": endpoint, "key": "bench", "secret": "bench"}
        )
        if fs.exists(_BUCKET):  # moto keeps its buckets per process: an earlier run's
            fs.rm(_BUCKET, recursive=True)  # files would be read too
        fs.mkdir(_BUCKET)
        for path in paths:
            fs.put(path, f"{_BUCKET}/data/{pathlib.Path(path).name}")
        yield endpoint
    finally:
        server.stop()
        if saved is None:
            os.environ.pop(storage_config.STORAGE_ENV, None)
        else:
            os.environ[storage_config.STORAGE_ENV] = saved


def main() -> int:
    """``python -m h5feed.bench.object_storage``: the same as ``h5feed bench object-storage``."""
    from h5feed.bench.storage_study import object_storage_arguments

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    object_storage_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
