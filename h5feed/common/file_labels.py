"""Labels the trainer decides from the file list, for one-video files
(``h5feed.layouts.Video``): from each file's parent directory (``label="directory"``, the
UCF101/Kinetics form ``<root>/<class>/<id>.hdf5``) or from the user's mapping of file names
to labels (``label={name: label}``, e.g. read from an annotation file).

Guarantees:

1. Every file's label is decided before any worker starts; a file whose directory is not
   among ``classes``, a file with no directory to name its class, a file the mapping does not
   name, two files of one name (with a mapping), or a class name not among ``classes`` is a
   ValueError naming it (the first few).
2. Without ``classes``, the classes are the sorted directory names of this dataset's files
   (:func:`h5feed.common.layouts.classes_of`), or the sorted class names of the mapping, and
   are kept in the layout, so every worker, the index cache and the resume fingerprint (its
   ``layout`` part; the labels themselves are its ``labels`` part) see the same numbering. A
   split whose directories differ (a class missing from validation) would be numbered
   differently: docs/data/layouts.md says to give the training set's classes to both.
3. A mapping is not sent to the workers: the layout they get says ``label=None`` (they
   report -1), and the trainer puts each file's label in its index as it arrives.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Mapping, Sequence

from h5feed.common.layouts import DIRECTORY, LayoutSpec, Video, classes_of

#: Files named in an error before "and N more".
_NAMED = 3


def directory_labels(
    layout: LayoutSpec, files: Sequence[str]
) -> tuple[LayoutSpec, tuple[int, ...] | None]:
    """``layout`` as the workers get it (classes filled in, no mapping), and each file's
    label; ``(layout, None)`` for a layout whose labels the workers read."""
    if not isinstance(layout, Video):
        return layout, None
    if isinstance(layout.label, Mapping):
        return _mapped(layout, layout.label, files)
    if layout.label != DIRECTORY:
        return layout, None
    no_class = [f for f in files if not layout.class_of(f)]
    if no_class:
        raise ValueError(
            f"h5feed: labels come from each file's parent directory (Video(label="
            f"{DIRECTORY!r})), but {_listed(no_class)} is not in a directory: lay files out as "
            "<root>/<class>/<id>.hdf5, or give Video(label=None) or an attribute's name"
        )
    classes = layout.classes if layout.classes is not None else classes_of(files)
    number = {name: i for i, name in enumerate(classes)}
    unknown = [f for f in files if layout.class_of(f) not in number]
    if unknown:
        raise ValueError(
            f"h5feed: {_listed(unknown)} is in a directory not among classes= "
            f"({len(classes)} classes: {list(classes[:_NAMED])}...); add the class, or "
            "leave the file out"
        )
    labels = tuple(number[layout.class_of(f)] for f in files)
    return dataclasses.replace(layout, classes=tuple(classes)), labels


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _mapped(
    layout: Video, mapping: Mapping[str, int | str], files: Sequence[str]
) -> tuple[LayoutSpec, tuple[int, ...]]:
    stems = [_stem(f) for f in files]
    twice = [s for s, n in collections.Counter(stems).items() if n > 1]
    if twice:
        raise ValueError(
            f"h5feed: a label mapping names files by their name without suffix, and "
            f"{_listed(twice)} names more than one file"
        )
    missing = [f for f, s in zip(files, stems, strict=True) if s not in mapping]
    if missing:
        raise ValueError(f"h5feed: the label mapping has no label for {_listed(missing)}")
    values = [mapping[s] for s in stems]
    names = sorted({v for v in values if isinstance(v, str)})
    classes = layout.classes if layout.classes is not None else (tuple(names) or None)
    number = {name: i for i, name in enumerate(classes or ())}
    unknown = [n for n in names if n not in number]
    if unknown:
        raise ValueError(f"h5feed: the label mapping's classes {_listed(unknown)} are not "
                         "among classes=")  # fmt: skip
    labels = tuple(number[v] if isinstance(v, str) else v for v in values)
    return dataclasses.replace(layout, label=None, classes=None), labels


def _listed(items: Sequence[str]) -> str:
    more = f" and {len(items) - _NAMED} more" if len(items) > _NAMED else ""
    return ", ".join(repr(f) for f in items[:_NAMED]) + more
