"""The per-file index that ``h5feed pack`` stores, so one read replaces a walk over the groups.

Format (pack version 2, root attribute ``h5feed_pack_version = 2``): a root group
``h5feed_index`` with three 1-D datasets of the same length, one entry per video, in the order
an INDEX lists them (sorted group names). No dataset is called ``frames``, so a reader that
does not know the index (an older h5feed, or a walk) does not take the group for a video:

* ``names``: variable-length UTF-8 strings, the videos' group names (sorted, unique);
* ``frame_counts``: int64, each video's frame count (>= 1);
* ``labels``: int64, each video's ``label`` attribute.

Guarantees of :func:`read`:

1. A file without the version attribute or the group (any other file) gives None: the caller
   walks the groups as before.
2. Everything is checked before it is trusted: the datasets' kinds, dtypes and equal lengths
   (at most :data:`MAX_VIDEOS` entries), then each dataset passes the reader's check
   (sizes, data root: :mod:`h5feed.producer.files.dataset_checks`), all before anything is read;
   then frame counts >= 1, names unique, sorted, non-empty, and exactly the file's other
   top-level names (one link listing, no group opened). An index that fails a check raises
   DataError naming the file and what is inconsistent: it is never silently replaced by a
   walk (the file was changed after it was packed, or is damaged, and says so).
3. It applies only to the names ``h5feed pack`` writes (``frames``, ``label``); other names
   give None (walk).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import h5py
import numpy as np

from h5feed.common.errors import DataError
from h5feed.common.layouts import PACK_VERSION, PACK_VERSION_ATTR
from h5feed.producer.files.link_walk import member_names

__all__ = ["INDEX_GROUP", "MAX_VIDEOS", "PACK_VERSION", "PACK_VERSION_ATTR", "read", "write"]

INDEX_GROUP = "h5feed_index"
#: Videos one file's index may list: far above any real shard (a 1 GiB shard of 1-frame
#: videos holds ~100,000), low enough that a forged length costs at most ~100 MB.
MAX_VIDEOS = 1_000_000
_FIELDS = ("names", "frame_counts", "labels")


def present(h5: h5py.File) -> bool:
    """Whether ``h5`` says it has a pack index (version attribute and group)."""
    version = h5.attrs.get(PACK_VERSION_ATTR)
    try:
        is_v2 = version is not None and int(version) == PACK_VERSION
    except (TypeError, ValueError):
        return False
    return is_v2 and INDEX_GROUP in h5


def write(h5: h5py.File, videos: Sequence[tuple[str, int, int]]) -> None:
    """Store the index of ``videos`` (name, frames, label) in ``h5`` and mark it version 2."""
    ordered = sorted(videos, key=lambda v: v[0])
    group = h5.create_group(INDEX_GROUP)
    names = np.array([v[0] for v in ordered], dtype=h5py.string_dtype())
    group.create_dataset("names", data=names, dtype=h5py.string_dtype())
    group.create_dataset("frame_counts", data=np.array([v[1] for v in ordered], np.int64))
    group.create_dataset("labels", data=np.array([v[2] for v in ordered], np.int64))
    h5.attrs[PACK_VERSION_ATTR] = np.int64(PACK_VERSION)


def read(
    h5: h5py.File,
    path: str,
    frames_key: str,
    label_key: str | None,
    readable: Callable[[h5py.Dataset], h5py.Dataset],
) -> list[tuple[str, int, int]] | None:
    """The videos (name, frames, label) of ``h5`` from its pack index, in index order; None
    when it has none (or other names are asked for); DataError when it is inconsistent.
    ``readable`` checks each dataset before it is read (the reader's
    :meth:`~h5feed.producer.layouts.base.LayoutReader.readable_whole`: sizes, data root)."""
    if frames_key != "frames" or label_key != "label" or not present(h5):
        return None
    group = h5[INDEX_GROUP]
    if not isinstance(group, h5py.Group):
        raise _bad(path, f"{INDEX_GROUP!r} is not a group")
    datasets = {}
    for field in _FIELDS:
        dataset = group.get(field)
        if not isinstance(dataset, h5py.Dataset) or dataset.ndim != 1:
            raise _bad(path, f"{INDEX_GROUP}/{field} is missing or not a 1-D dataset")
        datasets[field] = dataset
    lengths = {field: d.shape[0] for field, d in datasets.items()}
    if len(set(lengths.values())) != 1:
        raise _bad(path, f"its datasets differ in length: {lengths}")
    count = lengths["names"]
    if not 1 <= count <= MAX_VIDEOS:
        raise _bad(path, f"it lists {count} videos (1..{MAX_VIDEOS} allowed)")
    if h5py.check_string_dtype(datasets["names"].dtype) is None:
        raise _bad(path, "names is not a string dataset")
    for field in ("frame_counts", "labels"):
        if datasets[field].dtype.kind not in "iu":
            raise _bad(path, f"{field} is {datasets[field].dtype}, not integers")
    for dataset in datasets.values():  # after the cheap checks, before any read
        readable(dataset)
    names = [str(n) for n in datasets["names"].asstr()[()]]
    frames = np.asarray(datasets["frame_counts"][()], np.int64)
    labels = np.asarray(datasets["labels"][()], np.int64)
    if int(frames.min()) < 1:
        raise _bad(path, "a video has fewer than 1 frame")
    if any(not n for n in names) or names != sorted(set(names)):
        raise _bad(path, "names are not unique, sorted and non-empty")
    # one link listing (bounded), no opening
    stored = [k for k in member_names(h5, path, "videos", MAX_VIDEOS + 1) if k != INDEX_GROUP]
    if stored != names:
        missing = sorted(set(names) - set(stored))[:3]
        extra = sorted(set(stored) - set(names))[:3]
        raise _bad(path, f"it does not match the file's groups (missing {missing}, extra {extra})")
    return list(zip(names, frames.tolist(), labels.tolist(), strict=True))


def _bad(path: str, why: str) -> DataError:
    return DataError(
        f"the pack index ({INDEX_GROUP}, {PACK_VERSION_ATTR}={PACK_VERSION}) is inconsistent: "
        f"{why}; the file was changed after `h5feed pack` wrote it, or is damaged",
        file=path,
    )
