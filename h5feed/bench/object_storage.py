"""HDF5 over ``s3://`` against the same files on disk: clips/s, requests per clip and bytes
read per byte stored, printed as measured (``python -m h5feed.bench.object_storage``).

The S3 server is moto's (``ThreadedMotoServer``, pure Python, in this process: it shares the
cores with the trainer and its workers, so its figures are a floor, not a cloud's); a proxy
(:mod:`h5feed.bench.s3_proxy`) in front of it counts requests and bytes and adds a latency
per request (``--latency-ms``, a distant store's round trip). Every run reads the same files
with the same plan: two epochs after their first batch are timed. Needs ``h5feed[storage]``
and ``moto[server]`` (the test extra). No figure is asserted: targets go in the docs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import tempfile
import time
from typing import Any

import h5feed
from h5feed.common import storage_config
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

_BUCKET = "h5feed-bench"


def clips_per_s(files: str | list[str], args: argparse.Namespace) -> tuple[float, int]:
    """Clips per second over two epochs (4 clips per video) after the first batch, and the
    clips."""
    feed = h5feed.batches(
        files, clip_len=args.clip_len, resize=(112, 112), batch_size=16, epochs=2, seed=1,
        clips_per_video=4,
        workers=args.workers, index_cache=False, start_timeout_s=300, unit_timeout_s=300,
    )  # fmt: skip
    with feed.stream() as stream:
        first = next(stream)
        began = time.perf_counter()
        clips = sum(len(batch["label"]) for batch in stream)
        elapsed = time.perf_counter() - began
    return clips / elapsed, clips + len(first["label"])


def run(args: argparse.Namespace) -> int:
    """Start the server, write and upload the files, print each figure as it is measured."""
    from moto.server import ThreadedMotoServer

    from h5feed.bench.s3_proxy import FaultProxy

    for name, value in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench")):
        os.environ.setdefault(name, value)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    results: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="h5feed-object-storage-") as tmp:
            spec = SampleSpec(
                files=args.files, videos_per_file=args.videos, min_frames=24, max_frames=32,
                height=128, width=160, seed=3,
            )  # fmt: skip
            paths = sorted(str(p) for p in make_sample_dataset(pathlib.Path(tmp), spec))
            stored = sum(os.path.getsize(p) for p in paths)
            fs = storage_config.filesystem(
                "s3", {"endpoint_url": f"http://{host}:{port}", "key": "bench", "secret": "bench"}
            )
            fs.mkdir(_BUCKET)
            for path in paths:
                fs.put(path, f"{_BUCKET}/data/{pathlib.Path(path).name}")
            local, clips = clips_per_s(paths, args)
            print(f"{'local files':>28}: {local:8.1f} clips/s ({clips} clips)", flush=True)
            results["local_clips_per_s"] = round(local, 1)
            for latency_ms in (0, args.latency_ms):
                proxy = FaultProxy(f"http://{host}:{port}", delay_s=latency_ms / 1000)
                os.environ[storage_config.STORAGE_ENV] = json.dumps(
                    {"endpoint_url": proxy.endpoint}
                )
                try:
                    rate, clips = clips_per_s(f"s3://{_BUCKET}/data/*.h5", args)
                finally:
                    proxy.stop()
                label = f"s3 (moto, +{latency_ms} ms/request)"
                print(
                    f"{label:>28}: {rate:8.1f} clips/s ({rate / local:.2f} x local); "
                    f"{proxy.requests} requests ({proxy.requests / clips:.3f} per clip), "
                    f"{proxy.body_bytes / stored:.2f} bytes read per byte stored",
                    flush=True,
                )
                results[f"s3_{latency_ms}ms"] = {
                    "clips_per_s": round(rate, 1),
                    "requests": proxy.requests,
                    "requests_per_clip": round(proxy.requests / clips, 4),
                    "bytes_read_per_byte_stored": round(proxy.body_bytes / stored, 3),
                }
            results["stored_bytes"] = stored
    finally:
        server.stop()
    if args.json is not None:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=4, help="HDF5 files (default 4)")
    parser.add_argument("--videos", type=int, default=48, help="videos per file (default 48)")
    parser.add_argument("--workers", type=int, default=2, help="local workers (default 2)")
    parser.add_argument("--clip-len", type=int, default=8, help="frames per clip (default 8)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added per request")
    parser.add_argument("--json", default=None, help="also write the figures here")
    return run(parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
