"""Readers of the HDF5 layouts, one module each, behind one interface (:class:`LayoutReader`).

``open_reader(path, spec, root)`` opens a file once and returns the reader of its layout; with
:class:`~h5feed.common.layouts.Auto` the layout is recognised per file (``detect``). The
layout descriptions (names, wire form) are in :mod:`h5feed.common.layouts`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import h5py

from h5feed.common import object_urls
from h5feed.common.errors import FileReadError
from h5feed.common.layouts import (
    Auto,
    Blobs,
    Flat,
    FrameDatasets,
    Groups,
    LayoutSpec,
    Raw,
    Video,
)
from h5feed.producer.files import confine
from h5feed.producer.files.locking import open_read_only
from h5feed.producer.files.read_limits import DEFAULT_BOUNDS, DatasetBounds
from h5feed.producer.layouts.base import LayoutReader
from h5feed.producer.layouts.blobs import BlobsReader
from h5feed.producer.layouts.detect import detect
from h5feed.producer.layouts.flat import FlatReader
from h5feed.producer.layouts.frame_datasets import FrameDatasetsReader
from h5feed.producer.layouts.groups import GroupsReader
from h5feed.producer.layouts.raw import RawReader
from h5feed.producer.layouts.video import open_video

__all__ = ["READERS", "LayoutReader", "open_reader"]

#: The reader of each layout kind: a class, or a function choosing one (video: encoded or
#: pixels, from the dataset's type), called as (h5, path, spec, root, bounds).
READERS: dict[str, Callable[[h5py.File, str, Any, str | None, DatasetBounds], LayoutReader]] = {
    Groups.kind: GroupsReader,
    FrameDatasets.kind: FrameDatasetsReader,
    Raw.kind: RawReader,
    Flat.kind: FlatReader,
    Video.kind: open_video,
    Blobs.kind: BlobsReader,
}


def open_reader(
    path: str,
    spec: LayoutSpec,
    root: str | None = None,
    bounds: DatasetBounds = DEFAULT_BOUNDS,
) -> LayoutReader:
    """Open ``path`` read-only and return the reader of its layout (``spec``, or the one
    recognised when ``spec`` is :class:`Auto`). Close it with ``reader.close()``.

    Raises FileReadError naming the file and host when it cannot be opened (missing, not
    HDF5, an I/O error), DataError naming the file when its layout is not known.
    With a data ``root`` (``path`` already confined to it), the file's external links are
    checked before anything else touches the file (:mod:`h5feed.producer.files.confine`:
    PathRefused names what leaves it). The reader checks each dataset before reading it:
    its sizes against ``bounds``, its storage against the root
    (:mod:`h5feed.producer.files.dataset_checks`). A URL (``s3://...``) is opened through
    fsspec (:func:`h5feed.producer.files.remote_files.open_h5`: block-cached, its external
    links, virtual sources and external storage refused).
    """
    if object_urls.is_url(path):  # through fsspec (remote_files: the URL's own rules)
        from h5feed.producer.files import remote_files  # imports fsspec: only for URLs

        h5, heap = remote_files.open_h5_with_heap(path)
    else:
        h5, heap = _open_local(path), None  # h5py's own reads: see heap_reads
    try:
        if root is not None:  # before detect(), which follows the top-level links
            confine.check_links(h5, root)
        resolved = detect(h5, path, spec) if isinstance(spec, Auto) else spec
        reader = READERS[resolved.kind](h5, path, resolved, root, bounds)
        reader.heap = heap
        return reader
    except BaseException:
        h5.close()
        raise


def _open_local(path: str) -> h5py.File:
    try:
        return open_read_only(path)
    except OSError as exc:
        raise FileReadError(
            f"cannot open HDF5 file: {exc}", file=path, host=socket.gethostname()
        ) from exc
