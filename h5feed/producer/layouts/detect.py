"""``layout="auto"``: recognise a file's layout, or say what it holds and how to describe it."""

from __future__ import annotations

import itertools

import h5py
import numpy as np

from h5feed.common.errors import DataError
from h5feed.common.layouts import Auto, Flat, FrameDatasets, Groups, LayoutSpec, Raw
from h5feed.producer.layouts import pack_index
from h5feed.producer.link_walk import member_names

#: How many top-level entries the no-match message lists before "... and N more".
_LISTED_ENTRIES = 20
#: Members of a group probed to recognise the frame-datasets layout.
_PROBED_MEMBERS = 4


def detect(h5: h5py.File, path: str, auto: Auto) -> LayoutSpec:
    """The layout of ``h5``, tried in this order with the default names:

    1. flat: a 1-D ``jpeg`` dataset and a ``video_offsets`` dataset;
    2. raw: an ``images`` uint8 dataset of 3 or 4 dimensions;
    3. groups: a top-level group holding a dataset ``auto.frames``;
    4. frame_datasets: a top-level group whose first members are 1-D uint8 datasets.

    Raises DataError naming the file, listing what it holds and how to describe it.
    """
    flat, raw = Flat(), Raw()
    jpeg = h5.get(flat.jpeg)
    if isinstance(jpeg, h5py.Dataset) and jpeg.ndim == 1 and flat.offsets in h5:
        return flat
    images = h5.get(raw.images)
    if isinstance(images, h5py.Dataset) and images.dtype == np.uint8 and images.ndim in (3, 4):
        return raw
    if pack_index.present(h5):  # written by `h5feed pack`: groups, no walk needed
        return Groups(frames=auto.frames, label=auto.label)
    names = member_names(h5, path, "top-level entries")
    groups = [h5[name] for name in names if isinstance(h5[name], h5py.Group)]
    for group in groups:
        if isinstance(group.get(auto.frames), h5py.Dataset):
            return Groups(frames=auto.frames, label=auto.label)
    for group in groups:
        members = list(itertools.islice(group.values(), _PROBED_MEMBERS))
        if members and all(_is_encoded_frame(m) for m in members):
            return FrameDatasets(label=auto.label)
    raise DataError(no_match_message(h5, auto), file=path)


def _is_encoded_frame(obj: object) -> bool:
    return isinstance(obj, h5py.Dataset) and obj.ndim == 1 and obj.dtype == np.uint8


def describe_entry(obj: object) -> str:
    """One line about a top-level entry: a dataset's dtype and shape, a group's members."""
    if isinstance(obj, h5py.Dataset):
        vlen = h5py.check_vlen_dtype(obj.dtype)
        dtype = f"vlen {vlen}" if vlen is not None else str(obj.dtype)
        return f"dataset {dtype} {obj.shape}"
    if isinstance(obj, h5py.Group):
        names = list(itertools.islice(obj.keys(), 3))
        first = f", e.g. {names[0]!r}: {describe_entry(obj[names[0]])}" if names else ""
        return f"group of {len(obj)} members{first}"
    return type(obj).__name__


def no_match_message(h5: h5py.File, auto: Auto) -> str:
    """What the file holds (top-level names, truncated) and which layout parameters to pass."""
    names = sorted(h5.keys())
    lines = [f"  /{n}: {describe_entry(h5[n])}" for n in names[:_LISTED_ENTRIES]]
    if len(names) > _LISTED_ENTRIES:
        lines.append(f"  ... and {len(names) - _LISTED_ENTRIES} more")
    if not names:
        lines.append("  (nothing: the file is empty)")
    return "\n".join(
        [
            "no known video layout recognised (layout='auto'). The file holds:",
            *lines,
            "Describe it with layout= (names are parameters; see README 'HDF5 layouts'):",
            f"  groups:         one group per video with a vlen-uint8 {auto.frames!r} dataset "
            f"and a {auto.label!r} attribute -> frames_key=..., label_key=... "
            "or h5feed.layouts.Groups(frames=..., label=...)",
            "  frame_datasets: one group per video, one 1-D uint8 JPEG dataset per frame -> "
            "h5feed.layouts.FrameDatasets(label=...)",
            "  raw:            pixels uint8 [N, H, W, C] + labels [N] (+ video offsets) -> "
            "h5feed.layouts.Raw(images=..., labels=..., offsets=...)",
            "  flat:           all JPEGs in one vlen-uint8 dataset + video offsets [V+1] + "
            "labels [V] -> h5feed.layouts.Flat(jpeg=..., offsets=..., labels=...)",
        ]
    )
