"""Confining a producer's files to its ``--data-root``: the paths a JOB names, and the HDF5
external links, virtual datasets and external raw storage inside those files.

A producer service (``h5feed produce --data-root DIR``) opens what a consumer names; whoever
can reach its ``--connect`` address could name ``../other/secret.h5`` or ``/etc/passwd``. A
worker without a data root (the local workers of a trainer) opens the trainer's own paths, as
given: none of this applies to it.

Guarantees, under a data root:

1. :func:`job_path` refuses an absolute path and one that goes up out of the root (``..``)
   from the name alone, before any file-system call; then it resolves the path with
   ``os.path.realpath`` and refuses one that lands outside the root (a symbolic link that
   points out). Its answer does not depend on whether the target exists, and a refused
   target is never opened: a refusal tells the consumer nothing about the file.
2. :func:`check_links` walks every link of an open file (iteratively, bounded in depth and
   count: :mod:`h5feed.producer.files.link_walk`; it follows no link and opens only groups) before
   any reader touches the file; an external link whose target file lies outside the root, or
   does not exist inside it (HDF5 would then search the working directory), is refused, and
   an allowed target file is checked the same way, at most :data:`MAX_LINKED_FILES` files on.
3. :func:`check_storage`, for every dataset a layout reader reads, before reading it (through
   :func:`h5feed.producer.files.dataset_checks.check_dataset`, which also follows each virtual
   source into its file): a virtual dataset whose source file lies outside the root (or is
   missing inside it: HDF5 would fill with zeros), or a dataset stored in external raw files
   outside the root (HDF5 resolves their names against the working directory), is refused.
4. Every refusal is a :class:`PathRefused` (a DataError) naming the path, the link or
   dataset, and the rule; the worker sends it to the consumer as ERROR and counts it.

URLs (``s3://...``) and a URL data root (``--data-root s3://bucket/prefix``) follow the same
rules, written for URLs in :mod:`h5feed.producer.files.url_confine`.

Limits: the root's own contents are trusted not to change between the check and the open (a
race needs write access to the root); HDF5's ``HDF5_EXT_PREFIX`` / ``HDF5_VDS_PREFIX``
environment variables, searched first by HDF5, must not be set for a producer service.
"""

from __future__ import annotations

import os

import h5py

from h5feed.common import object_urls
from h5feed.common.errors import DataError
from h5feed.producer.files import link_walk
from h5feed.producer.files.locking import open_read_only

_RULE = "a producer with --data-root opens only files under it"


class PathRefused(DataError):
    """A path outside the producer's data root (named with the rule); nothing was opened."""


def _under(root: str, path: str) -> bool:
    """``path`` (resolved) is ``root`` (resolved) or inside it."""
    return os.path.commonpath([root, path]) == root


def job_path(path: str, root: str | None) -> str:
    """The file to open for a JOB's ``path``: as given without a root; under a root, the
    resolved path, or PathRefused (see the module docstring, 1). A URL, or any path under a
    URL root: :func:`h5feed.producer.files.url_confine.job_url`."""
    if object_urls.is_url(path) or (root is not None and object_urls.is_url(root)):
        from h5feed.producer.files import url_confine  # it imports PathRefused from here

        return url_confine.job_url(path, root)
    if root is None:
        return path
    if "\x00" in path or not path:
        raise PathRefused(f"an empty path or one with a NUL byte is refused ({_RULE})", file=path)
    if os.path.isabs(path):
        raise PathRefused(
            f"an absolute path is refused: name files relative to the data root ({_RULE})",
            file=path,
        )
    normal = os.path.normpath(path)
    if normal == os.pardir or normal.startswith(os.pardir + os.sep):
        raise PathRefused(
            f"a path going up out of the data root ('..') is refused ({_RULE})", file=path
        )
    real_root = os.path.realpath(root)
    resolved = os.path.realpath(os.path.join(real_root, normal))
    if not _under(real_root, resolved):
        raise PathRefused(
            f"the path resolves outside the data root (a symbolic link) and is refused ({_RULE})",
            file=path,
        )
    return resolved


def _target(name: str, relative_to: str) -> str:
    """Where HDF5 looks first for a file named ``name`` by a link or a mapping."""
    return os.path.realpath(os.path.join(relative_to, name))


