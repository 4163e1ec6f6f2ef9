"""An HDF5 feed's files on object storage, as the trainer sees them: URLs expanded (a glob, a
prefix, a list), sized and identified for the index cache, through fsspec.

The trainer lists and reads object metadata (so it needs list and read rights on the bucket);
it never opens an HDF5 file. Its fsspec options are ``storage_options=`` of ``dataset()``, or
its environment's (:mod:`h5feed.common.storage_config`); they stay in this process: workers
are sent URLs only, and take their own options from their own environment.

Guarantees:

1. :func:`resolve_urls` gives each entry's objects in plan order: a glob (``*``, ``?``,
   ``[``) its matching objects, sorted; a prefix ending in ``/`` (or one that is not an object)
   the HDF5 objects (by suffix, as a local directory) under it, sorted; an object itself.
   Every URL is parsed first (:func:`h5feed.common.object_urls.parse`: no ``::`` chaining, no
   ``file://``, no ``..``): ValueError naming it. FileNotFoundError names an entry that matches
   nothing; ValueError a URL listed twice, or one outside a URL ``data_root`` (an entry as
   written, before it is listed, and each object it gives). An ``http(s)://`` URL without a
   glob or a trailing ``/`` is an object, checked with a HEAD (a web server lists no
   prefixes, and fsspec's ``isfile`` would GET it).
2. Listings are read afresh on each call (fsspec's listing cache is dropped first), so a
   replaced object is seen by the next ``dataset()``.
3. :func:`file_stats` gives each URL's size and identity (URL, size, ETag, version), from one
   listing per distinct prefix (an ``http(s)://`` URL: its own HEAD); None when one cannot be
   listed (the index cache then misses: the workers report the object with its name).
4. :func:`warn_if_workers_differ`: a ``storage_options=`` that local workers would not see
   (their environment says otherwise) is a warning when the feed is made, not a puzzle at the
   first read.
"""

from __future__ import annotations

import glob
import posixpath
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from h5feed.common import object_urls, storage_config

__all__ = ["UrlStat", "file_stats", "resolve_urls", "warn_if_workers_differ"]

#: The suffixes of the HDF5 objects a prefix is searched for (as for a local directory).
_H5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")
#: Schemes whose servers list no prefixes: a URL names one file (guarantees 1 and 3).
_UNLISTED = ("http", "https")


class UrlStat(NamedTuple):
    """An object's size, and what identifies its content (a replaced object changes it):
    ``identity`` (URL, size, ETag, version), and the ETag and version (``""`` when the store
    has none) on their own."""

    st_size: int
    identity: str
    etag: str = ""
    version: str = ""


def _filesystem(scheme: str, storage_options: Mapping[str, Any] | None) -> Any:
    return storage_config.filesystem(scheme, storage_options)


def _parsed(text: str) -> object_urls.ObjectUrl:
    try:
        return object_urls.parse(text)
    except ValueError as exc:
        raise ValueError(f"h5feed: {exc}") from exc


