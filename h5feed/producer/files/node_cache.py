"""A node-local cache of whole objects: the second epoch over ``s3://`` at local-disk speed.

A worker reads an object through ranged GETs (:mod:`~h5feed.producer.files.remote_files`);
every epoch pays them again, a round trip each. With a cache directory set in the producer's
own environment (:data:`DIR_ENV`, never from the wire), the first open of an object in a
process streams as before *and* queues a download of the whole object into that directory on
a thread of its own; once the copy is complete, the worker's next use of the file reopens it
from the copy (:func:`copy_ready`, called by :class:`~h5feed.producer.files.open_files.OpenFiles`),
and every later open on this node (another worker, a later job, the next epoch) reads the
copy: no request but the open's HEAD.

Guarantees:

1. The same bytes as the object: a copy is named by the object's URL, size, ETag and version
   (:func:`key`), written only from the object's own ranged GETs, each pinned to that ETag
   (a replaced object fails them, HTTP 412: the copy is dropped), to a temporary file in the
   directory, and renamed into place only when it holds exactly the object's size. An object
   replaced since has another key: its old copy is never read for it.
2. Opened as the URL is (:func:`open_copy`): a file object whose name is the URL, so every
   message names the URL, and the caller refuses its external links, virtual sources and
   external storage exactly as for the object (HDF5 would resolve them on this disk).
3. Bounded on disk: the copies total at most :data:`GIB_ENV` GiB (default
   :data:`DEFAULT_GIB`), least recently opened dropped first, and a download starts only when
   the disk keeps :data:`MIN_FREE_FRACTION` of itself free after it; an object larger than
   the bound is streamed, never copied. A copy open in a worker stays readable when dropped
   (its descriptor keeps it).
4. One download of an object per node: a process downloads under an exclusive ``flock`` on
   the copy's lock file; another that finds it held leaves it to that one. At most one
   download in flight per process, at most :data:`MAX_QUEUED` queued.
5. Never a read's failure: a download that fails (a request, the disk, a replaced object) is
   counted (:data:`stats`), named once on stderr, and its partial file removed; the reads go
   on streaming. Its requests and bytes count with the worker's others
   (:mod:`~h5feed.producer.files.request_counts`).
6. A directory another user could write into is refused (named once on stderr, the cache
   off): it must be this user's, not writable by group or others; created ``0o700``.
7. Nothing for a process without :data:`DIR_ENV`: no thread, no file, and the hot path's
   check is one test of an empty dict (:data:`streaming`, before :func:`copy_ready`).
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import glob
import hashlib
import os
import queue
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from h5feed.common import object_urls

__all__ = [
    "DEFAULT_GIB",
    "DIR_ENV",
    "GIB_ENV",
    "copy_path",
    "copy_ready",
    "directory",
    "drop",
    "key",
    "open_copy",
    "queue_download",
    "stats",
    "streaming",
    "wait_idle",
]

#: The producer's own settings: the cache's directory (unset: no cache) and its bound in GiB.
DIR_ENV = "H5FEED_NODE_CACHE"
GIB_ENV = "H5FEED_NODE_CACHE_GIB"
DEFAULT_GIB = 20.0
#: The part of the disk a download leaves free (else the object is streamed, not copied).
MIN_FREE_FRACTION = 0.05
MAX_QUEUED = 1024
#: How often a worker streaming an object looks for its copy (a stat per file at most this
#: often), and the bytes of one ranged GET of a download.
CHECK_EVERY_S = 1.0
CHUNK_BYTES = 8 << 20
_SUFFIX = ".h5"

#: What the cache did in this process (a figure for tests, logs and the bench).
stats: collections.Counter[str] = collections.Counter()
_warned: set[str] = set()
_lock = threading.Lock()
_queue: queue.SimpleQueue[tuple[str, str, int, Callable[[], Any]]] = queue.SimpleQueue()
_queued: set[str] = set()
_thread: threading.Thread | None = None
#: The URLs this process streams while their copy is made: the copy's path and when to look
#: for it next (read-only outside this module: empty, the hot path's test is its truth).
streaming: dict[str, tuple[str, float]] = {}


def _warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        print(f"h5feed node cache: {message}", file=sys.stderr, flush=True)


def directory(environ: Any = None) -> str | None:
    """The cache's directory from :data:`DIR_ENV` (created ``0o700``), or None: unset, or
    refused (guarantee 6, named once on stderr)."""
    given = (os.environ if environ is None else environ).get(DIR_ENV, "").strip()
    if not given:
        return None
    path = os.path.abspath(given)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError as exc:
        _warn_once(path, f"cannot use {path} ({exc}): off, objects are streamed")
        return None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        _warn_once(
            path,
            f"refused {path}: it must be this user's and not writable by group or others "
            "(a copy planted there would be read as the object): off, objects are streamed",
        )
        stats["refused_directory"] += 1
        return None
    return path


def bound_bytes(environ: Any = None) -> int:
    """The copies' bound in bytes (:data:`GIB_ENV`, default :data:`DEFAULT_GIB`);
    ValueError naming the variable for a value that is not a positive number."""
    text = (os.environ if environ is None else environ).get(GIB_ENV, "").strip()
    try:
        gib = float(text) if text else DEFAULT_GIB
    except ValueError:
        gib = -1.0
    if not gib > 0:
        raise ValueError(f"${GIB_ENV} must be a positive number of GiB, not {text!r}")
    return int(gib * (1 << 30))


def key(url: str, details: dict[str, Any]) -> str:
    """The name of the object's copy: a digest of its URL, size, ETag and version."""
    etag, version = object_urls.etag_and_version(details)
    name = f"{url}\0{details.get('size')}\0{etag}\0{version}"
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