def _check_target(name: str, relative_to: str, root: str, what: str, file: str) -> str:
    """The resolved target of ``what`` (in ``file``), or PathRefused: outside the root, or
    missing inside it (HDF5 would then look elsewhere)."""
    target = _target(name, relative_to)
    if not _under(root, target):
        raise PathRefused(f"{what} points to {name!r}, outside the data root ({_RULE})", file=file)
    if not os.path.isfile(target):
        raise PathRefused(
            f"{what} points to {name!r}, which is not a file under the data root (HDF5 would "
            f"search elsewhere) ({_RULE})",
            file=file,
        )
    return target


#: Files a walk of external links may go through from the file a job names (each checked in
#: turn); a longer chain is refused.
MAX_LINKED_FILES = 16


def check_links(h5: h5py.File, root: str, seen: frozenset[str] = frozenset()) -> None:
    """Raise PathRefused for an external link of ``h5`` (or of a file it links to, checked in
    turn, at most :data:`MAX_LINKED_FILES` files deep) that leaves ``root`` (see the module
    docstring, 2); DataError when a walk passes its bounds
    (:mod:`h5feed.producer.files.link_walk`). A file read from object storage had every
    external link refused when it was opened (:mod:`h5feed.producer.files.remote_files`)."""
    if h5.driver == "fileobj":
        return
    real_root = os.path.realpath(root)
    file = os.path.realpath(h5.filename)
    seen = seen | {file}
    targets: list[str] = []
    for link, target_file, points_to in link_walk.external_links(h5, file):
        what = f"external link {link!r} (to object {points_to!r})"
        directory = os.path.dirname(file)
        targets.append(_check_target(target_file, directory, real_root, what, file))
    for target in dict.fromkeys(targets):
        if target in seen:
            continue
        if len(seen) >= MAX_LINKED_FILES:
            raise DataError(
                f"external links lead through more than {MAX_LINKED_FILES} files (to "
                f"{target!r}): refused, not followed",
                file=file,
            )
        with open_read_only(target) as linked:
            check_links(linked, real_root, seen)


def check_storage(dataset: h5py.Dataset, root: str | None) -> list[tuple[str, str]]:
    """The (file, dataset) sources of ``dataset`` when it is virtual (its own file for a
    source in the same file), resolved as HDF5 finds them; none for another dataset.

    With a ``root``: PathRefused when reading ``dataset`` itself would read a file outside it
    (see the module docstring, 3): a virtual source file outside it or missing inside it,
    external raw storage outside it. Without one, a source that is not a file where HDF5
    looks first is left out (HDF5 fills its part). The sources' own links, sources and
    storage are checked by the caller (:func:`h5feed.producer.files.dataset_checks.check_dataset`).
    A dataset of a file read from object storage, with or without a root: PathRefused for any
    source in another file or external storage
    (:func:`h5feed.producer.files.url_confine.remote_sources`).
    """
    if dataset.file.driver == "fileobj":
        from h5feed.producer.files import url_confine

        return url_confine.remote_sources(dataset)
    file = os.path.realpath(dataset.file.filename)
    name = dataset.name
    real_root = os.path.realpath(root) if root is not None else None
    sources: list[tuple[str, str]] = []
    if dataset.is_virtual:
        for source in dataset.virtual_sources():
            if source.file_name == ".":  # the dataset's own file
                sources.append((file, source.dset_name))
                continue
            what = f"virtual dataset {name!r} (source {source.dset_name!r})"
            directory = os.path.dirname(file)
            if real_root is not None:
                target = _check_target(source.file_name, directory, real_root, what, file)
            else:
                target = _target(source.file_name, directory)
                if not os.path.isfile(target):
                    continue
            sources.append((target, source.dset_name))
    if real_root is None:
        return sources
    for entry in dataset.external or ():
        stored = os.fsdecode(entry[0])
        target = _target(stored, os.getcwd())  # HDF5's default: the working directory
        if not _under(real_root, target):
            raise PathRefused(
                f"dataset {name!r} is stored in external file {stored!r}, outside the data "
                f"root ({_RULE})",
                file=file,
            )
    return sources
