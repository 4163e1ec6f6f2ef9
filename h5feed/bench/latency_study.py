"""``h5feed bench object-storage --server local-latency``: the same files read from local disk
and through ``h5feed-bench://`` (:mod:`h5feed.bench.latency_fs`: local files, each request
delayed by ``--latency-ms``, no server CPU), by the same worker code as ``s3://``.

Reported per row: clips/s and x local; requests (the workers' own counts,
``stats()["workers"][i]["object_requests"]``) and per clip; bytes read per byte stored and per
byte used (the frames' bytes the clips cut: clips x clip length x the mean stored bytes of a
frame, an estimate that counts a frame again for every clip that holds it); and the requests
a worker makes to learn one file's index (open and index it in this process, counted). Two
epochs after the first batch are timed, as in :mod:`h5feed.bench.object_storage`. With
``--node-cache``, two more runs at ``--latency-ms`` with a node-local cache of whole objects
(:mod:`h5feed.producer.files.node_cache`): the first streams and downloads, the second (new
workers, as a later job on the node) reads the copies.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import tempfile
import time
from typing import Any, NamedTuple

import h5feed
from h5feed.bench.study_files import frame_label, study_files, study_spec
from h5feed.common.layouts import Auto
from h5feed.common.object_urls import BENCH_ENV, BENCH_SCHEME
from h5feed.common.system.procstat import descendants, process_cpu_s
from h5feed.producer.files import node_cache, remote_files, request_counts
from h5feed.producer.inspection import inspect_file

__all__ = ["Timed", "run_local_latency", "timed_epochs"]


class Timed(NamedTuple):
    """Two epochs read: clips/s after the first batch, the clips in all and after the first
    batch, and the stream's ``stats()`` at the first batch and at the end (the workers' own
    request counts: what the first batch took holds the index walks)."""

    rate: float
    clips: int
    timed_clips: int
    first: dict[str, Any]
    stats: dict[str, Any]
    #: CPU per clip after the first batch, ms: the workers' processes (every thread: the
    #: read-ahead's and the latency filesystem's too), and the trainer's.
    worker_cpu_ms: float
    trainer_cpu_ms: float


def timed_epochs(files: str | list[str], args: argparse.Namespace) -> Timed:
    """Two epochs (4 clips per video) read with ``args.workers`` local workers, timed after
    the first batch (:class:`Timed`)."""
    feed = h5feed.batches(
        files, clip_len=args.clip_len, resize=(112, 112), batch_size=16, epochs=2, seed=1,
        clips_per_video=4,
        workers=args.workers, index_cache=False, start_timeout_s=300, unit_timeout_s=300,
    )  # fmt: skip
    try:
        with feed.stream() as stream:
            first = next(stream)
            at_first = stream.stats()
            workers = descendants(os.getpid())  # this feed's (the last one's are closed)
            began, workers_began = time.perf_counter(), _cpu_s(workers)
            trainer_began = time.process_time()
            clips = sum(len(batch["label"]) for batch in stream)
            elapsed = time.perf_counter() - began
            trainer_cpu_s = time.process_time() - trainer_began
            worker_cpu_s = _cpu_s(workers) - workers_began
            stats = stream.stats()
    finally:
        feed.close()
    return Timed(
        clips / elapsed, clips + len(first["label"]), clips, at_first, stats,
        1000 * worker_cpu_s / clips, 1000 * trainer_cpu_s / clips,
    )  # fmt: skip


def _cpu_s(pids: set[int]) -> float:
    return sum(process_cpu_s(pid) for pid in pids)


def _reads(stats: dict[str, Any]) -> tuple[int, int]:
    """The workers' requests and bytes read, from a ``stats()``."""
    workers = stats["workers"]
    return sum(w["object_requests"] for w in workers), sum(w["object_bytes"] for w in workers)


def _row(
    label: str,
    args: argparse.Namespace,
    local: float,
    stored: int,
    frames: int,
    learn: tuple[int, int],
) -> dict[str, Any]:
    """Two epochs over the study's URLs, printed and returned as a row of figures: over the
    whole run, and over the timed epochs alone (after the first batch: what reading clips
    costs once the files are open and indexed)."""
    timed = timed_epochs(f"{BENCH_SCHEME}://data/*.h5", args)
    requests, read = _reads(timed.stats)
    first_requests, first_read = _reads(timed.first)
    frame_bytes = stored / frames  # the mean stored bytes of a frame
    used = timed.clips * args.clip_len * frame_bytes
    timed_used = timed.timed_clips * args.clip_len * frame_bytes
    epochs_requests, epochs_read = requests - first_requests, read - first_read
    print(
        f"{label:>34}: {timed.rate:8.1f} clips/s ({timed.rate / local:.2f} x local); "
        f"{requests} requests ({requests / timed.clips:.3f} per clip), "
        f"{read / stored:.2f} bytes read per byte stored, {read / used:.2f} per "
        f"byte used; after the first batch {epochs_requests / timed.timed_clips:.3f} "
        f"requests per clip, {epochs_read / timed_used:.2f} bytes read per byte used; "
        f"{learn[0]} requests ({learn[1] / 2**20:.1f} MiB) to learn one file's index; "
        f"a credit budget of {timed.stats['credit_budget']} batches; CPU per clip: workers "
        f"{timed.worker_cpu_ms:.2f} ms, trainer {timed.trainer_cpu_ms:.2f} ms",
        flush=True,
    )
    return {
        "clips_per_s": round(timed.rate, 1),
        "x_local": round(timed.rate / local, 3),
        "requests": requests,
        "requests_per_clip": round(requests / timed.clips, 4),
        "bytes_read_per_byte_stored": round(read / stored, 3),
        "bytes_read_per_byte_used": round(read / used, 3),
        "to_first_batch": {"requests": first_requests, "bytes": first_read},
        "after_first_batch": {
            "requests_per_clip": round(epochs_requests / timed.timed_clips, 4),
            "bytes_read_per_byte_used": round(epochs_read / timed_used, 3),
        },
        "requests_to_learn_one_index": learn[0],
        "bytes_to_learn_one_index": learn[1],
        "credit_budget": timed.stats["credit_budget"],
        "worker_cpu_ms_per_clip": round(timed.worker_cpu_ms, 3),
        "trainer_cpu_ms_per_clip": round(timed.trainer_cpu_ms, 3),
    }


