"""An HDF5 feed as an input kind (:class:`HdfInput`): what the front door asks of it instead
of testing its configuration's type.

The feed, its streams and an iteration's position hold an input object
(:data:`h5feed.consumer.inputs.FeedInput`) and ask it what differs between the kinds: the
scheduler of an iteration, where local workers find the files, the index an earlier
consumer remembered for them, what an iteration's handshake taught (an :class:`IndexLesson`
for this kind). Pure dispatch: each method is what the front door did for an HDF5 feed."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import UNITS_EACH, UNITS_EACH_OBJECT_STORAGE, CreditGate
from h5feed.consumer.hdf5 import known_index
from h5feed.consumer.hdf5.scheduler import HdfScheduler
from h5feed.consumer.options import HdfConfig
from h5feed.consumer.plan.epoch_plan import Cursor, Index
from h5feed.consumer.plan.rest import Rest
from h5feed.consumer.position import fingerprint
from h5feed.consumer.position.lineage import HdfColumns


class HdfStart(Protocol):
    """What an HDF5 iteration starts from (``IterationStart``'s fields it reads)."""

    @property
    def cursor(self) -> Cursor: ...
    @property
    def known(self) -> Index | None: ...
    @property
    def file_sizes(self) -> tuple[int, ...] | None: ...
    @property
    def rest(self) -> Rest | None: ...


T_co = TypeVar("T_co", covariant=True)


class HdfWays(Protocol[T_co]):
    """What a front end does for an HDF5 feed (:meth:`HdfInput.visit` calls it): its half of
    a choice between the kinds that needs more than the input object knows (TensorFlow's
    signature, which this package never imports)."""

    def hdf5(self, config: HdfConfig) -> T_co: ...


@dataclasses.dataclass(frozen=True, slots=True)
class IndexLesson:
    """The files' index an iteration's handshake built (or an earlier consumer remembered),
    with what follows from it under ``config``."""

    config: HdfConfig
    index: Index

    @property
    def samples(self) -> int:
        """Samples per epoch, all shards'."""
        return self.index.num_videos * self.config.data.clips_per_video

    @property
    def epoch_length(self) -> int:
        """Batches per epoch of this shard."""
        return self.config.epoch_length(self.index)

    def remember(self) -> None:
        """Keep the index for the next dataset over these files (:mod:`.known_index`)."""
        known_index.store(self.config, self.index)


@dataclasses.dataclass(frozen=True, slots=True)
class HdfInput:
    """An HDF5 feed's input kind over its (frozen) configuration."""

    #: The lineage header's ``kind`` (and how the front door names this kind).
    kind: ClassVar[Literal["hdf5"]] = "hdf5"
    config: HdfConfig

    def visit(self, ways: HdfWays[T_co]) -> T_co:
        """``ways``' answer for an HDF5 feed (the kinds' other input answers ``source``)."""
        return ways.hdf5(self.config)

    @property
    def data_root(self) -> str | None:
        """Where local workers find the files."""
        return self.config.data.data_root

    @property
    def units_each(self) -> int:
        """Units kept queued per worker (:mod:`~h5feed.consumer.core.credits`): more for files
        on object storage, whose workers fetch the queued units' clips ahead."""
        if known_index.urls_of(self.config) is not None:
            return UNITS_EACH_OBJECT_STORAGE
        return UNITS_EACH

    def scheduler(
        self,
        start: HdfStart,
        job: str,
        numbers: Iterator[int],
        counters: Counters,
        gate: CreditGate,
    ) -> HdfScheduler:
        """The scheduler of one iteration (job id ``job``, epochs ``numbers``); the known
        index and the files' sizes, when the files are unchanged, skip the indexing."""
        del gate  # HdfScheduler takes none
        config, cursor = self.config, start.cursor
        return HdfScheduler(
            config, job, numbers, cursor, counters, start.known, start.file_sizes, start.rest
        )

    def remembered(self) -> tuple[IndexLesson, str] | None:
        """The index a consumer remembered for these files as they are now, and their key
        (None: none, or the files changed since)."""
        key = known_index.key(self.config)
        index = known_index.load(self.config, key) if key is not None else None
        if index is None or key is None:
            return None
        return IndexLesson(self.config, index), key

    def object_parts(self) -> dict[str, Any]:
        """Files on object storage: what identifies each object's content, for the
        fingerprint (:func:`h5feed.consumer.position.fingerprint.object_parts`), from one
        listing per prefix (what keys the index cache); nothing for local files, or when the
        objects cannot be listed from here (then a saved state that names them is refused:
        they cannot be checked)."""
        urls = known_index.urls_of(self.config)
        if urls is None:
            return {}
        stats = known_index.file_stats(self.config)
        if stats is None:
            return {}
        objects = [
            (url, getattr(st, "etag", ""), getattr(st, "version", ""))
            for url, st in zip(urls, stats, strict=True)
        ]
        return fingerprint.object_parts(objects)

    def files_now(self) -> tuple[tuple[int, ...], str] | None:
        """The files' sizes (one stat per file) and their key as they are now (None: they
        cannot be stat'ed from here)."""
        stats = known_index.file_stats(self.config)
        if stats is None:
            return None
        return tuple(st.st_size for st in stats), known_index.key_of(self.config, stats)

    def lineage_columns(self) -> HdfColumns:
        """The optional columns of the lineage record's rows (crop, seed, valid)."""
        return HdfColumns.of(self.config)

    def index_lesson(self, learnt: object) -> IndexLesson | None:
        """What the handshake taught, as an index (None before it is built)."""
        return IndexLesson(self.config, learnt) if isinstance(learnt, Index) else None

    def source_lesson(self, learnt: object) -> None:
        """A source's kind and spec: an HDF5 feed learns none."""
        return None

    def source_kind(self, learnt: object) -> SourceKind | None:
        """The source kind a lineage row names: none for HDF5 rows."""
        return None

    def shards_in_workers(self, learnt: object) -> bool:
        """Whether the shards live in the workers (no joiner can help): never for files."""
        return False
