"""**generator**: anything iterable, each worker iterating its own shard. Detected, after the
datasets, as: an iterator (a generator object, e.g. the factory is a generator function:
each later pass calls the factory again, with ``epoch=`` the pass number if it takes it); an
object with ``generate_data()`` (each pass calls it); one with ``__iter__`` (each pass calls
``iter(obj)``); a callable (each pass calls ``obj()`` and iterates what it returns).

Units are PULLs: the next ``count`` elements of pass ``pass_`` (a new pass number starts a
new iteration); the DATA's samples are the elements' positions in their pass. With
``source_batched=True`` each item the generator yields is a batch, split into its samples.

Its check (:meth:`GeneratorSource.checks`, in the SOURCE_INFO of the first epoch): one digest
of the shard's first :data:`PROBE_GENERATOR_ELEMENTS` elements (fewer where the shard is
shorter, none where it is empty), which the trainer compares between the workers: copies that
begin alike forgot to shard (:func:`h5feed.consumer.sources.agreement.check_distinct_shards`).
The check is numbered by the shard (``worker``), so no two copies share an item number and a
trainer that compares items by number (every trainer before this check) never compares them.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Iterator
from typing import Any, ClassVar, Final

from h5feed.common.elements import tree
from h5feed.common.elements import values as elements
from h5feed.common.elements.values import ElementSpec
from h5feed.common.errors import SourceError
from h5feed.common.protocol import messages
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.producer.sources.kind import Element
from h5feed.producer.sources.user_code import UserCode
from h5feed.producer.worker import seeding
from h5feed.producer.worker.seeding import Purpose

#: Elements a generator yields first, kept and sent as its first elements, for the spec.
PROBE_GENERATOR_ELEMENTS: Final = 4
_END: Final = object()  # what _next returns when the iterator is exhausted


class GeneratorSource:
    """An iterable source (see the module docstring)."""

    kind: ClassVar[SourceKind] = SourceKind.GENERATOR
    convention: ClassVar[tree.Convention] = "tfdata"
    unit: ClassVar[type[messages.Items] | type[messages.Pull]] = messages.Pull
    length: ClassVar[None] = None

    def __init__(self, code: UserCode, obj: Any, batched: bool) -> None:
        self._code, self._obj, self._batched = code, obj, batched
        self._pass = code.first_epoch  # passes are numbered by their first epoch
        self._ordinal = 0
        self._iterator: Iterator[Any] | None = None
        self._probed: collections.deque[Any] = collections.deque()

    @classmethod
    def detects(cls, obj: Any) -> bool:
        return (
            isinstance(obj, Iterator)
            or hasattr(obj, "generate_data")
            or hasattr(obj, "__iter__")
            or callable(obj)
        )

    @classmethod
    def load(cls, code: UserCode, obj: Any, batched: bool) -> GeneratorSource:
        return cls(code, obj, batched)

    def probe(self) -> ElementSpec:
        """The spec of the first :data:`PROBE_GENERATOR_ELEMENTS` elements of this shard's
        first pass, which are kept and sent as its first elements."""
        code = self._code
        self._take_probe()
        if not self._probed:
            raise SourceError(
                f"source {code.path!r}: the generator of shard {code.worker} of "
                f"{code.workers} yields no element, so the element spec cannot be inferred"
            )
        samples = list(self._probed)
        names = [f"element #{i}" for i in range(len(samples))]
        try:
            return elements.infer_spec(samples, convention=self.convention, names=names)
        except SourceError as exc:
            raise SourceError(
                f"source {code.path!r}, the first elements of shard {code.worker}: {exc}"
            ) from exc

    def checks(self, epoch: int) -> tuple[messages.ItemCheck, ...]:
        """At the first epoch, before any unit: one check numbered by this shard, whose
        digest covers how many of the first :data:`PROBE_GENERATOR_ELEMENTS` elements there
        are and each one's :func:`~h5feed.producer.worker.seeding.item_digest` (the elements are
        kept and sent as the pass's first, as the probe's are); none for an empty shard (it
        duplicates nothing) or at a later epoch (a generator is asked no CHECK)."""
        if epoch != self._code.first_epoch or self._pass != epoch or self._ordinal:
            return ()
        self._take_probe()
        if not self._probed:
            return ()
        digest = hashlib.blake2b(b"%d:" % len(self._probed), digest_size=16)
        try:
            for element in self._probed:
                digest.update(seeding.item_digest(element, self.convention))
        except SourceError as exc:
            code = self._code
            raise SourceError(
                f"source {code.path!r}, the first elements of shard {code.worker}: {exc}"
            ) from exc
        return (messages.ItemCheck(self._code.worker, digest.digest(), True),)

    def elements(self, unit: messages.Items | messages.Pull) -> Iterator[Element]:
        if not isinstance(unit, messages.Pull):  # unreachable: the job checked the type
            raise SourceError(f"a {unit.KIND} unit for a generator source")
        for ordinal, element in self._take(unit.count, unit.pass_):
            yield ordinal, element, f"element #{ordinal} of pass {unit.pass_}"

    def _take_probe(self) -> None:
        """Keep up to :data:`PROBE_GENERATOR_ELEMENTS` of the first pass's first elements."""
        iterator = self._iterator_for(self._code.first_epoch)
        while len(self._probed) < PROBE_GENERATOR_ELEMENTS:
            element = self._next(iterator)
            if element is _END:
                break
            self._probed.append(element)

    def close(self) -> None:
        self._iterator = None
        self._probed.clear()

    def _take(self, count: int, pass_number: int) -> Iterator[tuple[int, Any]]:
        if pass_number != self._pass or self._iterator is None:
            if pass_number != self._pass:
                self._probed.clear()  # they belong to pass 0
            self._iterator = self._iterator_for(pass_number)
            self._pass = pass_number
            self._ordinal = 0
        iterator = self._iterator
        for _ in range(count):
            if self._probed:
                element = self._probed.popleft()
            else:
                element = self._next(iterator)
                if element is _END:
                    return
            ordinal = self._ordinal
            self._ordinal += 1
            yield ordinal, element

    def _iterator_for(self, pass_number: int) -> Iterator[Any]:
        if self._iterator is not None and pass_number == self._pass:
            return self._iterator
        code, obj = self._code, self._obj
        try:
            seeding.seed_for(code.seed, Purpose.PASS, pass_number, code.worker)
            if isinstance(obj, Iterator):
                if pass_number != code.first_epoch:
                    obj = self._obj = code.call(pass_number)
                iterable: Any = obj
            elif hasattr(obj, "generate_data"):
                iterable = obj.generate_data()
            elif hasattr(obj, "__iter__"):
                iterable = obj
            else:
                iterable = obj()
            iterator: Iterator[Any] = iter(iterable)
            if self._batched:
                iterator = self._unbatched(iterator)
        except Exception as exc:
            raise SourceError(
                f"source {code.path!r}: starting pass {pass_number} raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._iterator = iterator
        self._pass = pass_number
        return iterator

    def _unbatched(self, batches: Iterator[Any]) -> Iterator[Any]:
        """``source_batched=True``: each batch the generator yields, split into its samples
        along the first dimension, which every leaf must share."""
        code = self._code
        for number, batch in enumerate(batches):
            where = f"source {code.path!r}, batch #{number} of shard {code.worker}"
            try:
                description, pairs = tree.flatten_with_paths(batch)
            except tree.StructureError as exc:
                raise SourceError(
                    f"{where}: {elements.field_name(exc.path)}: {exc.reason}"
                ) from None
            leaves = [elements.as_leaf(value, path) for path, value in pairs]
            rows: dict[str, int] = {}
            for (path, _value), leaf in zip(pairs, leaves, strict=True):
                if isinstance(leaf, bytes) or leaf.ndim == 0:
                    raise SourceError(
                        f"{where}: {elements.field_name(path)} is a single value, not a batch "
                        "(source_batched=True: every field's first dimension is the batch's)"
                    )
                rows[path] = len(leaf)
            if len(set(rows.values())) > 1:
                shown = ", ".join(f"{elements.field_name(p)}: {n}" for p, n in rows.items())
                first = next(iter(rows.values()))
                odd = next(p for p, n in rows.items() if n != first)
                raise SourceError(
                    f"{where}: {elements.field_name(odd)} has another first dimension than "
                    f"the others ({shown}); with source_batched=True every field is a batch "
                    "of the same number of samples"
                )
            for row in range(next(iter(rows.values()), 0)):
                yield tree.unflatten(description, [leaf[row] for leaf in leaves])

    def _next(self, iterator: Iterator[Any]) -> Any:
        try:
            return next(iterator)
        except StopIteration:
            return _END
        except SourceError:  # source_batched=True: a batch that does not split says why
            raise
        except Exception as exc:
            code = self._code
            raise SourceError(
                f"source {code.path!r}: the generator of shard {code.worker} raised "
                f"{type(exc).__name__}: {exc} at element #{self._ordinal} of pass {self._pass}"
            ) from exc