def resolve_urls(
    entries: Sequence[str], root: str | None, storage_options: Mapping[str, Any] | None
) -> list[str]:
    """The objects of ``entries`` (URLs), in plan order (module docstring, 1 and 2)."""
    root_url = None
    if root is not None:
        if not object_urls.is_url(root):
            raise ValueError(
                f"h5feed: files given as URLs need a URL data_root (or none), not {root!r}"
            )
        root_url = _parsed(root)
    resolved: list[str] = []
    dropped: set[str] = set()
    for text in entries:
        url = _parsed(text)
        if root_url is not None and not object_urls.under(url, root_url):
            raise ValueError(f"h5feed: {text!r} is outside data_root {root!r} (not listed)")
        fs = _filesystem(url.scheme, storage_options)
        if url.scheme not in dropped:
            fs.invalidate_cache()  # guarantee 2: a listing of an earlier dataset() is stale
            dropped.add(url.scheme)
        if glob.has_magic(url.key):
            found = sorted(_url(url.scheme, p) for p, i in fs.glob(text, detail=True).items()
                           if i.get("type") == "file")  # fmt: skip
        elif url.scheme in _UNLISTED and not text.endswith("/"):
            try:
                fs.info(text)  # a HEAD
            except FileNotFoundError:
                raise FileNotFoundError(f"h5feed: {text!r} matches no object") from None
            found = [str(url)]
        elif text.endswith("/") or not fs.isfile(text):
            found = _hdf5_objects_under(fs, url)
            if not found:
                suffixes = "/".join(f"*{s}" for s in _H5_SUFFIXES)
                raise FileNotFoundError(
                    f"h5feed: {text!r} is no object and no prefix of HDF5 objects (searched "
                    f"for {suffixes}, case-insensitive)"
                )
        else:
            found = [str(url)]
        if not found:
            raise FileNotFoundError(f"h5feed: {text!r} matches no object")
        resolved.extend(found)
    if len(set(resolved)) != len(resolved):
        raise ValueError("h5feed: the same object is listed twice")
    if root_url is not None:
        outside = [u for u in resolved if not object_urls.under(_parsed(u), root_url)]
        if outside:
            raise ValueError(f"h5feed: URLs outside data_root {root!r}: {outside[:3]}")
    return resolved


def _url(scheme: str, found: str) -> str:
    """A path fsspec returned (``bucket/key``, without the scheme) as a URL."""
    return found if object_urls.is_url(found) else f"{scheme}://{found}"


def _hdf5_objects_under(fs: Any, url: object_urls.ObjectUrl) -> list[str]:
    try:
        names = fs.find(str(url) + "/")
    except FileNotFoundError:
        return []
    return sorted(_url(url.scheme, n) for n in names if n.lower().endswith(_H5_SUFFIXES))


def file_stats(
    urls: Sequence[str], storage_options: Mapping[str, Any] | None
) -> list[UrlStat] | None:
    """Each URL's :class:`UrlStat` (module docstring, 3), or None."""
    listings: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    stats = []
    try:
        for text in urls:
            url = object_urls.parse(text)
            if url.scheme in _UNLISTED:
                info = _filesystem(url.scheme, storage_options).info(text)
            else:
                parent = posixpath.dirname(f"{url.bucket}/{url.key}")
                listing = listings.get((url.scheme, parent))
                if listing is None:  # the filesystem, its options parsed, once per prefix
                    fs = _filesystem(url.scheme, storage_options)
                    fs.invalidate_cache(parent)
                    entries = fs.ls(f"{url.scheme}://{parent}", detail=True)
                    listing = {str(object_urls.parse(_url(url.scheme, e["name"]))): e
                               for e in entries}  # fmt: skip
                    listings[(url.scheme, parent)] = listing
                info = listing[str(url)]
            etag, version = object_urls.etag_and_version(info)
            size = int(info["size"])
            identity = f"{url}\0{size}\0{etag}\0{version}"
            stats.append(UrlStat(size, identity, etag, version))
    except Exception:  # any listing failure is a cache miss; the workers name the object
        return None
    return stats


def warn_if_workers_differ(
    urls: Sequence[str], storage_options: Mapping[str, Any] | None, local_workers: bool
) -> None:
    """Warn (UserWarning) when ``storage_options`` differ from what this process's
    environment gives, and local workers will read ``urls``: they take their options from that
    environment (they inherit it), never from ``storage_options``."""
    if storage_options is None or not local_workers or not urls:
        return
    if not object_urls.is_url(urls[0]):
        return  # local files: the options are not used
    scheme = object_urls.parse(urls[0]).scheme
    if storage_config.options_for(scheme, storage_options) != storage_config.options_for(scheme):
        warnings.warn(
            "h5feed: storage_options= is the trainer's own (to list and size the files); local "
            "workers read the objects with their environment's options "
            f"(${storage_config.STORAGE_ENV}, AWS_* ...), which differ: set them there too",
            UserWarning,
            stacklevel=4,
        )
