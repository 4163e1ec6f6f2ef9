"""**map**: an object with ``__len__`` and ``__getitem__`` (not a dict, str or bytes); item
``i`` is one element. Units are ITEMS of element indices."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Final

from h5feed.common.elements import tree
from h5feed.common.elements.values import ElementSpec
from h5feed.common.errors import SourceError
from h5feed.common.protocol import messages
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.producer.sources.items import Items, is_dataset, refuse_batched
from h5feed.producer.sources.kind import Element
from h5feed.producer.sources.user_code import UserCode

#: Elements a map source reads, spread over the dataset, to infer the element spec.
PROBE_ELEMENTS: Final = 8


class MapSource:
    """A map-style dataset (see the module docstring)."""

    kind: ClassVar[SourceKind] = SourceKind.MAP
    convention: ClassVar[tree.Convention] = "tfdata"
    unit: ClassVar[type[messages.Items] | type[messages.Pull]] = messages.Items

    def __init__(self, code: UserCode, obj: Any) -> None:
        self._code = code
        self._items = Items(code, obj, "item")

    @classmethod
    def detects(cls, obj: Any) -> bool:
        return is_dataset(obj)

    @classmethod
    def load(cls, code: UserCode, obj: Any, batched: bool) -> MapSource:
        if batched:
            raise refuse_batched(code, cls.kind)
        return cls(code, obj)

    @property
    def length(self) -> int:
        return self._items.length

    def probe(self) -> ElementSpec:
        """Up to :data:`PROBE_ELEMENTS` items spread over the dataset (each worker from its
        own offset)."""
        length = self.length
        if length == 0:
            raise SourceError(f"source {self._code.path!r} is empty (len() is 0)")
        count = min(PROBE_ELEMENTS, length)
        worker = self._code.worker
        indices = sorted({(j * length // count + worker) % length for j in range(count)})
        return self._items.probe(indices, self.convention)

    def checks(self, epoch: int) -> tuple[messages.ItemCheck, ...]:
        """The first, middle and last item."""
        length = self.length
        if not length:
            return ()
        return self._items.digests(sorted({0, length // 2, length - 1}), epoch, self.convention)

    def elements(self, unit: messages.Items | messages.Pull) -> Iterator[Element]:
        if not isinstance(unit, messages.Items):  # unreachable: the job checked the type
            raise SourceError(f"a {unit.KIND} unit for a map source")
        return self._items.take(unit, "index")

    def close(self) -> None:
        return None
