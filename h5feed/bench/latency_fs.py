"""A test-only fsspec filesystem: local files served as objects, each request delayed by a
fixed latency (``h5feed bench object-storage --server local-latency``): the speed of h5feed's
object-storage path against a store that costs a round trip per request and no CPU, which
moto's pure-Python server on the same cores cannot show.

URLs are ``h5feed-bench://BUCKET/KEY``, read as ``ROOT/BUCKET/KEY`` on this host. Workers open
them through exactly the code an ``s3://`` URL takes (:mod:`h5feed.producer.files.remote_files`:
``fs.open(..., cache_type="blockcache")``, one ``_fetch_range`` per block, read-ahead's pool
included); only the filesystem under it differs.

The trust boundary (a URL is a peer's claim; this scheme reads the local disk, which a URL
must never reach: :mod:`h5feed.common.object_urls`, guarantee 1):

1. The scheme is refused by :func:`h5feed.common.object_urls.parse` unless
   :data:`~h5feed.common.object_urls.BENCH_ENV` is set in that process's environment, and
   registered with fsspec (:func:`h5feed.common.storage_config.filesystem`) only then. The
   bench sets it in its own process, which its local workers inherit; nothing else sets it,
   and a producer whose operator did not set it refuses such a URL like ``file://``.
2. With it set, a URL reads only under the variable's ``root`` (parsing refuses ``..`` and
   empty segments; a path is joined under the root and checked to stay there).

Each request (a block's ranged read, or an ``info``) sleeps ``latency_ms`` in the thread that
asks, so requests in flight together overlap as with a distant store. An object's ETag is
its size and modification time.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from h5feed.common.object_urls import BENCH_ENV, BENCH_SCHEME

__all__ = ["LatencyFileSystem", "settings"]


def settings() -> tuple[str, float]:
    """(root, seconds per request) from :data:`BENCH_ENV` (a JSON object ``{"root": ...,
    "latency_ms": ...}``); ValueError when it is not set or not such an object."""
    text = os.environ.get(BENCH_ENV, "")
    try:
        said = json.loads(text)
        root, latency_ms = str(said["root"]), float(said["latency_ms"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"${BENCH_ENV} must be {{'root': DIR, 'latency_ms': MS}}") from exc
    if not os.path.isdir(root) or not 0 <= latency_ms <= 10_000:
        raise ValueError(f"${BENCH_ENV}: no directory {root!r}, or latency outside [0, 10 s]")
    return os.path.realpath(root), latency_ms / 1000


class LatencyFileSystem(AbstractFileSystem):  # type: ignore[misc]  # fsspec is untyped
    """Local files under a root as objects, each request delayed (module docstring)."""

    protocol = BENCH_SCHEME
    root_marker = ""
    cachable = False  # its settings are read when made: a later run's root or latency holds

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.root, self.latency_s = settings()

    def local(self, path: str) -> str:
        """The local path of ``path`` (``bucket/key``), under the root or ValueError."""
        joined = os.path.realpath(os.path.join(self.root, self._strip_protocol(path)))
        if joined != self.root and not joined.startswith(self.root + os.sep):
            raise ValueError(f"{path!r} leaves the bench's root")
        return joined

    def _entry(self, name: str, local: str) -> dict[str, Any]:
        st = os.stat(local)
        if os.path.isdir(local):
            return {"name": name, "size": 0, "type": "directory"}
        etag = f'"{st.st_size:x}-{st.st_mtime_ns:x}"'
        return {"name": name, "size": st.st_size, "type": "file", "ETag": etag}

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        time.sleep(self.latency_s)  # a HEAD: one round trip
        name = self._strip_protocol(path)
        local = self.local(name)
        if not os.path.exists(local):
            raise FileNotFoundError(path)
        return self._entry(name, local)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        time.sleep(self.latency_s)  # a listing: one round trip
        name = self._strip_protocol(path)
        local = self.local(name)
        if not os.path.isdir(local):
            entries = [self._entry(name, local)] if os.path.exists(local) else []
        else:
            entries = [
                self._entry(f"{name}/{child}".lstrip("/"), os.path.join(local, child))
                for child in sorted(os.listdir(local))
            ]
        if not entries and not os.path.exists(local):
            raise FileNotFoundError(path)
        return entries if detail else [e["name"] for e in entries]

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, **kwargs: Any) -> Any:
        if mode != "rb":
            raise NotImplementedError("the bench's objects are read-only")
        return _LatencyFile(self, path, mode, block_size, **kwargs)


class _LatencyFile(AbstractBufferedFile):  # type: ignore[misc]  # fsspec is untyped
    def __init__(self, fs: LatencyFileSystem, path: str, *args: Any, **kwargs: Any) -> None:
        self._fd = os.open(fs.local(path), os.O_RDONLY)
        super().__init__(fs, path, *args, **kwargs)

    def _fetch_range(self, start: int, end: int) -> bytes:
        time.sleep(self.fs.latency_s)  # a ranged GET: one round trip
        return os.pread(self._fd, max(0, end - start), start)

    def close(self) -> None:
        super().close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
