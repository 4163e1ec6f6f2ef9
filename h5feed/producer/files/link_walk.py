"""Walking an HDF5 file's links without recursion, bounded in depth and in count.

HDF5's own walk (``H5Lvisit``, h5py's ``visit``/``visititems``) recurses in C once per nested
group: a 31 MB file of 30,000 nested groups overflows the C stack and kills the process
(SIGSEGV) before Python can say anything. The walk here keeps its own stack of groups to
visit, so it never recurses, and it stops with a :class:`~h5feed.common.errors.DataError`
naming the file and the bound at the first group nested deeper than ``max_depth`` or the first
link past ``max_links``.

Guarantees of :func:`external_links`:

1. It follows no soft or external link and opens only groups reached by hard links (each
   group once, however many hard links reach it: a cycle of hard links is walked once), as
   ``H5Lvisit`` does; datasets are never opened.
2. Memory and time are bounded by ``max_links`` (every link counts, of every kind, wherever it
   is) and depth by ``max_depth`` (the root group is depth 0, its member groups depth 1).
3. It returns every external link of the file, with its target file and object, in the order
   found.
4. It looks at each object once, depth first: a group's members in the order of their
   addresses, right after the group. HDF5 writes a group's members after it, so a file
   written in order has its metadata read in one pass, however small the cache of a file
   read from object storage.

:func:`member_names` is the same bound for the one-level walks of the layout readers: the
names of a group's members, sorted, or DataError when it has more than ``limit``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import h5py

from h5feed.common.errors import DataError

__all__ = [
    "MAX_GROUP_DEPTH",
    "MAX_LINKS",
    "MAX_MEMBERS",
    "ExternalLink",
    "external_links",
    "member_names",
]

#: Groups nested deeper than this below the root are refused: every h5feed layout uses 2
#: levels, and HDF5 files of other tools rarely pass 10.
MAX_GROUP_DEPTH = 100
#: Links (of any kind) one file may hold for a walk: 3 per video of the groups layout (the
#: group and its ``frames`` and ``crc32``) for ~330,000 videos, a walk of about 2 s.
MAX_LINKS = 1_000_000
#: Members of one group a layout reader lists (videos of a file, frames of a video).
MAX_MEMBERS = 1_000_000

#: (link path in the file, target file name as stored, target object path as stored)
ExternalLink = tuple[str, str, str]


def external_links(
    h5: h5py.File, file: str, max_depth: int = MAX_GROUP_DEPTH, max_links: int = MAX_LINKS
) -> list[ExternalLink]:
    """Every external link of ``h5`` (see the module docstring); DataError naming ``file`` and
    the bound when the file's groups nest deeper than ``max_depth`` or it holds more than
    ``max_links`` links."""
    root = h5py.h5g.open(h5.id, b"/")
    visited = {h5py.h5o.get_info(root).addr}
    found: list[ExternalLink] = []
    count = [0]  # links seen so far, in every group
    # Objects to look at, each once (its parent group, name, path, depth): popped in the
    # order of their addresses, a group's members right after it (module docstring, 4).
    stack: list[tuple[h5py.h5g.GroupID, bytes, bytes, int]] = []
    group: h5py.h5g.GroupID | None = root
    prefix, depth = b"", 0
    while True:
        if group is not None:
            hard = _listed(group, prefix, file, count, max_links, found)
            fresh = [(address, name) for name, address in hard if address not in visited]
            visited.update(address for address, _name in fresh)
            for _address, name in sorted(fresh, reverse=True):
                stack.append((group, name, prefix + b"/" + name, depth + 1))
        if not stack:
            return found
        parent, name, prefix, depth = stack.pop()
        group = None
        if h5py.h5o.get_info(parent, name).type != h5py.h5o.TYPE_GROUP:
            continue
        if depth > max_depth:
            raise DataError(
                f"group {os.fsdecode(prefix)[:120]!r} is nested deeper than {max_depth} "
                f"levels (the bound of a walk of the file's links: refused, not walked)",
                file=file,
            )
        group = h5py.h5g.open(parent, name)


def _listed(
    group: h5py.h5g.GroupID,
    prefix: bytes,
    file: str,
    count: list[int],
    max_links: int,
    found: list[ExternalLink],
) -> list[tuple[bytes, int]]:
    """``group``'s hard links (name, address); its external links appended to ``found``;
    DataError once the file's links pass ``max_links``."""
    hard: list[tuple[bytes, int]] = []
    external: list[bytes] = []
    group.links.iterate(_collector(hard, external, count, max_links), info=True)
    if count[0] > max_links:
        raise DataError(
            f"the file holds more than {max_links} links (counted up to group "
            f"{os.fsdecode(prefix or b'/')[:120]!r}; the bound of a walk of its links: "
            "refused, not walked further)",
            file=file,
        )
    for name in external:
        target_file, target_object = group.links.get_val(name)
        found.append((_path(prefix, name), os.fsdecode(target_file), os.fsdecode(target_object)))
    return hard


def _collector(
    hard: list[tuple[bytes, int]], external: list[bytes], count: list[int], max_links: int
) -> Callable[[bytes, h5py.h5l.LinkInfo], bool | None]:
    """The callback of one group's ``H5Literate``: collects its hard links (name, address)
    and external links (name), counting every link in ``count[0]``."""

    def collect(name: bytes, info: h5py.h5l.LinkInfo) -> bool | None:
        # Only collect: an exception raised inside an HDF5 callback comes out as SystemError.
        count[0] += 1
        if count[0] > max_links:
            return True  # stops the iteration: one link past the bound is enough
        if info.type == h5py.h5l.TYPE_HARD:
            hard.append((name, info.u))
        elif info.type == h5py.h5l.TYPE_EXTERNAL:
            external.append(name)
        return None

    return collect


def _path(prefix: bytes, name: bytes) -> str:
    return os.fsdecode(prefix + b"/" + name)


def member_names(group: h5py.Group, file: str, what: str, limit: int | None = None) -> list[str]:
    """The names of ``group``'s members, sorted; DataError naming ``file``, the group and
    ``limit`` (default :data:`MAX_MEMBERS`) when it holds more (counted from the group's
    header, before any is listed). ``what``: what a member is, for the message ("videos")."""
    limit = MAX_MEMBERS if limit is None else limit
    count = len(group)
    if count > limit:
        raise DataError(
            f"group {group.name!r} holds {count} members, more than the {limit} {what} a file "
            "may list (refused, not walked)",
            file=file,
        )
    return sorted(group.keys())
