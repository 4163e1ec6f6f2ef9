"""What decides a stream, as a resume state stores it: the fingerprint, and its check.

Guarantees:

1. The fingerprint covers what decides the batches: the files (their names in plan order,
   ``files``, known up front; the index — every video's name, frame count and label —
   ``index``, known once the workers indexed the files), seed, shuffle, batch size,
   ``drop_remainder``, clips per video and their placement, the clip and layout options,
   ``shard`` and its remainder rule (``shard_remainder``, stored when it is not the default
   "drop", so states saved before the rule existed still resume), a source and its
   arguments, and the labels the trainer gives one-video files (``labels``: from their
   directories or the user's mapping). Not the number of workers,
   prefetch, timeouts, ``listen``, metrics or memory options: resuming with another worker
   count gives the same batches. The files' directory is not part of it (only their names),
   so a dataset moved elsewhere still resumes.
2. Each part is stored, not only one hash, so a mismatch (:class:`~h5feed.common.errors.
   ResumeError`) names every field that differs. The up-front parts are checked when the
   dataset is made; ``index`` when the plan starts (or up front when the index is known from
   :mod:`h5feed.consumer.hdf5.known_index`).
3. Files on object storage add what identifies each object's content (:func:`object_parts`):
   ``objects``, a digest of every object's name, ETag and version (VersionId) in plan order,
   and, when they fit in :data:`_MAX_TEXT` characters, ``object_etags``: each object's URL,
   ETag and version, so that a state saved before an object was overwritten is refused
   naming its URL (:func:`differences`). Objects are compared by name, as files are: a
   dataset copied to another bucket under the same names, with the same ETags and versions,
   resumes. (Local files have no such part: a file changed in place is refused when its
   index differs.)
4. A stored fingerprint is a claim of a file or a caller: :func:`check_shape` refuses one
   that is not a flat map of at most :data:`MAX_KEYS` short names to scalars or short lists
   of scalars, before it is compared (no RecursionError, no cost beyond its bounds).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from h5feed.common.errors import ResumeError
from h5feed.consumer.options import FeedConfig
from h5feed.consumer.plan.epoch_plan import Index

#: Names in a fingerprint (:func:`fingerprint` writes about 15), the longest of a name and of
#: a text value (a source's import path; the rest are short digests), and the longest list
#: value (``shard``: 2).
MAX_KEYS = 64
_MAX_NAME = 64
_MAX_TEXT = 4096
_MAX_LIST = 8


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint(config: FeedConfig) -> dict[str, Any]:
    """The up-front parts of ``config``'s fingerprint (everything but ``index``)."""
    options = config.options
    parts: dict[str, Any] = {
        "seed": options.plan.seed,
        "shuffle": options.plan.shuffle,
        "batch_size": options.plan.batch_size,
        "drop_remainder": options.plan.drop_remainder,
        "shard": list(options.plan.shard),
    }
    if options.plan.pads:  # absent under the default rule: states saved before it resume
        parts["shard_remainder"] = options.plan.shard_remainder
    parts.update(config.fingerprint_parts(_digest))  # the input's own: files or source
    return parts


def object_parts(objects: Sequence[tuple[str, str, str]]) -> dict[str, Any]:
    """The fingerprint's parts for files on object storage, from each one's (URL, ETag,
    version) in plan order (guarantee 3)."""
    named = [(posixpath.basename(url), etag, version) for url, etag, version in objects]
    parts: dict[str, Any] = {"objects": _digest(named)}
    text = "\n".join(" ".join(entry) for entry in objects)
    if len(text) <= _MAX_TEXT and not any(" " in "".join(entry) for entry in objects):
        parts["object_etags"] = text
    return parts


def _etags_by_name(text: object) -> dict[str, tuple[str, str]] | None:
    """``object_etags`` read back: name -> (URL, ETag and version); None if malformed."""
    if not isinstance(text, str):
        return None
    found = {}
    for line in text.split("\n") if text else []:
        fields = line.split(" ")
        if len(fields) != 3:
            return None
        found[posixpath.basename(fields[0])] = (fields[0], f"{fields[1]} {fields[2]}".strip())
    return found


def _objects_changed(saved: object, current: object) -> list[str] | None:
    """The objects whose ETag or version differ (by name), as an error names them; None when
    either side holds no ``object_etags`` to tell which."""
    before, now = _etags_by_name(saved), _etags_by_name(current)
    if before is None or now is None:
        return None
    return [
        f"{url} (ETag and version {before[name][1]!r} when the state was saved, {tag!r} now)"
        for name, (url, tag) in now.items()
        if name in before and before[name][1] != tag
    ]


