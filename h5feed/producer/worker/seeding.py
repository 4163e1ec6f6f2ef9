"""Seeding the user's global random generators, so that every copy of a user's object is the
same object and every item the same item, whatever the number of workers.

A source runs as one copy of the user's object per worker. Code found in the wild draws from
the *global* generators without a seed (``np.random.shuffle(self.index)`` in ``__init__`` and
``on_epoch_end``, ``random.random() < 0.5`` for a flip in ``__getitem__``); unseeded, every
copy holds another permutation and items are lost and duplicated. So before each call into the
user's code, the worker seeds Python's :mod:`random`, NumPy's global generator and, when the
process has already imported it, torch's (never importing torch itself), from a value derived
from the dataset's seed and the call's place in the plan:

* constructing a copy (the factory), and each ``on_epoch_end``: ``(seed, epoch)``, the same
  in every worker, as if one object lived in the trainer;
* a map item or keras batch ``__getitem__(i)``: ``(seed, epoch, i)``, so item ``i``'s
  augmentation is the same whichever worker makes it, and differs between items and epochs;
* a generator's pass: ``(seed, epoch, shard_index)``: each shard its own stream;
* the HDF5 transform hook, per sample: ``(seed, epoch, sample)``.

Each purpose has its own tag, so that no two purposes share a stream. Randomness that does not
come from these generators (``np.random.default_rng()`` without a seed, a ``RandomState``
made in ``__init__``) is out of reach: :func:`item_digest` lets the trainer check that the
copies agree anyway (see ``h5feed.consumer.sources.agreement``).
"""

from __future__ import annotations

import enum
import hashlib
import random
import struct
import sys
from typing import Any, Final

import numpy as np

from h5feed.common.elements import tree
from h5feed.common.elements import values as elements

_MASK_64: Final = 0xFFFF_FFFF_FFFF_FFFF


class Purpose(enum.IntEnum):
    """What a seed is for (part of its derivation, so the streams never coincide)."""

    CONSTRUCT = 0
    EPOCH_END = 1
    ITEM = 2
    PASS = 3
    TRANSFORM = 4


def derive(seed: int, purpose: Purpose, *parts: int) -> int:
    """A 32-bit seed from the dataset's ``seed``, the purpose and non-negative ``parts``
    (below 2**64). A hash, not ``np.random.SeedSequence``: this runs before every item, and
    costs about 1 us where SeedSequence costs 40."""
    words = (seed & _MASK_64, int(purpose), *parts)
    digest = hashlib.blake2b(struct.pack(f"<{len(words)}Q", *words), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def seed_globals(value: int) -> None:
    """Seed :mod:`random`, ``np.random`` and, if already imported, torch with ``value``."""
    random.seed(value)
    np.random.seed(value)
    torch = sys.modules.get("torch")
    manual_seed = getattr(torch, "manual_seed", None)
    if callable(manual_seed):
        manual_seed(value)


def seed_for(seed: int, purpose: Purpose, *parts: int) -> None:
    """:func:`seed_globals` with the value :func:`derive` gives."""
    seed_globals(derive(seed, purpose, *parts))


def item_digest(element: Any, convention: tree.Convention) -> bytes:
    """16 bytes that differ when two elements differ in structure, dtype, shape or value."""
    digest = hashlib.blake2b(digest_size=16)
    description, leaves, paths = elements.flatten(element, convention=convention)
    digest.update(repr(description).encode())
    for path, leaf in zip(paths, leaves, strict=True):
        digest.update(path.encode() + b"\0")
        if isinstance(leaf, bytes):
            digest.update(b"b%d:" % len(leaf) + leaf)
            continue
        array = np.ascontiguousarray(leaf)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.digest()
