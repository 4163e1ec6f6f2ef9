"""**keras**: a keras PyDataset or Sequence, whose item ``i`` is a whole batch: one batch
index per unit, not batched again; every later epoch's copies are checked after their
``on_epoch_end`` calls (:mod:`h5feed.consumer.sources.item_scheduler`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from h5feed.common.elements.values import Field
from h5feed.common.protocol.messages import ItemCheck
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.sources.agreement import check_agreement
from h5feed.consumer.sources.item_scheduler import ItemScheduler, epoch_batches
from h5feed.consumer.sources.kind import KindSetup
from h5feed.consumer.sources.options import SourceConfig
from h5feed.consumer.sources.parts import Parts

if TYPE_CHECKING:
    from h5feed.consumer.config.groups import FeedOptions


class KerasKind:
    """The facts of a keras source (see :class:`~h5feed.consumer.sources.kind.KindClass`)."""

    kind: ClassVar[SourceKind] = SourceKind.KERAS
    sized: ClassVar[bool] = True
    whole_batches: ClassVar[bool] = True
    shards_in_workers: ClassVar[bool] = False
    noun: ClassVar[str] = "batch"
    pad_refusal: ClassVar[str | None] = (
        "its items are whole batches in your own structure, e.g. (x, y), which has no place "
        "for the 'valid' weights that tell padded rows apart (give the samples as a map "
        "source of dicts to pad them)"
    )
    checks_every_epoch: ClassVar[bool] = True  # on_epoch_end may change the object

    @classmethod
    def check_copies(
        cls, config: SourceConfig, epoch: int, answers: Mapping[str, Sequence[ItemCheck]]
    ) -> None:
        check_agreement(config.source, cls.noun, epoch, answers)  # one object in every worker

    @classmethod
    def make(cls, setup: KindSetup) -> ItemScheduler:
        return ItemScheduler(cls, setup)

    @classmethod
    def epoch_batches(cls, length: int | None, options: FeedOptions) -> int | None:
        return epoch_batches(cls, length, options)

    @staticmethod
    def items_per_batch(options: FeedOptions) -> int:
        return 1

    @staticmethod
    def batches_of(items: int, options: FeedOptions) -> int:
        return items  # each item is a batch

    @staticmethod
    def batch(parts: Parts, epoch: int, index: int, fields: list[Field], items: int) -> Batch:
        return parts.whole_batch(epoch, index, fields)

    @staticmethod
    def describe_items(items: Sequence[int]) -> str:
        return f"batch {items[0]}"
