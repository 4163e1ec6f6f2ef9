"""Whether the copies of a user's object in the workers are one object (map, keras), or
different shards (generator).

A map or keras source runs as one copy of the user's object per worker, and exactly once
holds only if item ``i`` is the same item in every copy. The workers seed the global
generators before every call into the user's code (``h5feed.producer.worker.seeding``), which makes
careless code (``np.random.shuffle`` in ``__init__``) agree; this module checks that they do.

Each copy digests the same few items (map: first, middle, last; keras: first and last batch)
at the iteration's first epoch (in its SOURCE_INFO) and, for keras, again at the start of
every later epoch (answering a CHECK, after its ``on_epoch_end`` calls), fetching each item
twice under the same seeding. Per item:

1. a copy whose two fetches differ: the item is not reproducible (its randomness comes from
   elsewhere): :class:`~h5feed.common.errors.NondeterministicItemWarning` naming it (once per
   item and source), and the item says nothing about agreement;
2. reproducible in every copy, with digests that differ between copies: the copies are
   different objects; :class:`~h5feed.common.errors.SourceError` naming the item and which
   workers hold which version. No batch of that epoch has been sent for (the keras scheduler
   dispatches an epoch's units only once its check agreed).

A generator is the other way round: each copy must iterate its own shard, so copies that
begin alike are what is refused (:func:`check_distinct_shards`). Each copy digests its
shard's first few elements (``h5feed.producer.sources.generator_kind``); two non-empty shards
with the same digest yield the same elements: a factory that takes ``shard_index`` and
``shard_count`` but ignores them (or does not take them) and "forgot to shard", which would
give every element once per worker. Refused at the handshake, before any PULL is sent, with
a :class:`~h5feed.common.errors.SourceError` naming the shard arguments and the workers.
Never refused: an empty shard (no digest), shards that differ in any one of their first
elements or in how many they have, one worker. What it cannot see: copies whose elements
differ although their data does not (each shard's pass is seeded by its shard index, so a
generator that ignores its shard but augments every element with ``np.random`` gives every
sample once per worker, augmented differently). The opt-out, ``shards_start_alike=True``,
is for generators whose shards may legitimately begin with equal elements (synthetic
constant data, a header element every shard yields first).
"""

from __future__ import annotations

import collections
import warnings
from collections.abc import Mapping, Sequence

from h5feed.common.errors import NondeterministicItemWarning, SourceError
from h5feed.common.protocol import messages

_HINT = (
    "each copy gives it the same twice, so the copies are different objects: randomness "
    "that h5feed does not seed (a np.random.default_rng() or RandomState made without a "
    "seed, the clock, os.urandom) in the object's __init__ or on_epoch_end. Seed it from the "
    "seed= and epoch= keyword arguments the factory may take, or use random / np.random, "
    "which h5feed seeds the same in every worker"
)


_SHARD_HINT = (
    "the factory ignores shard_index and shard_count (or does not take them), so every "
    "worker would yield every element, each once per worker. Split the data by them, e.g. "
    "items[shard_index::shard_count]; if the shards may legitimately begin with the same "
    "elements, pass shards_start_alike=True"
)


def check_distinct_shards(
    source: str, answers: Mapping[str, Sequence[messages.ItemCheck]], *, alike_ok: bool = False
) -> None:
    """Raise SourceError where two workers' generators (worker name -> its checks: one
    digest of its first elements, none for an empty shard) begin alike; ``alike_ok`` (the
    ``shards_start_alike=True`` opt-out) skips the comparison (see the module docstring)."""
    if alike_ok:
        return
    holders: dict[bytes, list[str]] = collections.defaultdict(list)
    for worker, checks in sorted(answers.items()):
        for check in checks:
            holders[check.digest].append(worker)
    same = [workers for workers in holders.values() if len(set(workers)) > 1]
    if same:
        groups = "; ".join(str(sorted(set(workers))) for workers in same)
        raise SourceError(
            f"source {source!r}: the generators of workers {groups} begin with the same "
            f"elements (shard_index and shard_count differ between them): {_SHARD_HINT}"
        )


def check_agreement(
    source: str,
    what: str,
    epoch: int,
    answers: Mapping[str, Sequence[messages.ItemCheck]],
) -> None:
    """Raise SourceError where the copies (worker name -> its checks) disagree on an item
    (one index of the source names a ``what``: "item", "batch"); warn for an item some copy
    cannot reproduce (see the module docstring)."""
    by_item: dict[int, dict[str, messages.ItemCheck]] = collections.defaultdict(dict)
    for worker, checks in answers.items():
        for check in checks:
            by_item[check.item][worker] = check
    stable = {}
    for item, by_worker in sorted(by_item.items()):  # every unstable item is told first
        if all(check.reproducible for check in by_worker.values()):
            stable[item] = by_worker
            continue
        warnings.warn(
            f"h5feed: {what} {item} of source {source!r} differs between two fetches in "
            f"one worker although random, np.random and torch were seeded the same before "
            "each: its randomness comes from elsewhere, so the same seed will not give the "
            "same batches (and the workers' copies cannot be compared on it)",
            NondeterministicItemWarning,
            stacklevel=2,
        )
    for item, by_worker in stable.items():
        versions: dict[bytes, list[str]] = collections.defaultdict(list)
        for worker, check in sorted(by_worker.items()):
            versions[check.digest].append(worker)
        if len(versions) > 1:
            groups = "; ".join(
                f"version {n + 1} in {workers}" for n, workers in enumerate(versions.values())
            )
            raise SourceError(
                f"source {source!r}: {what} {item} at epoch {epoch} differs between the "
                f"workers' copies ({groups}): {_HINT}"
            )
