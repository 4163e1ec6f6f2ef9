"""``h5feed bench scale``: time to the first batch, index memory and open files at thousands
of files (what each figure means: ``h5feed bench scale --help``, :mod:`h5feed.bench.subcommands`).

Files are made once per N and copied (:func:`make_files`); :func:`measure` times one N with
the public API only (``h5feed.batches``), so the figures compare across versions.
"""

from __future__ import annotations

import argparse
import gc
import os
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import cv2
import h5py
import numpy as np

import h5feed
from h5feed.bench.study_report import study_report, write_report

_FRAMES_PER_VIDEO = 4
_DROP_CACHES = "/proc/sys/vm/drop_caches"


def make_template(path: pathlib.Path, videos: int, packed: bool) -> None:
    """One file of ``videos`` videos of tiny frames: written by the pack writer (``packed``,
    pack index included) or plainly (groups only)."""
    jpeg = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))[1].reshape(-1)
    names = [f"video_{i:04d}" for i in range(videos)]
    if not packed:
        from h5feed.producer.sample_data import write_video_file

        frames = [jpeg.tobytes()] * _FRAMES_PER_VIDEO
        write_video_file(path, {name: (frames, i % 700) for i, name in enumerate(names)})
        return
    from h5feed.pack.shards import ShardWriter

    work = path.parent / "template-work"
    work.mkdir(exist_ok=True)
    writer = ShardWriter(str(work), 0, [])
    for i, name in enumerate(names):
        video = work / f"{name}.h5"
        with h5py.File(video, "w") as h5:  # as h5feed.pack.encode writes one video
            group = h5.create_group(name)
            data = group.create_dataset(
                "frames",
                shape=(_FRAMES_PER_VIDEO,),
                maxshape=(None,),
                chunks=(256,),
                dtype=h5py.vlen_dtype(np.uint8),
            )
            for k in range(_FRAMES_PER_VIDEO):
                data[k] = jpeg
            group.attrs["label"] = np.int64(i % 700)
            group.attrs["source"] = f"{name}.mp4"
        entry = {"name": name, "frames": _FRAMES_PER_VIDEO, "label": i % 700}
        writer.add(str(video), entry, jpeg.size * _FRAMES_PER_VIDEO)
    writer.finish()
    shutil.move(writer.final, path)
    shutil.rmtree(work)


def make_files(root: pathlib.Path, count: int, videos: int, packed: bool) -> list[str]:
    """``count`` copies of one template file under ``root`` (made once; more copies added)."""
    root.mkdir(parents=True, exist_ok=True)
    template = root / "template.h5"
    if not template.exists():
        make_template(template, videos, packed)
    paths = []
    for i in range(count):
        path = root / f"f{i:05d}.h5"
        if not path.exists():
            shutil.copyfile(template, path)
        paths.append(str(path))
    return paths


def drop_page_cache() -> str | None:
    """Drop the OS page cache; None when done, else why not."""
    try:
        os.sync()
        with open(_DROP_CACHES, "w") as handle:
            handle.write("3\n")
    except OSError as exc:
        return f"not permitted ({exc.strerror or exc})"
    return None


def index_bytes(index: Any) -> int:
    """The trainer's memory for ``index``: its arrays, and each distinct Python object its
    object arrays point to (a file's path, shared by its videos, counted once)."""
    total = 0
    for name in ("file_of_video", "video_in_file", "frames", "labels", "names", "file_names"):
        total += getattr(index, name).nbytes
    seen: set[int] = set()
    for name in ("names", "file_names"):
        for obj in getattr(index, name):
            if id(obj) not in seen:
                seen.add(id(obj))
                total += sys.getsizeof(obj)
    return total


