"""Confining a producer's URLs to a ``--data-root s3://bucket/prefix``, and keeping a URL-backed
HDF5 file from reaching the producer's local disk.

The URL side of :mod:`h5feed.producer.files.confine` (which owns the rules for paths and calls
here for URLs). Whoever can reach a producer's ``--connect`` address could name any URL; the
producer's credentials would then read it. With a data root that is a URL:

1. :func:`job_url` parses the JOB's URL (:func:`h5feed.common.object_urls.parse`: one protocol,
   no fsspec chaining such as ``simplecache::`` or ``filecache::``, no ``file://``, no ``.`` /
   ``..`` / empty segment) and refuses one whose scheme, bucket or prefix (segment by segment)
   differs from the root's; a relative path is taken as a key under the root, checked the
   same way. A local path under a URL root, and a URL under a local root, are refused. Without
   a root (a trainer's own local workers) a URL is still parsed and refused if malformed or
   chained, so fsspec never reads a local file or a cache for it.
2. :func:`refuse_external_links` and :func:`remote_sources`, for every URL-backed file (with
   or without a root): an external link, a virtual dataset whose source is another file, and a
   dataset kept in external raw files are refused. HDF5 resolves those names on the local disk
   of the process that reads the file, never in the bucket.
3. Every refusal is a :class:`~h5feed.producer.files.confine.PathRefused` naming the URL, the
   link or dataset, and the rule; nothing of a refused URL is requested.
"""

from __future__ import annotations

import os

import h5py

from h5feed.common import object_urls
from h5feed.producer.files import link_walk
from h5feed.producer.files.confine import PathRefused

__all__ = ["is_remote", "job_url", "refuse_external_links", "remote_sources"]

_RULE = "a producer with a URL --data-root opens only objects under it"
_LOCAL_RULE = "HDF5 would resolve it on this host's disk, not in the bucket"


def job_url(path: str, root: str | None) -> str:
    """The URL to open for a JOB's ``path``, normalised; PathRefused (module docstring, 1)."""
    if root is not None and not object_urls.is_url(root):
        raise PathRefused(
            "a URL is refused by a producer whose --data-root is a local directory", file=path
        )
    if root is None:
        return str(_parsed(path))
    url = _parsed(path) if object_urls.is_url(path) else None
    try:
        root_url = object_urls.parse(root)
    except ValueError as exc:  # the producer's own flag: its start refuses it already
        raise PathRefused(f"the data root is not a valid URL: {exc}", file=path) from exc
    if url is None:  # a key relative to the root
        if path.startswith("/") or not path:
            raise PathRefused(
                f"an absolute or empty path is refused under a URL data root ({_RULE})", file=path
            )
        url = _parsed(root_url.join(path), shown=path)
    if not object_urls.under(url, root_url):
        raise PathRefused(f"the URL is outside the data root {root!r} ({_RULE})", file=path)
    return str(url)


def _parsed(text: str, shown: str | None = None) -> object_urls.ObjectUrl:
    try:
        return object_urls.parse(text)
    except ValueError as exc:
        raise PathRefused(str(exc), file=shown if shown is not None else text) from exc


def is_remote(h5: h5py.File) -> bool:
    """``h5`` was opened from a file object (:mod:`h5feed.producer.files.remote_files`)."""
    return bool(h5.driver == "fileobj")


def refuse_external_links(h5: h5py.File, url: str) -> None:
    """PathRefused at the first external link of the URL-backed ``h5`` (module docstring, 2),
    found by the bounded walk of :mod:`h5feed.producer.files.link_walk`."""
    for link, target_file, points_to in link_walk.external_links(h5, url):
        raise PathRefused(
            f"external link {link!r} (to {target_file!r}, object {points_to!r}) in a file read "
            f"from object storage is refused ({_LOCAL_RULE})",
            file=url,
        )


def remote_sources(dataset: h5py.Dataset) -> list[tuple[str, str]]:
    """The (file, dataset) sources of the URL-backed ``dataset`` (its own file only); PathRefused
    for a source in another file or external raw storage (module docstring, 2)."""
    file = os.path.realpath(dataset.file.filename)  # as dataset_checks names its own file
    name = dataset.name
    sources: list[tuple[str, str]] = []
    if dataset.is_virtual:
        for source in dataset.virtual_sources():
            if source.file_name != ".":
                raise PathRefused(
                    f"virtual dataset {name!r} reads file {source.file_name!r}: refused in a "
                    f"file read from object storage ({_LOCAL_RULE})",
                    file=dataset.file.filename,  # the URL (remote_files names the file object)
                )
            sources.append((file, source.dset_name))
    if dataset.external:
        raise PathRefused(
            f"dataset {name!r} is stored in external file {os.fsdecode(dataset.external[0][0])!r}:"
            f" refused in a file read from object storage ({_LOCAL_RULE})",
            file=dataset.file.filename,
        )
    return sources
