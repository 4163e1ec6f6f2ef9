"""**map**: a dataset whose item ``i`` is one element; batches of ``batch_size``
consecutive items of the epoch's order (:mod:`h5feed.consumer.sources.item_scheduler`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from h5feed.common.elements.values import Field
from h5feed.common.protocol.messages import ItemCheck
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.plan.epoch_plan import batch_count
from h5feed.consumer.sources.agreement import check_agreement
from h5feed.consumer.sources.item_scheduler import ItemScheduler, epoch_batches
from h5feed.consumer.sources.kind import KindSetup
from h5feed.consumer.sources.options import SourceConfig
from h5feed.consumer.sources.parts import Parts

if TYPE_CHECKING:
    from h5feed.consumer.config.groups import FeedOptions


class MapKind:
    """The facts of a map source (see :class:`~h5feed.consumer.sources.kind.KindClass`)."""

    kind: ClassVar[SourceKind] = SourceKind.MAP
    sized: ClassVar[bool] = True
    whole_batches: ClassVar[bool] = False
    shards_in_workers: ClassVar[bool] = False
    noun: ClassVar[str] = "item"
    pad_refusal: ClassVar[str | None] = None  # zero rows, with sample and valid (padding.py)
    checks_every_epoch: ClassVar[bool] = False  # the object never changes after __init__

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
        return options.plan.batch_size

    @staticmethod
    def batches_of(items: int, options: FeedOptions) -> int:
        return batch_count(items, options.plan.batch_size, options.plan.drop_remainder)

    @staticmethod
    def batch(parts: Parts, epoch: int, index: int, fields: list[Field], items: int) -> Batch:
        return parts.batch(epoch, index, fields, items)

    @staticmethod
    def describe_items(items: Sequence[int]) -> str:
        return f"items {list(items[:8])}" + ("..." if len(items) > 8 else "")
