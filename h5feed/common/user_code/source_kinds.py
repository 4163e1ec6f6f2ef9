"""The kinds of user source (``source=``), one enum shared by the workers and the trainer.

A worker detects its source's kind from the object the user's factory returns and tells it
in SOURCE_INFO; the trainer runs that kind's scheduler. The values are the strings that
travel in SOURCE_INFO's ``kind`` field (protocol 5: they never change). Each kind's
behaviour lives in its classes, never in comparisons of names: the producer's
:data:`h5feed.producer.sources.KINDS` (detect, info, produce) and the consumer's
:data:`h5feed.consumer.sources.kinds.SCHEDULERS` (the plan). A test checks that every member
has both.
"""

from __future__ import annotations

import enum


class SourceKind(enum.StrEnum):
    """One kind of source; its value is its wire name."""

    MAP = "map"  # __len__ + __getitem__: item i is one element
    KERAS = "keras"  # a keras PyDataset/Sequence: item i is a whole batch
    GENERATOR = "generator"  # an iterable: each worker iterates its own shard

    @classmethod
    def of_wire(cls, value: object) -> SourceKind | None:
        """The kind named ``value`` (off the wire), None for a name no kind has."""
        if not isinstance(value, str):
            return None
        try:
            return cls(value)
        except ValueError:
            return None
