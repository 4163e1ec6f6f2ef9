"""Labels the trainer decides from the file list: one-video files labelled by their parent
directory (``h5feed.layouts.Video(label="directory")``), the UCF101/Kinetics form
``<root>/<class>/<id>.hdf5``.

Guarantees: every file's label is decided before any worker starts; a file whose directory
is not among ``classes`` (or a file with no directory to name its class) is a ValueError
naming it. Without ``classes``, they are the sorted directory names of this dataset's files
(:func:`h5feed.common.layouts.classes_of`) and are kept in the layout, so the resume
fingerprint (its ``layout`` part) and every worker see the same numbering; a split whose
directories differ (a class missing from validation) would number differently, which is
why the README says to give the training set's classes to both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from h5feed.common.layouts import DIRECTORY, LayoutSpec, Video, classes_of

#: Files named in an error before "and N more".
_NAMED = 3


def directory_labels(
    layout: LayoutSpec, files: Sequence[str]
) -> tuple[LayoutSpec, tuple[int, ...] | None]:
    """``layout`` with its classes filled in, and each file's label; ``(layout, None)`` for a
    layout whose labels the workers read."""
    if not isinstance(layout, Video) or layout.label != DIRECTORY:
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


def _listed(files: Sequence[str]) -> str:
    more = f" and {len(files) - _NAMED} more" if len(files) > _NAMED else ""
    return ", ".join(repr(f) for f in files[:_NAMED]) + more
