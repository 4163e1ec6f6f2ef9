"""The HDF5 layouts ``h5feed.dataset(layout=...)`` reads, as objects that carry their names.

``h5feed.layouts.Flat(jpeg="jpeg", offsets="video_offsets", labels="labels")`` and friends;
see :mod:`h5feed.common.layouts` for each layout and docs/data/layouts.md.
"""

import os
from collections.abc import Sequence

from h5feed.common.layouts import (
    LAYOUT_NAMES,
    Auto,
    Blobs,
    Flat,
    FrameDatasets,
    Groups,
    LayoutSpec,
    Raw,
    Video,
    classes_of,
)

__all__ = [
    "LAYOUT_NAMES",
    "Auto",
    "Blobs",
    "Flat",
    "FrameDatasets",
    "Groups",
    "LayoutSpec",
    "Raw",
    "Video",
    "directory_classes",
]


def directory_classes(
    files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
) -> tuple[str, ...]:
    """The classes ``Video(label="directory")`` numbers ``files`` by when ``classes`` is not
    given: the sorted distinct parent-directory names of the HDF5 files ``files`` names (a
    directory, searched recursively, a glob or a list, as ``h5feed.dataset`` takes them).
    Give the training set's to every split (``Video(classes=...)``): a class missing from
    the validation set then does not renumber the others."""
    from h5feed.consumer.hdf5.files import resolve_files  # the consumer's file search

    return classes_of(resolve_files(files))