def open_hdf5_files(pid: int) -> int:
    """HDF5 files process ``pid`` holds open (-1 when it cannot be read)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return -1
    count = 0
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        count += target.endswith((".h5", ".hdf5"))
    return count


def first_batch(feed: Any) -> tuple[Any, float]:
    began = time.perf_counter()
    stream = iter(feed)
    next(stream)
    return stream, time.perf_counter() - began


def measure(
    files: list[str], cache: str, workers: int, steady_batches: int, drop: bool = True
) -> dict[str, Any]:
    """Cold, warm (and dropped) first batches, the second iteration, memory, open files,
    steady rate, for ``files``."""
    shutil.rmtree(cache, ignore_errors=True)
    options: dict[str, Any] = dict(
        clip_len=2, batch_size=32, workers=workers, index_cache=cache, epochs=None, seed=0
    )
    result: dict[str, Any] = {"files": len(files)}
    cold_feed = h5feed.batches(files, **options)
    stream, result["cold_s"] = first_batch(cold_feed)
    stream.close()
    del stream, cold_feed
    gc.collect()

    feed = h5feed.batches(files, **options)
    stream, result["warm_s"] = first_batch(feed)
    index = getattr(getattr(stream, "scheduler", None), "index", None)
    videos = index.num_videos if index is not None else 0
    result["videos"] = videos
    result["index_bytes_per_video"] = round(index_bytes(index) / videos, 1) if videos else None
    pids = list(stream.worker_pids)
    began = time.perf_counter()
    clips = 0
    for _ in range(steady_batches):
        clips += len(next(stream)["label"])
    result["clips_per_s"] = round(clips / (time.perf_counter() - began), 1)
    result["open_files_per_worker"] = [open_hdf5_files(pid) for pid in pids]
    stream.close()
    stream, result["second_s"] = first_batch(feed)  # same feed: kept workers, if any
    result["second_same_workers"] = list(stream.worker_pids) == pids
    stream.close()
    del stream, feed
    gc.collect()

    why_not = drop_page_cache() if drop else "skipped (--no-drop)"
    if why_not is None:
        feed = h5feed.batches(files, **options)
        stream, result["dropped_s"] = first_batch(feed)
        stream.close()
        del stream, feed
        gc.collect()
    else:
        result["dropped_s"] = None
        result["dropped_note"] = why_not
    return result


def table(rows: Sequence[dict[str, Any]]) -> str:
    head = (
        f"{'files':>7} {'videos':>9} {'cold s':>8} {'warm s':>8} {'dropped s':>10} "
        f"{'2nd iter s':>10} {'B/video':>8} {'open/worker':>12} {'clips/s':>8}"
    )
    lines = [head]
    for r in rows:
        dropped = f"{r['dropped_s']:.2f}" if r.get("dropped_s") is not None else "n/a"
        lines.append(
            f"{r['files']:>7} {r['videos']:>9} {r['cold_s']:>8.2f} {r['warm_s']:>8.2f} "
            f"{dropped:>10} {r['second_s']:>10.3f} {r['index_bytes_per_video']!s:>8} "
            f"{'/'.join(map(str, r['open_files_per_worker'])):>12} {r['clips_per_s']:>8.0f}"
        )
    notes = {r["dropped_note"] for r in rows if r.get("dropped_note")}
    lines += [f"dropped page cache: {note}" for note in sorted(notes)]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Measure each N of ``args.files``; print a table and write ``args.json``."""
    report = scale_report(args)
    print(table(report["rows"]))
    print(f"wrote {args.json}")
    return 0


def scale_report(args: argparse.Namespace) -> dict[str, Any]:
    """The rows of every N (each printed as it is measured), written to ``args.json`` with
    the settings, host and commit."""
    counts: list[int] = args.files
    own_data = args.data is None
    root = pathlib.Path(args.data or tempfile.mkdtemp(prefix="h5feed-scale-"))
    kind = "plain" if args.plain else "pack"
    rows = []
    try:
        for count in counts:
            began = time.perf_counter()
            files = make_files(root / f"{kind}-{args.videos}", count, args.videos, not args.plain)
            made_s = time.perf_counter() - began
            cache = str(root / "index-cache")
            row = measure(files, cache, args.workers, args.steady_batches, not args.no_drop)
            row["made_s"] = round(made_s, 1)
            rows.append(row)
            print(table(rows[-1:]).splitlines()[1], flush=True)
    finally:
        if own_data:
            shutil.rmtree(root, ignore_errors=True)
    settings = {"files_kind": kind, "videos_per_file": args.videos, "workers": args.workers}
    report = study_report("scale", settings, rows)
    write_report(args.json, report)
    return report
