"""Time to the first batch, index memory and open files at thousands of files.

Makes N files of ``--videos`` short videos each (tiny 8x8 JPEG frames: the point is counts,
not pixels), then, for each N of ``--files``, with ``--workers`` local workers:

* ``cold_s``: time from ``iter()`` to the first batch with an empty index cache (the files'
  pages are in the OS page cache, as they were just written);
* ``warm_s``: the same with the index cache the cold run filled;
* ``dropped_s``: warm index cache after the OS page cache was dropped
  (``echo 3 > /proc/sys/vm/drop_caches``: root only, and it drops the whole machine's cache;
  otherwise, or with ``--no-drop``, the row says why not);
* ``second_s``: the second iteration of the same dataset (persistent workers: no start-up,
  indexes in the workers' memory);
* ``index_bytes_per_video``: the trainer's memory for the index (arrays, names, paths);
* ``open_files``: HDF5 files each worker holds open (``/proc/PID/fd``) after the steady run;
* ``clips_per_s``: steady rate over ``--steady-batches`` batches after the first.

Files are made once per N by the pack writer (:class:`h5feed.pack.shards.ShardWriter`: the
format ``h5feed pack`` writes, with its per-file index) and copied; ``--plain`` makes files
without the pack index (files from elsewhere: the workers walk their groups).

    python benchmarks/scale.py --files 1000,10000            # table + docs/bench/scale-2cores.json
    python benchmarks/scale.py --files 1000 --plain --json /tmp/plain.json

Only the public API is used to measure, so the same script measures another checkout of
h5feed (``PYTHONPATH=/path/to/other python benchmarks/scale.py --files 1000 --data DIR``:
``--data`` reuses files made before, by any version).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import cv2
import h5py
import numpy as np

import h5feed

_DEFAULT_JSON = pathlib.Path(__file__).resolve().parent.parent / "docs/bench/scale-2cores.json"
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
    options = dict(
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


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default="1000,10000", help="file counts, comma-separated")
    parser.add_argument("--videos", type=int, default=100, help="videos per file")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steady-batches", type=int, default=100)
    parser.add_argument("--plain", action="store_true", help="files without the pack index")
    parser.add_argument("--data", default=None, help="directory of the files (kept)")
    parser.add_argument("--json", default=str(_DEFAULT_JSON), help="where to write results")
    parser.add_argument(
        "--no-drop", action="store_true", help="do not drop the OS page cache (it is global)"
    )
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.files.split(",")]
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
    report = {
        "benchmark": "scale",
        "command": "python benchmarks/scale.py " + " ".join(argv or sys.argv[1:]),
        "files_kind": kind,
        "videos_per_file": args.videos,
        "workers": args.workers,
        "h5feed": str(pathlib.Path(h5feed.__file__).parent),
        "commit": _commit(),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_avg_at_end": os.getloadavg(),
        "rows": rows,
    }
    print(table(rows))
    pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")
    return report


def _commit() -> str | None:
    where = str(pathlib.Path(h5feed.__file__).parent)
    try:
        out = subprocess.run(
            ["git", "-C", where, "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except OSError:
        return None
    return out.stdout.strip() or None


if __name__ == "__main__":
    main()
