"""The HDF5 layouts ``h5feed.dataset(layout=...)`` reads, as objects that carry their names.

``h5feed.layouts.Flat(jpeg="jpeg", offsets="video_offsets", labels="labels")`` and friends;
see :mod:`h5feed.common.layouts` for each layout and README "HDF5 layouts".
"""

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
    directory_classes,
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
