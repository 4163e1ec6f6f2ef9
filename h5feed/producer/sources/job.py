"""One source job in a worker: the user's object, its kind, and the messages it answers.

It follows the worker's job protocol (:class:`~h5feed.producer.worker.job.Job`): the worker's
event loop (:mod:`h5feed.producer.worker.loop`) sends what it makes and counts it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Self

import numpy as np

from h5feed.common.elements import values as elements
from h5feed.common.elements.values import ElementSpec
from h5feed.common.errors import SourceError
from h5feed.common.protocol import messages
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.producer.sources.detect import detect_kind
from h5feed.producer.sources.kind import KindSource
from h5feed.producer.sources.user_code import UserCode
from h5feed.producer.worker import import_path, loaded_code
from h5feed.producer.worker.code_policy import CodePolicy
from h5feed.producer.worker.job import JobContext, Produced


class SourceJob:
    """One source job in this worker: the user's object, loaded as its kind.

    SOURCE_INFO tells the kind, length and spec; each unit (ITEMS of a map or keras source,
    PULL of a generator: :mod:`h5feed.producer.sources`) is answered by one DATA. A unit of
    another kind's type, an index out of range, or an element that does not match the spec
    raises :class:`SourceError` (the worker sends it as ERROR). Not thread-safe: the
    worker's single event-loop thread uses it.
    """

    STARTS: ClassVar[type[messages.Message]] = messages.Source
    UNITS: ClassVar[tuple[type[messages.Message], ...]] = (messages.Items, messages.Pull)
    DESCRIBED: ClassVar[str] = "a source"

    def __init__(self, source: messages.Source, local: bool, policy: CodePolicy) -> None:
        self.id = source.job
        self.code = UserCode(source, local, policy)  # loads the factory's module
        loaded_code.check(source.code)  # another copy of it than the trainer's: refused
        self.path = self.code.path
        self.first_epoch = source.epoch
        obj = self.code.construct()
        import_path.single_threaded_torch()  # the factory may import torch lazily
        self.source: KindSource = detect_kind(obj).load(self.code, obj, source.batched)
        self.spec: ElementSpec | None = None
        self._told = False  # its SOURCE_INFO was made (the first SOURCE answered)

    @classmethod
    def open(cls, start: messages.Source, context: JobContext) -> Self:
        """The job a first SOURCE starts: loads the user's code (its module, its factory)."""
        return cls(start, context.local, context.code_policy)

    def take(self, start: messages.Source) -> Iterator[messages.SourceInfo]:
        """The first SOURCE is answered with SOURCE_INFO (its spec taken if it gives one:
        known already, no probe needed); a later one gives the element spec, unanswered."""
        if self._told:
            self.set_spec(start.spec)
            return
        self._told = True
        if start.spec is not None:
            self.set_spec(start.spec)
        yield self.info()

    @property
    def kind(self) -> SourceKind:
        return self.source.kind

    @property
    def length(self) -> int | None:
        return self.source.length

    def close(self) -> None:
        self.source.close()

    def info(self) -> messages.SourceInfo:
        """The SOURCE_INFO: kind, length, and the spec: the one the job gave (given by the
        user, or learnt by an earlier iteration), else inferred from a probe."""
        spec = self.spec if self.spec is not None else self.source.probe()
        return self._info(spec, self.first_epoch)

    reads_ahead = False  # the user's code reads: nothing to fetch ahead

    def expect(self, units: Sequence[messages.Items | messages.Pull]) -> None:
        """Nothing: a source job does not read ahead."""

    def check(self, check: messages.Check) -> messages.SourceInfo:
        """The answer to a CHECK: this copy's digests at the start of its epoch (keras:
        after the ``on_epoch_end`` calls up to it)."""
        if self.spec is None:
            raise SourceError("a CHECK arrived before the element spec")
        return self._info(self.spec, check.epoch)

    def _info(self, spec: ElementSpec, epoch: int) -> messages.SourceInfo:
        checks = self.source.checks(epoch)
        return messages.SourceInfo(
            self.id, self.kind.value, self.length, spec.to_wire(), epoch, checks
        )

    def set_spec(self, value: Any) -> None:
        self.spec = ElementSpec.from_wire(value)

    def produce(self, unit: messages.Items | messages.Pull) -> Produced:
        """The DATA answering one unit (its fields were checked when it was decoded), and
        the bytes of its arrays."""
        spec = self.spec
        if spec is None:
            raise SourceError("a unit arrived before the element spec")
        if not isinstance(unit, self.source.unit):
            raise SourceError(f"a {unit.KIND} unit for a {self.kind} source {self.path!r}")
        leaves: list[list[np.ndarray | bytes]] = []
        samples: list[int] = []
        code = self.code
        for sample, element, where in self.source.elements(unit):
            try:
                leaves.append(
                    elements.flatten_checked(element, spec, convention=self.source.convention)
                )
            except SourceError as exc:
                raise SourceError(
                    f"source {self.path!r}, {where} (worker {code.worker} of {code.workers}): {exc}"
                ) from None
            samples.append(sample)
        arrays = dict(elements.pack(spec, leaves))
        nbytes = sum(array.nbytes for array in arrays.values())
        return messages.Data(self.id, unit.unit, unit.batch, tuple(samples), arrays), nbytes
