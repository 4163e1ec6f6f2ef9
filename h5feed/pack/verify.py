"""Checking a packed directory against its manifest (``h5feed pack --verify-only OUT``).

For every finished shard of the manifest: the file exists with the recorded size and SHA-256;
it opens with h5py; its ``classes`` attribute equals the manifest's; its groups are exactly the
manifest's videos, each with a ``frames`` dataset of the recorded length and the recorded
``label``; the file's ``h5feed_pack_version`` is the one this h5feed writes, each video's
``crc32`` holds one CRC32 per frame, and its last frame matches its CRC32 and decodes with
OpenCV (the last, because a truncated write loses the tail first). Shards are checked in
parallel threads (hashing, HDF5 reads and JPEG decoding release the GIL for their heavy
parts).
"""

from __future__ import annotations

import concurrent.futures
import os
import zlib
from collections.abc import Callable
from typing import Any

import cv2
import h5py
import numpy as np

from h5feed.common.errors import DataError
from h5feed.common.layouts import CRC_DATASET, PACK_VERSION, PACK_VERSION_ATTR
from h5feed.pack import manifest as manifest_io
from h5feed.pack.shards import CLASSES_ATTR, file_sha256
from h5feed.producer.files.dataset_checks import check_dataset
from h5feed.producer.files.read_limits import DatasetBounds
from h5feed.producer.layouts import pack_index

__all__ = ["verify_manifest", "verify_out"]


def _check_shard(out_dir: str, shard: dict[str, Any], classes: list[str]) -> list[str]:
    """Problems of one shard, each naming file and video (empty: the shard is sound)."""
    path = os.path.join(out_dir, shard["file"])
    if not os.path.isfile(path):
        return [f"{path}: missing"]
    size = os.path.getsize(path)
    if size != shard["bytes"]:
        return [f"{path}: {size} bytes, the manifest says {shard['bytes']} (truncated or changed)"]
    if file_sha256(path) != shard["sha256"]:
        return [f"{path}: SHA-256 differs from the manifest's (the file is corrupted or changed)"]
    problems: list[str] = []
    labels = {v["name"]: int(v["label"]) for v in shard["videos"]}
    try:
        with h5py.File(path, "r") as h5:
            stored = [str(c) for c in h5.attrs.get(CLASSES_ATTR, np.array([], dtype=object))]
            stored = [c.decode() if isinstance(c, bytes) else c for c in stored]
            version = h5.attrs.get(PACK_VERSION_ATTR)
            if version != PACK_VERSION:
                problems.append(
                    f"{path}: {PACK_VERSION_ATTR} is {version!r}, this h5feed writes {PACK_VERSION}"
                )
            if stored != classes:
                problems.append(f"{path}: classes {stored} differ from the manifest's {classes}")
            expected = {v["name"]: v["frames"] for v in shard["videos"]}
            extra = sorted(set(h5.keys()) - set(expected) - {pack_index.INDEX_GROUP})
            if extra:
                problems.append(f"{path}: groups not in the manifest: {extra[:5]}")
            problems.extend(_check_pack_index(h5, path, shard["videos"]))
            for name, frames in expected.items():
                problems.extend(_check_video(h5, path, name, frames, labels[name]))
    except OSError as exc:
        problems.append(f"{path}: cannot be read: {exc}")
    return problems


def _readable(dataset: h5py.Dataset) -> h5py.Dataset:
    """The readers' check of a dataset read whole (sizes; no data root here)."""
    return check_dataset(dataset, DatasetBounds(), None, whole=True)


def _check_pack_index(h5: h5py.File, path: str, videos: list[dict[str, Any]]) -> list[str]:
    """Problems of the shard's pack index (none for a shard written before it existed)."""
    try:
        packed = pack_index.read(h5, path, "frames", "label", _readable)
    except DataError as exc:
        return [f"{path}: {exc}"]
    expected = sorted((v["name"], int(v["frames"]), int(v["label"])) for v in videos)
    if packed is not None and packed != expected:
        return [f"{path}: the pack index differs from the manifest"]
    return []


def _check_video(h5: h5py.File, path: str, name: str, frames: int, label: int) -> list[str]:
    where = f"{path}, video {name!r}"
    if name not in h5 or "frames" not in h5[name]:
        return [f"{where}: missing"]
    dataset = h5[name]["frames"]
    if dataset.shape != (frames,):
        return [f"{where}: {dataset.shape[0]} frames, the manifest says {frames}"]
    if int(h5[name].attrs.get("label", -2)) != label:
        return [f"{where}: label {h5[name].attrs.get('label')!r}, the manifest says {label}"]
    crcs = h5[name].get(CRC_DATASET)
    if not isinstance(crcs, h5py.Dataset) or crcs.shape != (frames,):
        return [f"{where}: no {CRC_DATASET!r} dataset of {frames} CRC32s"]
    last = np.asarray(dataset[frames - 1], dtype=np.uint8)
    if zlib.crc32(last.data) != int(crcs[frames - 1]):
        return [f"{where}, frame {frames - 1}: fails its CRC32 (corrupt)"]
    image = cv2.imdecode(last, cv2.IMREAD_COLOR)
    if image is None:
        return [f"{where}, frame {frames - 1}: does not decode as an image"]
    return []


def verify_manifest(
    out_dir: str,
    manifest: dict[str, Any],
    jobs: int,
    progress: Callable[[int, int], None] | None = None,
) -> list[str]:
    """All problems found in the finished shards of ``manifest`` (empty: all sound).
    ``progress(videos, frames)`` is called as each shard is checked."""
    classes = list(manifest["classes"])
    shards = manifest["shards"]
    problems: list[str] = []
    with concurrent.futures.ThreadPoolExecutor(max(1, min(jobs, len(shards)))) as pool:
        futures = {pool.submit(_check_shard, out_dir, s, classes): s for s in shards}
        for future in concurrent.futures.as_completed(futures):
            problems.extend(future.result())
            if progress is not None:
                videos = futures[future]["videos"]
                progress(len(videos), sum(v["frames"] for v in videos))
    return sorted(problems)


def verify_out(out_dir: str, jobs: int) -> tuple[dict[str, Any], list[str]]:
    """Load the manifest of ``out_dir`` and verify its shards; raise ``FileNotFoundError``
    when there is no manifest."""
    manifest = manifest_io.load(out_dir)
    if manifest is None:
        raise FileNotFoundError(
            f"{out_dir!r} has no {manifest_io.MANIFEST_NAME}: not a directory written by "
            "h5feed pack"
        )
    return manifest, verify_manifest(out_dir, manifest, jobs)
