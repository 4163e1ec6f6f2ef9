"""The index of a feed's files, remembered by the consumer, so the next ``dataset()`` over the
same files knows its length (and its index fingerprint) before any worker starts.

The workers' per-file cache (``h5feed/producer/files/index_cache.py``) is keyed by the layout as
recognised after opening each file, which the consumer cannot do (it never opens HDF5
files). So the consumer keeps its own record: once an iteration's index is built, the whole
index is written under ``<index_cache>/feeds/``, keyed by every file's device and inode, size
and modification time (ns) (an object on storage: its URL, size, ETag and version), the
layout as given and the labels the trainer decides (one-video files:
``HdfConfig.file_labels``). Any change to a file, to the list or to the layout gives another
key, so a stale record is never used.

Guarantees: a record is written atomically and read bounded (at most ``_MAX_RECORD_BYTES``,
checked field by field); a missing, corrupt or unreadable record is a miss (the length is
then unknown until the workers index the files), never an error. Nothing is written when
``index_cache`` is off, or with ``data_root`` when the files are not visible here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
from collections.abc import Sequence

import msgpack

from h5feed.common import object_urls
from h5feed.common.system.atomic import atomic_file
from h5feed.consumer.hdf5 import urls as url_files  # fsspec is imported only for URLs
from h5feed.consumer.hdf5.urls import UrlStat
from h5feed.consumer.options import HdfConfig
from h5feed.consumer.plan.epoch_plan import Index

_log = logging.getLogger("h5feed.consumer")
#: A record larger than this is not read (about 10 million videos' worth).
_MAX_RECORD_BYTES = 1 << 30
_SUBDIR = "feeds"


def key(config: HdfConfig) -> str | None:
    """What identifies ``config``'s files as they are now (each one's device and inode, size
    and modification time, and the layout as given); None if one cannot be stat'ed here."""
    stats = file_stats(config)
    return None if stats is None else key_of(config, stats)


def file_stats(config: HdfConfig) -> Sequence[os.stat_result | UrlStat] | None:
    """One ``stat`` of each of ``config``'s files, or None if one cannot be stat'ed here.
    URLs (or paths under a URL ``data_root``): their size and identity (URL, size, ETag,
    version) from a listing (:func:`h5feed.consumer.hdf5.urls.file_stats`)."""
    root = config.data.data_root
    urls = _urls(config.files, root)
    if urls is not None:
        return url_files.file_stats(urls, config.data.storage_options)
    try:
        return [os.stat(os.path.join(root, path) if root else path) for path in config.files]
    except OSError:
        return None


def urls_of(config: HdfConfig) -> list[str] | None:
    """``config``'s files as URLs, when they are (or lie under a URL ``data_root``); None for
    local files."""
    return _urls(config.files, config.data.data_root)


def _urls(files: Sequence[str], root: str | None) -> list[str] | None:
    """``files`` as URLs, when they are (or lie under a URL root); None for local files."""
    if root is not None and object_urls.is_url(root):
        base = root.rstrip("/")
        return [f if object_urls.is_url(f) else f"{base}/{f}" for f in files]
    return list(files) if files and object_urls.is_url(files[0]) else None


def _identity(st: os.stat_result | UrlStat) -> str:
    if isinstance(st, UrlStat):
        return st.identity
    return f"{st.st_dev}:{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}"


def key_of(config: HdfConfig, stats: Sequence[os.stat_result | UrlStat]) -> str:
    """:func:`key` from stats already taken (:func:`file_stats`)."""
    ident = [json.dumps(config.layout.to_wire(), sort_keys=True)]
    if config.file_labels is not None:  # labels the trainer decides (a user's mapping)
        ident.append(json.dumps(list(config.file_labels)))
    # Device and inode name the file whatever path or link leads to it (a realpath per file
    # took 0.25 s at 10,000 files, on every iteration's start).
    ident += [_identity(st) for st in stats]
    return hashlib.sha256("\n".join(ident).encode()).hexdigest()


def _path(config: HdfConfig, files_key: str | None = None) -> pathlib.Path | None:
    cache = config.data.index_cache
    if not cache:
        return None
    if files_key is None:
        files_key = key(config)
    return None if files_key is None else pathlib.Path(cache) / _SUBDIR / files_key


def load(config: HdfConfig, files_key: str | None = None) -> Index | None:
    """The remembered index of ``config``'s files, or None (a miss); ``files_key``: theirs,
    if already taken (:func:`key`), so that the index is the one of exactly those files."""
    path = _path(config, files_key)
    if path is None:
        return None
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_MAX_RECORD_BYTES + 1)
        if len(raw) > _MAX_RECORD_BYTES:
            return None
        files = msgpack.unpackb(raw, raw=False)
        if not isinstance(files, list) or len(files) != len(config.files):
            return None
        videos = [
            [(str(name), int(frames), int(label)) for name, frames, label in entries]
            for entries in files
        ]
    except (OSError, ValueError, TypeError, msgpack.UnpackException):
        return None
    return Index.build(config.files, videos)


def store(config: HdfConfig, index: Index) -> None:
    """Remember ``index`` for ``config``'s files; failures only cost a later miss."""
    path = _path(config)
    if path is None:
        return
    per_file: list[list[tuple[str, int, int]]] = [[] for _ in config.files]
    for file_index, name, frames, label in zip(
        index.file_of_video.tolist(),
        index.names.tolist(),
        index.frames.tolist(),
        index.labels.tolist(),
        strict=True,
    ):
        per_file[file_index].append((name.decode(), frames, label))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(str(path)) as tmp, open(tmp, "wb") as out:
            out.write(msgpack.packb(per_file, use_bin_type=True))
    except OSError as exc:  # a read-only or full cache directory must not stop training
        _log.warning("feed index not remembered in %s: %s", path.parent, exc)