def copy_path(root: str, url: str, details: dict[str, Any]) -> str | None:
    """The complete copy of the object described by ``details`` under ``root``, its use
    recorded (least recently opened dropped first), or None. An object without an ETag or
    version is never copied (nothing would tell its versions apart)."""
    if not _identified(details):
        return None
    path = os.path.join(root, key(url, details) + _SUFFIX)
    try:
        if os.stat(path).st_size != int(details["size"]):
            return None
        os.utime(path)
    except OSError:
        return None
    return path


def _identified(details: dict[str, Any]) -> bool:
    return any(object_urls.etag_and_version(details))


def drop(path: str) -> None:
    """Remove the copy at ``path`` (HDF5 could not open it: the disk damaged it), counted."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    stats["dropped_damaged"] += 1
    _warn_once("damaged", f"a copy HDF5 cannot open was removed ({path}); streaming")


class _NamedCopy:
    """A copy opened for h5py, named as its URL (h5py names a file object by its ``repr``)."""

    def __init__(self, path: str, url: str) -> None:
        self._raw, self._url = open(path, "rb", buffering=0), url  # noqa: SIM115 (h5py owns it)

    def __repr__(self) -> str:
        return self._url

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def open_copy(path: str, url: str) -> Any:
    """The copy at ``path`` as a file object named ``url`` (guarantee 2)."""
    stats["opened_copies"] += 1
    return _NamedCopy(path, url)


def queue_download(root: str, url: str, details: dict[str, Any], opener: Callable[[], Any]) -> None:
    """Download the object into ``root`` on this process's download thread (``opener()``:
    the object opened afresh, pinned to its ETag, with counted fetches and h5feed's retries:
    :func:`h5feed.producer.files.remote_files.open_for_copy`); the worker streaming it finds
    the copy with :func:`copy_ready`. Nothing when already queued here or not copyable."""
    if not _identified(details):
        return
    name = key(url, details)
    final = os.path.join(root, name + _SUFFIX)
    global _thread
    with _lock:
        streaming[url] = (final, time.monotonic() + CHECK_EVERY_S)
        if name in _queued or len(_queued) >= MAX_QUEUED:
            return
        _queued.add(name)
        if _thread is None:
            _thread = threading.Thread(target=_run, name="h5feed-node-cache", daemon=True)
            _thread.start()
    _queue.put((root, name, int(details["size"]), opener))


def copy_ready(url: str) -> bool:
    """Whether the object ``url``, streamed by this process, now has its complete copy (so
    the file may be reopened from it); looks at most every :data:`CHECK_EVERY_S`."""
    if not streaming:
        return False
    entry = streaming.get(url)
    if entry is None or time.monotonic() < entry[1]:
        return False
    path = entry[0]
    if os.path.exists(path):
        with _lock:
            streaming.pop(url, None)
        return True
    with _lock:
        if url in streaming:
            streaming[url] = (path, time.monotonic() + CHECK_EVERY_S)
    return False


def wait_idle(timeout_s: float) -> bool:
    """Whether this process's downloads, queued and in flight, all ended within ``timeout_s``
    (for tests and the bench; a worker never waits for them)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with _lock:
            if not _queued:
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def _run() -> None:
    while True:
        root, name, size, opener = _queue.get()
        try:
            _download(root, name, size, opener)
        except Exception as exc:  # guarantee 5: the reads go on streaming
            stats["failed_downloads"] += 1
            _warn_once("download", f"a download failed ({type(exc).__name__}: {exc}); streaming")
        finally:
            with _lock:
                _queued.discard(name)


def _download(root: str, name: str, size: int, opener: Callable[[], Any]) -> None:
    final = os.path.join(root, name + _SUFFIX)
    with _locked(os.path.join(root, name + ".lock")) as held:
        if not held or os.path.exists(final):
            return  # another process downloads it, or did
        if not _make_room(root, size, bound_bytes()):
            stats["too_large"] += 1
            return
        for stale in glob.glob(glob.escape(final) + ".part.*"):  # a process that died
            with contextlib.suppress(FileNotFoundError):  # writing it (the lock is ours now)
                os.unlink(stale)
        part = f"{final}.part.{os.getpid()}"
        try:
            with contextlib.closing(opener()) as source, open(part, "xb") as out:
                os.chmod(part, 0o600)
                done = 0
                while done < size:
                    chunk = source.read(min(CHUNK_BYTES, size - done))
                    if not chunk:
                        raise OSError(f"the body ended at {done} of {size} bytes")
                    out.write(chunk)
                    done += len(chunk)
            if os.path.getsize(part) != size:
                raise OSError(f"the copy holds {os.path.getsize(part)} of {size} bytes")
            os.replace(part, final)
            stats["downloads"] += 1
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(part)


@contextlib.contextmanager
def _locked(path: str) -> Iterator[bool]:
    """An exclusive, non-blocking ``flock`` on ``path``: whether it was taken."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def _make_room(root: str, size: int, bound: int) -> bool:
    """Drop the least recently opened copies until ``size`` more bytes fit the bound and the
    disk keeps its free part (guarantee 3); False when they cannot."""
    if size > bound:
        return False
    copies = []
    for entry in os.scandir(root):
        if entry.name.endswith(_SUFFIX) and entry.is_file(follow_symlinks=False):
            info = entry.stat(follow_symlinks=False)
            copies.append((info.st_mtime, info.st_size, entry.path))
    copies.sort()
    total = sum(size_ for _when, size_, _path in copies)
    usage = shutil.disk_usage(root)
    free, keep = usage.free, int(usage.total * MIN_FREE_FRACTION)
    while copies and (total + size > bound or free - size < keep):
        _when, dropped, path = copies.pop(0)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            stats["dropped_copies"] += 1
        total -= dropped
        free += dropped
    return total + size <= bound and free - size >= keep
