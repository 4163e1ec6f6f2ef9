"""A user source as an input kind (:class:`SourceInput`): what the front door asks of it
instead of testing its configuration's type (see :mod:`h5feed.consumer.hdf5.input`, the
HDF5 feed's; the two answer the same questions)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from h5feed.common.errors import ResumeError
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import UNITS_EACH, CreditGate
from h5feed.consumer.plan.epoch_plan import Cursor
from h5feed.consumer.plan.rest import Rest
from h5feed.consumer.sources.kinds import kind_class
from h5feed.consumer.sources.options import Learnt, SourceConfig
from h5feed.consumer.sources.scheduler import SourceScheduler


class SourceStart(Protocol):
    """What a source's iteration starts from (``IterationStart``'s fields it reads)."""

    @property
    def cursor(self) -> Cursor: ...
    @property
    def learnt(self) -> Learnt | None: ...
    @property
    def rest(self) -> Rest | None: ...


T_co = TypeVar("T_co", covariant=True)


class SourceWays(Protocol[T_co]):
    """What a front end does for a source feed (:meth:`SourceInput.visit` calls it): its
    half of a choice between the kinds that needs more than the input object knows."""

    def source(self, config: SourceConfig) -> T_co: ...


@dataclasses.dataclass(frozen=True, slots=True)
class SourceInput:
    """A source feed's input kind over its (frozen) configuration."""

    #: The lineage header's ``kind`` (and how the front door names this kind).
    kind: ClassVar[Literal["source"]] = "source"
    config: SourceConfig

    def visit(self, ways: SourceWays[T_co]) -> T_co:
        """``ways``' answer for a source feed (the kinds' other input answers ``hdf5``)."""
        return ways.source(self.config)

    @property
    def data_root(self) -> None:
        """A source reads no files: its workers need no root."""
        return None

    @property
    def units_each(self) -> int:
        """Units kept queued per worker (:mod:`~h5feed.consumer.core.credits`)."""
        return UNITS_EACH

    def scheduler(
        self,
        start: SourceStart,
        job: str,
        numbers: Iterator[int],
        counters: Counters,
        gate: CreditGate,
    ) -> SourceScheduler:
        """The scheduler of one iteration (job id ``job``, epochs ``numbers``), given the
        kind and spec an earlier iteration learnt (its workers are not asked to probe)."""
        if start.rest is not None:  # merge_states refuses a source's states
            raise ResumeError("a source's epoch cannot be dealt to another number of shards")
        return SourceScheduler(
            self.config, job, numbers, start.cursor, counters, gate, start.learnt
        )

    def remembered(self) -> None:
        """No consumer remembers anything of a source between processes."""
        return None

    def object_parts(self) -> dict[str, Any]:
        """A source has no objects to identify."""
        return {}

    def files_now(self) -> None:
        """A source has no files to stat."""
        return None

    def lineage_columns(self) -> None:
        """A source's lineage rows have no optional columns (their own are its kind's)."""
        return None

    def index_lesson(self, learnt: object) -> None:
        """A source builds no index."""
        return None

    def source_lesson(self, learnt: object) -> Learnt | None:
        """The kind, spec and length the handshake taught (None before it did)."""
        return learnt if isinstance(learnt, Learnt) else None

    def source_kind(self, learnt: object) -> SourceKind | None:
        """The source kind a lineage row names, once the handshake told it."""
        lesson = self.source_lesson(learnt)
        return lesson.kind if lesson is not None else None

    def shards_in_workers(self, learnt: object) -> bool:
        """Whether the shards live in the workers (a generator's: no joiner can help)."""
        lesson = self.source_lesson(learnt)
        return lesson is not None and kind_class(lesson.kind).shards_in_workers
