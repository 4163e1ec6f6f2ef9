"""The one check every dataset passes before a layout reader reads it.

:func:`check_dataset` is what :meth:`LayoutReader.readable
<h5feed.producer.layouts.base.LayoutReader.readable>` calls (and so what every reader, the pack
index included, goes through): a reader takes each dataset through it once, when it first
opens or indexes the dataset, never per frame.

Guarantees of :func:`check_dataset`:

1. **Sizes** (always, with or without a data root): the dataset's declared size and its chunks'
   uncompressed size are within the job's :class:`~h5feed.producer.files.read_limits.DatasetBounds`,
   checked from the declaration before a byte is read (DataError naming the file and dataset).
2. **Data root** (with one): reading the dataset reads no file outside the root
   (:func:`h5feed.producer.files.confine.check_storage`: virtual sources, external raw storage);
   PathRefused naming the file and the dataset or link.
3. **Recursively through virtual datasets**: each source of a virtual dataset (another file,
   or a dataset of the same file) is checked the same way: with a root, the source file's
   external links first (:func:`~h5feed.producer.files.confine.check_links`), then the source
   dataset
   (its sizes, its storage, its own virtual sources), and so on, at most
   :data:`MAX_VIRTUAL_DEPTH` hops and :data:`MAX_VIRTUAL_SOURCES` distinct (file, dataset)
   sources per check; past either, DataError naming the file and the bound. A refusal inside a
   source names the source file and link, and the virtual dataset it was reached from.

Without a root, a source that is not a file where HDF5 looks first is left out (HDF5 fills its
part); the rest is checked for sizes.
"""

from __future__ import annotations

import os

import h5py

from h5feed.common.errors import DataError
from h5feed.producer.files import confine
from h5feed.producer.files.locking import open_read_only
from h5feed.producer.files.read_limits import DatasetBounds

__all__ = ["MAX_VIRTUAL_DEPTH", "MAX_VIRTUAL_SOURCES", "check_dataset"]

#: Hops from a virtual dataset to its sources' sources; a longer chain is refused.
MAX_VIRTUAL_DEPTH = 8
#: Distinct (file, dataset) sources one check may visit, and mappings one virtual dataset may
#: hold (a VDS over 4,096 files is far beyond a video shard's).
MAX_VIRTUAL_SOURCES = 4096


def check_dataset(
    dataset: h5py.Dataset, bounds: DatasetBounds, root: str | None, *, whole: bool
) -> h5py.Dataset:
    """Return ``dataset`` once it passes (module docstring); ``whole``: the reader reads all of
    it at once (else rows, whose frames the layout bounds itself)."""
    try:
        _Walk(bounds, root).dataset(dataset, whole, 0)
    except DataError as exc:
        name = dataset.file.filename
        file = name if dataset.file.driver == "fileobj" else os.path.realpath(name)  # a URL
        if exc.file is None or exc.file == file:
            raise
        # in a source: name the file the reader opened too (the job names that one)
        kind = confine.PathRefused if isinstance(exc, confine.PathRefused) else DataError
        raise kind(f"{exc}, reached through virtual dataset {dataset.name!r}", file=file) from exc
    return dataset


class _Walk:
    """One check: the sources seen so far (each checked once)."""

    def __init__(self, bounds: DatasetBounds, root: str | None) -> None:
        self.bounds = bounds
        self.root = root
        self.seen: set[tuple[str, str]] = set()

    def dataset(self, dataset: h5py.Dataset, whole: bool, depth: int) -> None:
        # One read of the creation properties: the common case (a plain dataset) costs a few
        # microseconds, with no path resolved and no file object made.
        file = os.fsdecode(h5py.h5f.get_name(dataset.id))
        dcpl = dataset.id.get_create_plist()
        layout = dcpl.get_layout()
        chunks = dcpl.get_chunk() if layout == h5py.h5d.CHUNKED else None
        self.bounds.check(dataset, file, whole, chunks)
        virtual = layout == h5py.h5d.VIRTUAL
        if virtual and dcpl.get_virtual_count() > MAX_VIRTUAL_SOURCES:
            raise DataError(
                f"virtual dataset {dataset.name!r} has {dcpl.get_virtual_count()} mappings, "
                f"more than {MAX_VIRTUAL_SOURCES}: refused before they are listed",
                file=file,
            )
        if not virtual and dcpl.get_external_count() == 0:
            return  # reads nothing but its own file
        sources = confine.check_storage(dataset, self.root)
        for source in dict.fromkeys(sources):
            if source in self.seen:
                continue
            if depth + 1 > MAX_VIRTUAL_DEPTH or len(self.seen) >= MAX_VIRTUAL_SOURCES:
                raise DataError(
                    f"virtual dataset {dataset.name!r} leads to more than "
                    f"{MAX_VIRTUAL_DEPTH} levels or {MAX_VIRTUAL_SOURCES} sources of virtual "
                    "datasets: refused, not followed",
                    file=file,
                )
            self.seen.add(source)
            self.source(dataset, source, depth + 1)

    def source(self, virtual: h5py.Dataset, source: tuple[str, str], depth: int) -> None:
        """Check one source of ``virtual``: its file's links (with a root), its dataset."""
        path, name = source
        if path == os.path.realpath(virtual.file.filename):
            self.member(virtual.file, name, depth)
            return
        with open_read_only(path) as h5:
            if self.root is not None:
                confine.check_links(h5, self.root)
            self.member(h5, name, depth)

    def member(self, h5: h5py.File, name: str, depth: int) -> None:
        found = h5.get(name)
        if isinstance(found, h5py.Dataset):  # else HDF5 fills the mapping: nothing to read
            self.dataset(found, False, depth)