def index_digest(index: Index) -> str:
    """A hash of the index: per video, its file's name, its name, frame count and label.

    Array operations only (a Python loop over a million videos took seconds, on every
    iteration's first batch): the base name of each file that has videos, then per video
    its file's rank among those, the names joined by NUL (which no HDF5 name holds), frame
    counts and labels."""
    digest = hashlib.sha256()
    files, first = np.unique(index.file_of_video, return_index=True)
    for path in index.file_names[first].tolist():
        digest.update(os.path.basename(path.decode(errors="replace")).encode() + b"\0")
    digest.update(np.searchsorted(files, index.file_of_video).astype("<i8").tobytes())
    digest.update(b"\0".join(index.names.tolist()))
    for column in (index.frames, index.labels):
        digest.update(np.asarray(column).astype("<i8").tobytes())
    return digest.hexdigest()[:16]


class IndexDigests:
    """:func:`index_digest`, reused while the index stays the same: every iteration of a
    dataset indexes its files again, and comparing the arrays with the last index costs a
    fraction of hashing them (0.05 against 0.2 s at a million videos). Holds the last index
    between iterations (the current one's arrays during an iteration: no copy)."""

    def __init__(self) -> None:
        self._last: tuple[Index, str] | None = None

    @property
    def last(self) -> Index | None:
        """The last index hashed."""
        return None if self._last is None else self._last[0]

    def __call__(self, index: Index) -> str:
        last = self._last
        if last is not None and (last[0] is index or _same_index(last[0], index)):
            digest = last[1]
        else:
            digest = index_digest(index)
        self._last = (index, digest)
        return digest


def _same_index(a: Index, b: Index) -> bool:
    """Whether two indexes hash the same (``file_names`` follow from ``files`` and
    ``file_of_video``); about 0.05 s at a million videos."""
    return a.files == b.files and all(
        np.array_equal(x, y)
        for x, y in (
            (a.file_of_video, b.file_of_video),
            (a.frames, b.frames),
            (a.labels, b.labels),
            (a.names, b.names),
        )
    )


def _scalar(value: object) -> bool:
    if isinstance(value, str):
        return len(value) <= _MAX_TEXT
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) < 1 << 256  # a seed may be any int numpy seeds with: bounded
    return value is None or isinstance(value, bool | float)


def check_shape(found: object) -> None:
    """ResumeError unless ``found`` is a fingerprint's shape: a flat map of at most
    :data:`MAX_KEYS` short names to scalars or short lists of scalars (what
    h5feed.consumer.position.fingerprint writes), so comparing it costs no recursion and little."""
    if not isinstance(found, Mapping):
        raise ResumeError("resume state: 'fingerprint' must be a dict")
    if len(found) > MAX_KEYS:
        raise ResumeError(
            f"resume state: the fingerprint has {len(found)} fields, at most {MAX_KEYS}"
        )
    for key, value in found.items():
        if not (isinstance(key, str) and len(key) <= _MAX_NAME):
            raise ResumeError(f"resume state: fingerprint field {key!r:.80} is not a short name")
        if isinstance(value, list):
            good = len(value) <= _MAX_LIST and all(map(_scalar, value))
        else:
            good = _scalar(value)
        if not good:
            raise ResumeError(
                f"resume state: fingerprint field {key!r} holds {said(value)}: a fingerprint "
                f"holds scalars and lists of at most {_MAX_LIST} scalars"
            )


def said(value: object) -> str:
    """``value`` as an error names it, at a bounded cost: a container only by its size
    unless it is a few scalars (a deep list has no ``repr``), a huge int by its size."""
    if isinstance(value, list | tuple | dict):
        if len(value) > 4 or any(isinstance(v, list | tuple | dict) for v in value):
            return f"a {type(value).__name__} of {len(value)} entries"
        return "[" + ", ".join(map(said, value)) + "]"
    if isinstance(value, int) and abs(value) >= 1 << 64:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``"field: saved X, now Y"`` for every field both have and that differs, and for a
    field only one has (``index`` aside: it is compared once both know it)."""
    found = []
    for key in sorted(set(saved) | set(current)):
        if key == "index" and (key not in saved or key not in current):
            continue
        if key == "object_etags":  # by name, not by URL (guarantee 3): with "objects"
            continue
        if key == "objects" and saved.get(key) != current.get(key):
            changed = _objects_changed(saved.get("object_etags"), current.get("object_etags"))
            if changed:
                found.append(
                    "objects overwritten since the state was saved: " + "; ".join(changed[:8])
                    + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
                )  # fmt: skip
                continue
        if saved.get(key, "(absent)") != current.get(key, "(absent)"):
            found.append(f"{key}: saved {saved.get(key, '(absent)')!r}, now "
                         f"{current.get(key, '(absent)')!r}")  # fmt: skip
    return found


def check(saved: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """ResumeError naming every field of the fingerprints that differs."""
    diff = differences(saved, current)
    if diff:
        raise ResumeError(
            "the resume state was saved by another dataset (or other data): "
            + "; ".join(diff)
            + ". Resume with the same files and plan options, or start afresh."
        )
