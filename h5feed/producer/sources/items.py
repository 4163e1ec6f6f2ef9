"""What the two kinds of dataset (map and keras) share: items fetched by index under the
same seeding in every worker, their digests, and the probe of a few of them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from h5feed.common.elements import tree
from h5feed.common.elements import values as elements
from h5feed.common.elements.values import ElementSpec
from h5feed.common.errors import SourceError
from h5feed.common.protocol import messages
from h5feed.producer.sources.kind import Element
from h5feed.producer.sources.user_code import UserCode
from h5feed.producer.worker import seeding
from h5feed.producer.worker.seeding import Purpose


def is_dataset(obj: Any) -> bool:
    """``__len__`` and ``__getitem__``."""
    return hasattr(obj, "__len__") and hasattr(obj, "__getitem__")


def refuse_batched(code: UserCode, kind: str) -> SourceError:
    """The error of ``source_batched=True`` on a dataset."""
    return SourceError(
        f"source {code.path!r}: source_batched=True takes a generator of batches; "
        f"this source is a {kind} source (a dataset whose items are whole batches "
        "is a keras Sequence/PyDataset, taken as it is)"
    )


class Items:
    """The items of a dataset ``obj``: ``noun`` names one in errors ("item", "batch")."""

    def __init__(self, code: UserCode, obj: Any, noun: str) -> None:
        self.code, self.obj, self.noun = code, obj, noun
        self.length: int = len(obj)

    def fetch(self, index: int, epoch: int) -> Any:
        """Item ``index`` of ``epoch``, seeded the same in every worker."""
        seeding.seed_for(self.code.seed, Purpose.ITEM, epoch, index)
        try:
            return self.obj[index]
        except Exception as exc:
            raise SourceError(
                f"source {self.code.path!r}: {self.noun} {index} raised {type(exc).__name__}: {exc}"
            ) from exc

    def digests(
        self, indices: Iterable[int], epoch: int, convention: tree.Convention
    ) -> tuple[messages.ItemCheck, ...]:
        """Each item digested twice under the same seeding: ``reproducible`` says whether
        both fetches were the same."""
        out = []
        for index in indices:
            first, again = (
                seeding.item_digest(self.fetch(index, epoch), convention) for _ in range(2)
            )
            out.append(messages.ItemCheck(index, first, first == again))
        return tuple(out)

    def probe(self, indices: list[int], convention: tree.Convention) -> ElementSpec:
        """The spec of the items ``indices`` of the first epoch."""
        samples = [self.fetch(i, self.code.first_epoch) for i in indices]
        names = [f"{self.noun} {i}" for i in indices]
        try:
            return elements.infer_spec(samples, convention=convention, names=names)
        except SourceError as exc:
            raise SourceError(f"source {self.code.path!r}, items {indices}: {exc}") from exc

    def take(self, unit: messages.Items, where: str) -> Iterator[Element]:
        """The items of ``unit``, each named ``f"{where} {index}"``; SourceError for an
        index out of range."""
        for index in unit.items:
            if not 0 <= index < self.length:
                raise SourceError(f"index {index} out of range (length {self.length})")
            yield index, self.fetch(index, unit.epoch), f"{where} {index}"
