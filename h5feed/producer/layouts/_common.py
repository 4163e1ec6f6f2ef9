"""Helpers shared by the layout readers: reading rows, natural order, labels, offsets."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence

import h5py
import numpy as np

from h5feed.common.errors import DataError

#: Video names of the index-based layouts (raw, flat): the number, at least this many digits.
VIDEO_NAME_DIGITS = 6
#: A label attribute larger than this is refused before it is read (one integer is 8 bytes).
_MAX_LABEL_BYTES = 64


def video_name(number: int) -> str:
    """The name of video ``number`` in the raw and flat layouts, e.g. ``"000012"``."""
    return f"{number:0{VIDEO_NAME_DIGITS}d}"


def video_number(name: str, count: int, path: str) -> int:
    """The inverse of :func:`video_name`; DataError for a name that is no video of the file."""
    if name.isdigit() and int(name) < count:
        return int(name)
    raise DataError(f"no video {name!r} in this file ({count} videos)", file=path, video=name)


def natural_key(name: str) -> tuple[tuple[str | int, ...], str]:
    """Sort key ordering digit runs by value: ``frame_2`` < ``frame_10`` < ``frame_10b``.

    ``re.split`` with a capturing group alternates text (even positions) and digit runs (odd
    positions), so two keys always compare text with text and numbers with numbers; the name
    itself breaks ties (``f01`` before ``f1``).
    """
    parts = re.split(r"(\d+)", name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name


def read_rows(dataset: h5py.Dataset, rows: Sequence[int]) -> list[np.ndarray]:
    """The elements of a 1-D (or first-axis) dataset at ``rows`` (any order, repeats allowed).

    One slice read when the rows are evenly spaced and increasing (the usual clip), otherwise
    one read of the distinct rows (h5py needs increasing, unique indices).
    """
    first, last = rows[0], rows[-1]
    step = rows[1] - rows[0] if len(rows) > 1 else 1
    if step > 0 and all(b - a == step for a, b in itertools.pairwise(rows)):
        return list(dataset[first : last + 1 : step])
    distinct = sorted(set(rows))
    read = dict(zip(distinct, dataset[distinct], strict=True))
    return [read[i] for i in rows]


def integer_value(value: object, what: str, path: str, video: str | None = None) -> int:
    """One integer (a label), or DataError naming the file and video."""
    array = np.asarray(value)
    if array.size != 1 or not np.issubdtype(array.dtype, np.integer):
        raise DataError(f"{what} must be one integer, got {value!r}", file=path, video=video)
    return int(array.reshape(()))


def group_label(group: h5py.Group, name: str | None, path: str, video: str) -> int:
    """The integer attribute ``name`` of a video's group; -1 when ``name`` is None."""
    if name is None:
        return -1
    if name not in group.attrs:
        raise DataError(f"video has no {name!r} attribute", file=path, video=video)
    return label_attribute(group, name, path, video)


def label_attribute(owner: h5py.HLObject, name: str, path: str, video: str) -> int:
    """The integer attribute ``name`` of ``owner`` (present), its declared size checked
    before it is read (a label is one integer: an attribute of megabytes is refused)."""
    size = owner.attrs.get_id(name).get_storage_size()
    if size > _MAX_LABEL_BYTES:
        raise DataError(
            f"label {name!r} must be one integer, got an attribute of {size} bytes",
            file=path,
            video=video,
        )
    return integer_value(owner.attrs[name], f"label {name!r}", path, video)


def dataset_at(h5: h5py.File, name: str, path: str, hint: str) -> h5py.Dataset:
    """The dataset ``name``, or DataError saying it is missing and how to name another."""
    found = h5.get(name)
    if not isinstance(found, h5py.Dataset):
        what = "a group" if found is not None else "missing"
        raise DataError(f"dataset {name!r} is {what}; {hint}", file=path)
    return found


def read_offsets(dataset: h5py.Dataset, total: int, path: str) -> np.ndarray:
    """Video offsets [V+1]: integers from 0 to ``total``, strictly increasing (no empty video).

    Raises DataError naming the file (and the first empty video) otherwise.
    """
    offsets = np.asarray(dataset[()])
    name = dataset.name
    if offsets.ndim != 1 or len(offsets) < 2 or not np.issubdtype(offsets.dtype, np.integer):
        raise DataError(
            f"{name} must be a 1-D integer dataset [videos + 1], got {offsets.dtype} "
            f"{offsets.shape}",
            file=path,
        )
    offsets = offsets.astype(np.int64)
    if offsets[0] != 0 or offsets[-1] != total:
        raise DataError(
            f"{name} must run from 0 to the number of frames ({total}), "
            f"got {offsets[0]} .. {offsets[-1]}",
            file=path,
        )
    empty = np.flatnonzero(np.diff(offsets) <= 0)
    if len(empty):
        raise DataError(
            f"{name} is not strictly increasing: video {int(empty[0])} has no frames",
            file=path,
            video=video_name(int(empty[0])),
        )
    return offsets


def read_labels(
    h5: h5py.File,
    name: str | None,
    count: int,
    path: str,
    layout: str,
    readable: Callable[[h5py.Dataset], h5py.Dataset],
) -> np.ndarray:
    """Labels [count] from dataset ``name`` (int64), or all -1 when ``name`` is None;
    ``readable`` checks the dataset before it is read (the reader's data root)."""
    if name is None:
        return np.full(count, -1, np.int64)
    dataset = dataset_at(
        h5, name, path, f"give the labels' name, or labels=None for unlabelled data ({layout})"
    )
    labels = np.asarray(readable(dataset)[()])
    if labels.shape != (count,) or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(
            f"labels {name!r} must be {count} integers (one per video), got {labels.dtype} "
            f"{labels.shape}",
            file=path,
        )
    return labels.astype(np.int64)
