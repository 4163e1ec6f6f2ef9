"""An HDF5 feed's files as ``dataset()`` takes them (a file, directory, glob or list), resolved
once, in plan order, before any process starts."""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from typing import Any

from h5feed.common import object_urls

#: The suffixes of the HDF5 files a directory is searched for (case-insensitive).
_H5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")


def resolve_files(
    files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    root: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[str]:
    """The dataset's files, in plan order.

    A directory gives the ``*.h5``/``*.hdf5``/``*.hdf``/``*.he5`` files under it, searched
    recursively (``<root>/<class>/<id>.hdf5``; symbolic links to directories are not
    followed), sorted by path; a glob gives its matches, sorted; a list keeps its order (each
    entry may itself be a file, directory or glob). Paths are kept as given (not made
    absolute), so a batch's ``file`` is what the user wrote or the glob matched. Raises
    FileNotFoundError naming what matched nothing (for a directory: that it was searched
    recursively, for which suffixes), ValueError for an empty list (the iteration would
    otherwise wait for an index of no file).

    URLs (``s3://bucket/prefix/*.h5``, a prefix, a list of them; all entries URLs, or none)
    are expanded through fsspec with ``storage_options``
    (:func:`h5feed.consumer.hdf5.urls.resolve_urls`), kept whole (a URL names its object
    everywhere); ValueError for a list mixing URLs and paths.
    """
    if isinstance(files, (str, os.PathLike)):
        entries: Sequence[str | os.PathLike[str]] = [files]
    else:
        entries = list(files)
    if not entries:
        raise ValueError("h5feed: the list of files is empty")
    texts = [os.fspath(e) for e in entries]
    urls = [t for t in texts if object_urls.is_url(t)]
    if urls:
        if len(urls) != len(texts):
            raise ValueError("h5feed: give URLs or local paths, not both in one list")
        from h5feed.consumer.hdf5 import urls as url_files  # imports fsspec: only for URLs

        return url_files.resolve_urls(urls, root, storage_options)
    if root is not None:
        return _resolve_under(entries, root)
    resolved: list[str] = []
    for entry in entries:
        text = os.fspath(entry)
        if os.path.isdir(text):
            found = _hdf5_files_under(text)
        elif glob.has_magic(text):
            found = sorted(p for p in glob.glob(text) if os.path.isfile(p))
        elif os.path.isfile(text):
            found = [text]
        else:
            raise FileNotFoundError(f"h5feed: no such file or directory: {text!r}")
        if not found and os.path.isdir(text):
            suffixes = "/".join(f"*{s}" for s in _H5_SUFFIXES)
            raise FileNotFoundError(
                f"h5feed: directory {text!r} holds no HDF5 file: searched recursively for "
                f"{suffixes} (case-insensitive)"
            )
        if not found:
            raise FileNotFoundError(f"h5feed: {text!r} matches no HDF5 file")
        resolved.extend(found)
    if len(set(resolved)) != len(resolved):
        raise ValueError("h5feed: the same file is listed twice")
    return resolved


def _hdf5_files_under(directory: str) -> list[str]:
    """The HDF5 files (by suffix) anywhere under ``directory``, sorted by path."""
    found = []
    for parent, _dirs, names in os.walk(directory, followlinks=False):
        found += [os.path.join(parent, n) for n in names if n.lower().endswith(_H5_SUFFIXES)]
    return sorted(p for p in found if os.path.isfile(p))


def _resolve_under(entries: Sequence[str | os.PathLike[str]], root: str) -> list[str]:
    """Paths relative to ``root``, as the producers will resolve them under their data root.

    When this process sees ``root`` too, globs and directories are expanded there; when it
    does not (the files live only on the producers' hosts), entries must be plain relative
    paths, taken as they are: the producers report any that is missing, naming host and path.
    """
    if not os.path.isdir(root):
        texts = [os.fspath(e) for e in entries]
        bad = [t for t in texts if glob.has_magic(t) or os.path.isabs(t)]
        if bad:
            raise ValueError(
                f"h5feed: data_root {root!r} is not visible here, so files must be plain "
                f"relative paths, not globs or absolute paths: {bad[:3]}"
            )
        return texts
    resolved = resolve_files([os.path.join(root, os.fspath(e)) for e in entries])
    return [os.path.relpath(path, root) for path in resolved]
