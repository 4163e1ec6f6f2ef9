"""The configuration of a user source (``h5feed.dataset(source=...)``), validated once, and
what its workers tell of it (:class:`Learnt`), kept apart from the configuration."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgpack

from h5feed.common.elements.batch_keys import BATCH_KEYS
from h5feed.common.elements.values import ElementSpec
from h5feed.common.user_code import import_paths
from h5feed.common.user_code.source_kinds import SourceKind

if TYPE_CHECKING:  # options.py imports this module (FeedConfig = HdfConfig | SourceConfig)
    from h5feed.consumer.config.groups import FeedOptions

#: The keyword arguments of ``h5feed.dataset()`` that configure a source, and the
#: :class:`SourceConfig` field each one becomes.
SOURCE_FIELDS: dict[str, str] = {
    "source": "source",
    "source_args": "args",
    "output_signature": "spec",
    "ragged": "ragged",
    "steps_per_epoch": "steps_per_epoch",
    "source_batched": "batched",
    "shards_start_alike": "shards_start_alike",
}
SOURCE_KEYS = tuple(SOURCE_FIELDS)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SourceConfig:
    """A source feed's whole configuration: what the workers run, how its elements are
    batched, and the plan/process ``options``.

    ``source``: ``"package.module:factory"``; ``args``: msgpack-able keyword arguments of the
    factory (they travel in the SOURCE message; nothing is pickled); ``ragged``: True (every
    field that varies in size) or the paths of the fields to give as ragged instead of padded;
    ``steps_per_epoch``: generator sources only, batches per epoch; ``spec``: the element spec
    the user gave (``output_signature``), else None (the workers' first elements tell it);
    ``sys_path``: where local workers look for the user's modules too (the trainer's
    ``sys.path``); ``batched``: the source is a generator of whole batches (every field's
    first dimension is the batch's, the last batch may be shorter), split into samples in the
    workers and batched again with ``options.plan.batch_size``; ``shards_start_alike``:
    generator sources only, the workers' generators may legitimately begin with the same
    elements, so they are not refused for it (else copies that begin alike forgot to shard:
    :func:`h5feed.consumer.sources.agreement.check_distinct_shards`).

    Guarantees: validated on construction (ValueError naming the argument); never changed
    afterwards, also not by what the workers tell (that is a :class:`Learnt`, which the feed
    keeps).
    """

    source: str
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    ragged: bool | tuple[str, ...] = False
    steps_per_epoch: int | None = None
    spec: ElementSpec | None = None
    sys_path: tuple[str, ...] = ()
    batched: bool = False
    shards_start_alike: bool = False
    options: FeedOptions

    def __post_init__(self) -> None:
        import_paths.check_option("source", self.source, "factory")
        if not isinstance(self.args, Mapping) or not all(isinstance(k, str) for k in self.args):
            raise ValueError("source_args must be a dict with str keys")
        try:
            msgpack.packb(dict(self.args), use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(
                "source_args must hold msgpack-able values only (numbers, str, bytes, lists, "
                f"dicts; they travel to the workers, nothing is pickled): {exc}"
            ) from exc
        if not isinstance(self.batched, bool):
            raise ValueError(f"source_batched must be True or False, got {self.batched!r}")
        if not isinstance(self.shards_start_alike, bool):
            raise ValueError(
                f"shards_start_alike must be True or False, got {self.shards_start_alike!r}"
            )
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be >= 1 or None, got {self.steps_per_epoch}")

    def is_ragged(self, path: str) -> bool:
        if isinstance(self.ragged, bool):
            return self.ragged
        return path in self.ragged

    def element_keys(self, keys: tuple[str, ...]) -> tuple[str, ...]:
        """``keys`` as they are: a source's elements are its own trees, so ``dataset()``'s
        ``keys=`` is refused (TypeError) unless left at its default (a padded map source
        adds ``sample`` and ``valid`` itself: :mod:`h5feed.consumer.sources.padding`)."""
        if keys != BATCH_KEYS:
            raise TypeError("h5feed: keys= does not apply to source= (elements are your own)")
        return keys

    def fingerprint_parts(self, digest: Callable[[Any], str]) -> dict[str, Any]:
        """The parts of the feed's fingerprint this configuration decides beyond the plan's
        (:func:`h5feed.consumer.position.fingerprint.fingerprint`; ``digest``: how a value
        too large to keep is hashed)."""
        return {
            "source": self.source,
            "source_args": digest(dict(self.args)),
            "steps_per_epoch": self.steps_per_epoch,
            "ragged": digest(self.ragged),
        }

    def lineage_header(self) -> dict[str, Any]:
        """What a lineage record's header says of this input beyond the plan's options."""
        return {"kind": "source", "source": self.source}


@dataclasses.dataclass(frozen=True, slots=True)
class Learnt:
    """What the workers told of a source once they loaded it: its kind, element spec (the
    given one, checked, or the merge of what each worker probed) and ``length`` (``len()``
    of a map or keras source, None for a generator). The feed keeps it, so later iterations
    skip the probe and use the same spec as the tf.data signature, and the epoch's length is
    known (tf.data's cardinality)."""

    kind: SourceKind
    spec: ElementSpec
    length: int | None = None
