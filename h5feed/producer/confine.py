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
2. :func:`check_links` walks every link of an open file (``H5Lvisit``: it follows no link
   and opens no object) before any reader touches the file; an external link whose target
   file lies outside the root, or does not exist inside it (HDF5 would then search the
   working directory), is refused, and an allowed target file is checked the same way.
3. :func:`check_dataset` is called by the layout readers on every dataset they read, before
   reading it: a virtual dataset whose source file lies outside the root (or is missing inside
   it: HDF5 would fill with zeros), or a dataset stored in external raw files outside the
   root (HDF5 resolves their names against the working directory), is refused.
4. Every refusal is a :class:`PathRefused` (a DataError) naming the path, the link or
   dataset, and the rule; the worker sends it to the consumer as ERROR and counts it.

Limits: the root's own contents are trusted not to change between the check and the open (a
race needs write access to the root); HDF5's ``HDF5_EXT_PREFIX`` / ``HDF5_VDS_PREFIX``
environment variables, searched first by HDF5, must not be set for a producer service.
"""

from __future__ import annotations

import os

import h5py

from h5feed.common.errors import DataError

_RULE = "a producer with --data-root opens only files under it"


class PathRefused(DataError):
    """A path outside the producer's data root (named with the rule); nothing was opened."""


def _under(root: str, path: str) -> bool:
    """``path`` (resolved) is ``root`` (resolved) or inside it."""
    return os.path.commonpath([root, path]) == root


def job_path(path: str, root: str | None) -> str:
    """The file to open for a JOB's ``path``: as given without a root; under a root, the
    resolved path, or PathRefused (see the module docstring, 1)."""
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


def check_links(h5: h5py.File, root: str, seen: frozenset[str] = frozenset()) -> None:
    """Raise PathRefused for an external link of ``h5`` (or of a file it links to, checked in
    turn) that leaves ``root`` (see the module docstring, 2)."""
    real_root = os.path.realpath(root)
    file = os.path.realpath(h5.filename)
    seen = seen | {file}
    links: list[bytes] = []

    def visit(name: bytes, info: h5py.h5l.LinkInfo) -> None:
        # Only collect: an exception raised inside an HDF5 callback comes out as SystemError.
        if info.type == h5py.h5l.TYPE_EXTERNAL:
            links.append(name)

    h5.id.links.visit(visit, info=True)
    targets: list[str] = []
    for name in links:
        target_file, target_object = h5.id.links.get_val(name)
        link, points_to = os.fsdecode(name), os.fsdecode(target_object)
        what = f"external link {link!r} (to object {points_to!r})"
        directory = os.path.dirname(file)
        targets.append(_check_target(os.fsdecode(target_file), directory, real_root, what, file))
    for target in dict.fromkeys(targets):
        if target not in seen:
            with h5py.File(target, "r") as linked:
                check_links(linked, real_root, seen)


def check_dataset(dataset: h5py.Dataset, root: str) -> None:
    """Raise PathRefused when reading ``dataset`` would read a file outside ``root``: a
    virtual dataset's source files, external raw storage (see the module docstring, 3)."""
    real_root = os.path.realpath(root)
    file = os.path.realpath(dataset.file.filename)
    name = dataset.name
    if dataset.is_virtual:
        for source in dataset.virtual_sources():
            if source.file_name == ".":  # the dataset's own file
                continue
            what = f"virtual dataset {name!r} (source {source.dset_name!r})"
            _check_target(source.file_name, os.path.dirname(file), real_root, what, file)
    for entry in dataset.external or ():
        stored = os.fsdecode(entry[0])
        target = _target(stored, os.getcwd())  # HDF5's default: the working directory
        if not _under(real_root, target):
            raise PathRefused(
                f"dataset {name!r} is stored in external file {stored!r}, outside the data "
                f"root ({_RULE})",
                file=file,
            )
