"""What every kind of source is in a worker: a class that detects its objects and loads one,
and the object it loads, which tells the SOURCE_INFO's parts and yields each unit's elements.

Adding a kind: a :class:`~h5feed.common.user_code.source_kinds.SourceKind` member, a class following
:class:`KindClass` (its objects :class:`KindSource`), placed in
:data:`h5feed.producer.sources.detect.KINDS` where its turn to detect comes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Protocol

from h5feed.common.elements import tree
from h5feed.common.elements.values import ElementSpec
from h5feed.common.protocol import messages
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.producer.sources.user_code import UserCode

#: An element of a unit: its sample (the DATA's ``samples`` entry), the element, and where
#: it comes from in words (for an error).
Element = tuple[int, Any, str]


class KindSource(Protocol):
    """One user object of one kind, in one worker. Not thread-safe (the worker's single
    event-loop thread uses it)."""

    kind: ClassVar[SourceKind]
    #: How its elements' lists read (:mod:`h5feed.common.elements.tree`).
    convention: ClassVar[tree.Convention]
    #: The unit message it answers (ITEMS or PULL); another raises SourceError.
    unit: ClassVar[type[messages.Items] | type[messages.Pull]]

    @property
    def length(self) -> int | None:
        """``len()`` of the object, None where it has none."""
        ...

    def probe(self) -> ElementSpec:
        """The spec of the first elements (``elements.infer_spec``)."""
        ...

    def checks(self, epoch: int) -> tuple[messages.ItemCheck, ...]:
        """This copy's digests of the items every copy fetches, at the start of ``epoch``
        (:mod:`h5feed.consumer.sources.agreement`); none where copies hold different shards."""
        ...

    def elements(self, unit: messages.Items | messages.Pull) -> Iterator[Element]:
        """The elements answering ``unit`` (of the type :attr:`unit`), in order."""
        ...

    def close(self) -> None:
        """Drops what it holds of the user's iteration."""
        ...


class KindClass(Protocol):
    """A kind's class: whether an object the factory returned is of it, and loading it."""

    kind: SourceKind

    def detects(self, obj: Any) -> bool:
        """Whether ``obj`` is of this kind (asked in :data:`~.detect.KINDS`' order)."""
        ...

    def load(self, code: UserCode, obj: Any, batched: bool) -> KindSource:
        """The kind's work over ``obj`` (``batched``: ``source_batched=True``; SourceError
        where the kind takes no batches)."""
        ...
