"""``h5feed inspect FILE...``: what h5feed sees in a file — layout, counts, sizes, a sample.

:func:`inspect_file` returns a plain dict (the ``--json`` output); :func:`format_report`
writes it for people. The layout is recognised as ``layout="auto"`` does, so a file that is
not in a known layout gives the same error (what the file holds, which layout parameters to
pass). A URL (``s3://bucket/key.h5``) is read as a producer reads it
(:mod:`h5feed.producer.files.remote_files`: the process's own credentials). Reading cost:
the index (metadata), one decoded frame, and the bytes of at most ``_SIZE_SAMPLE_FRAMES``
frames spread over the file for the mean encoded frame size.
"""

from __future__ import annotations

import collections
import json
import os
import statistics
from typing import Any

import numpy as np

from h5feed.common import layouts, object_urls
from h5feed.common.errors import DataError
from h5feed.common.file_labels import directory_labels
from h5feed.common.layouts import Auto, LayoutSpec
from h5feed.producer.layouts import open_reader
from h5feed.producer.worker.decode import decode_frame

#: Frames whose stored size is read to estimate the mean encoded frame size.
_SIZE_SAMPLE_FRAMES = 256
#: Distinct labels listed (most frequent first) before the rest are counted only.
_LISTED_LABELS = 20


def inspect_file(
    path: str, layout: LayoutSpec | None = None, file_label: int | None = None
) -> dict[str, Any]:
    """A report of ``path`` read with ``layout`` (default: recognised); DataError if unreadable.

    Keys: ``file``, ``layout`` (the wire form, e.g. ``{"kind": "flat", "jpeg": ...}``),
    ``layout_python`` (how to pass it), ``videos``, ``frames``, ``frames_per_video``
    (``min``/``median``/``max``), ``file_bytes``, ``mean_frame_bytes`` and
    ``frames_sampled`` (stored bytes per frame: encoded for JPEG layouts, pixels for raw),
    ``labels`` (``[[label, videos], ...]`` most frequent first, ties by label, at most 20) and
    ``labels_distinct``, ``frame_shape`` ([height, width, channels] of the first frame as
    stored/decoded, before resize), ``encoded`` (JPEG or pixels) and ``sample`` (the first
    video's ``video``, ``label``, ``frames``). ``file_label``: the label of every video of
    the file, as the trainer decides it (``Video(label="directory")``), instead of the file's.
    """
    reader = open_reader(path, layout if layout is not None else Auto())
    try:
        videos = reader.index()
        if file_label is not None:
            videos = [(name, n, file_label) for name, n, _label in videos]
        counts = [n for _name, n, _label in videos]
        labels = collections.Counter(label for _name, _n, label in videos)
        frequent = sorted(labels.items(), key=lambda kv: (-kv[1], kv[0]))  # ties: by label
        name, n_frames, label = videos[0]
        first = reader.read_frames(name, [0])[0]
        image = decode_frame(first, path, name, 0) if reader.encoded else np.asarray(first)
        shape = [int(image.shape[0]), int(image.shape[1])]
        shape.append(int(image.shape[2]) if image.ndim == 3 else 1)
        sizes = _sample_frame_bytes(reader.read_frames, videos)
        return {
            "file": path,
            "layout": reader.spec.to_wire(),
            "layout_python": reader.spec.describe(),
            "encoded": reader.encoded,
            "videos": len(videos),
            "frames": int(sum(counts)),
            "frames_per_video": {
                "min": min(counts),
                "median": float(statistics.median(counts)),
                "max": max(counts),
            },
            "file_bytes": _file_bytes(path),
            "mean_frame_bytes": float(np.mean(sizes)),
            "frames_sampled": len(sizes),
            "labels": [[k, v] for k, v in frequent[:_LISTED_LABELS]],
            "labels_distinct": len(labels),
            "frame_shape": shape,
            "sample": {"video": name, "label": label, "frames": n_frames},
        }
    finally:
        reader.close()


def _file_bytes(path: str) -> int:
    """The file's size: a ``stat``, or for a URL its object's listing entry."""
    if object_urls.is_url(path):
        from h5feed.producer.files import remote_files  # imports fsspec: only for URLs

        return remote_files.size(path)
    return os.path.getsize(path)


def _sample_frame_bytes(read: Any, videos: list[tuple[str, int, int]]) -> list[int]:
    """Stored bytes of up to ``_SIZE_SAMPLE_FRAMES`` frames, evenly spread over all frames."""
    starts = np.cumsum([0] + [n for _name, n, _label in videos])
    total = int(starts[-1])
    picks = np.unique(np.linspace(0, total - 1, min(total, _SIZE_SAMPLE_FRAMES)).astype(np.int64))
    sizes = []
    for frame in picks.tolist():
        v = int(np.searchsorted(starts, frame, side="right")) - 1
        (data,) = read(videos[v][0], [frame - int(starts[v])])
        sizes.append(int(np.asarray(data).nbytes))
    return sizes


def _bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # unreachable


def format_report(report: dict[str, Any]) -> str:
    """The report as aligned lines for a terminal."""
    per = report["frames_per_video"]
    median = per["median"]
    labels = ", ".join(f"{k}: {v}" for k, v in report["labels"])
    more = report["labels_distinct"] - len(report["labels"])
    if more > 0:
        labels += f", ... ({more} more labels)"
    h, w, c = report["frame_shape"]
    kind = "encoded" if report["encoded"] else "raw pixel"
    sample = report["sample"]
    return "\n".join(
        [
            report["file"],
            f"  layout       {report['layout']['kind']}: {report['layout_python']}",
            f"  videos       {report['videos']}, frames {report['frames']} (per video: min "
            f"{per['min']}, median {median:g}, max {per['max']})",
            f"  size         {_bytes(report['file_bytes'])} on disk; mean {kind} frame "
            f"{_bytes(report['mean_frame_bytes'])} (over {report['frames_sampled']} frames)",
            f"  frame shape  {h} x {w} x {c} (height x width x channels, first frame "
            f"{'decoded' if report['encoded'] else 'as stored'}, before resize)",
            f"  labels       {labels} ({report['labels_distinct']} distinct)",
            f"  sample       video {sample['video']!r}, label {sample['label']}, "
            f"{sample['frames']} frames",
        ]
    )


def parse_layout(text: str) -> LayoutSpec:
    """``--layout``: a layout name, or a JSON object such as ``{"kind": "flat", "jpeg": "x"}``."""
    if text.lstrip().startswith("{"):
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--layout is not valid JSON: {exc}") from exc
        return layouts.from_wire(fields)
    return layouts.resolve(text, "frames", "label")


def run(files: list[str], layout: str, as_json: bool) -> tuple[str, list[str]]:
    """The output for ``files`` (text, or one JSON array) and the error lines (one per file
    that could not be inspected; the others are still reported)."""
    spec = parse_layout(layout)
    reports: list[dict[str, Any]] = []
    errors: list[str] = []
    try:  # labels from directories: numbered among these files' directories, as a feed would
        spec, labels = directory_labels(spec, files)
    except ValueError as exc:
        return "", [str(exc)]
    for number, path in enumerate(files):
        try:
            reports.append(inspect_file(path, spec, labels[number] if labels else None))
        except Exception as exc:  # one bad file must not hide the report of the others
            errors.append(str(exc) if isinstance(exc, DataError) else f"{path}: {exc}")
            if as_json:
                reports.append({"file": path, "error": str(exc)})
    if as_json:
        return json.dumps(reports, indent=2), errors
    return "\n\n".join(format_report(r) for r in reports), errors