def _index_requests_at(root: str, url: str, latency_ms: float) -> tuple[int, int]:
    """:func:`_index_requests` through the latency filesystem over ``root``."""
    os.environ[BENCH_ENV] = json.dumps({"root": root, "latency_ms": latency_ms})
    return _index_requests(url)


def _index_requests(url: str) -> tuple[int, int]:
    """Requests this process makes to open ``url`` and learn its index (as a worker does),
    and the bytes they read."""
    from h5feed.producer.layouts import open_reader

    request_counts.take()
    reader = open_reader(url, Auto())
    try:
        reader.index()
    finally:
        reader.close()
    reads = request_counts.take()
    return reads.requests, reads.bytes


def run_local_latency(args: argparse.Namespace) -> int:
    """Write the files, read them from disk and through the latency filesystem; print each
    figure as it is measured and write them to ``args.json`` (when not None)."""
    names = (BENCH_ENV, "H5FEED_STORAGE_OPTIONS", node_cache.DIR_ENV)
    saved = {name: os.environ.get(name) for name in names}
    results: dict[str, Any] = {"server": "local-latency", "load": _load()}
    block = args.block_kib << 10
    try:
        with tempfile.TemporaryDirectory(prefix="h5feed-latency-") as tmp:
            spec = study_spec(args)
            layout = getattr(args, "layout", "groups")
            paths = study_files(pathlib.Path(tmp), spec, layout)
            stored = sum(os.path.getsize(p) for p in paths)
            frames = sum(int(inspect_file(p)["frames"]) for p in paths)
            cache = block * remote_files.MAX_BLOCKS
            results.update(
                layout=layout, frame_size=frame_label(spec), files=len(paths),
                videos_per_file=args.videos,
                workers=args.workers,
                clip_len=args.clip_len, block_bytes=block, cache_bytes_per_file=cache,
                file_bytes=stored // len(paths), stored_bytes=stored, frames=frames,
                file_to_cache=round(stored / len(paths) / cache, 1),
            )  # fmt: skip
            print(
                f"{len(paths)} files ({layout}) of {stored / len(paths) / 2**20:.1f} MiB, "
                f"{frames} frames of {frame_label(spec)} ({stored / frames / 1024:.1f} KiB); "
                f"a worker's cache of a file {cache / 2**20:.2f} MiB: files "
                f"{results['file_to_cache']} x the cache; load {results['load']}",
                flush=True,
            )
            timed = timed_epochs(paths, args)
            local = timed.rate
            print(
                f"{'local files':>34}: {local:8.1f} clips/s ({timed.clips} clips); CPU per "
                f"clip: workers {timed.worker_cpu_ms:.2f} ms, "
                f"trainer {timed.trainer_cpu_ms:.2f} ms",
                flush=True,
            )
            results["local_clips_per_s"] = round(local, 1)
            results["local_worker_cpu_ms_per_clip"] = round(timed.worker_cpu_ms, 3)
            results["local_trainer_cpu_ms_per_clip"] = round(timed.trainer_cpu_ms, 3)
            os.environ["H5FEED_STORAGE_OPTIONS"] = json.dumps({"default_block_size": block})
            one_file = f"{BENCH_SCHEME}://data/{pathlib.Path(paths[0]).name}"
            learn = _index_requests_at(tmp, one_file, args.latency_ms)
            for latency_ms in sorted({0.0, args.latency_ms}):
                os.environ[BENCH_ENV] = json.dumps({"root": tmp, "latency_ms": latency_ms})
                label = f"{BENCH_SCHEME}:// +{latency_ms:g} ms/request"
                row = _row(label, args, local, stored, frames, learn)
                results[f"latency_{latency_ms:g}ms"] = row
            if args.node_cache:  # the same at --latency-ms, with a node-local cache of copies
                os.environ[BENCH_ENV] = json.dumps({"root": tmp, "latency_ms": args.latency_ms})
                os.environ[node_cache.DIR_ENV] = os.path.join(tmp, "node-cache")
                for run in ("first", "second"):
                    label = f"+{args.latency_ms:g} ms, node cache, {run} run"
                    results[f"node_cache_{run}_run"] = _row(
                        label, args, local, stored, frames, learn
                    )
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    if args.json is not None:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _load() -> str:
    """The machine's load averages (1, 5, 15 min), as ``uptime`` says them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"
