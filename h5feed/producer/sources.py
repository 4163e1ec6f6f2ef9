"""The user's own Python code in a worker: a source named by an import path.

A source job names ``"package.module:factory"`` and msgpack-able ``args``; the worker imports
the module (never unpickles anything) and calls ``factory(**args)``, adding the keyword
arguments ``shard_index`` (this worker's position among the job's workers, within the
trainer's shard: ``i * W + w`` with ``shard=(i, n)`` and W workers), ``shard_count``
(``n * W``), ``seed`` (the dataset's, the same in every worker) and ``epoch`` (the
iteration's first epoch; a later pass of a generator function gets the epoch it starts in)
for each that the factory's signature names explicitly.

The kind of source is detected from the object the factory returns, in this order:

1. ``__len__`` and ``__getitem__``, and a class in its MRO named ``PyDataset`` or ``Sequence``
   from a ``keras``/``tensorflow`` module: **keras** — item ``i`` is a whole batch (checked by
   name, so the worker never imports TensorFlow itself);
2. ``__len__`` and ``__getitem__`` (not a dict): **map** — item ``i`` is one element;
3. an iterator (a generator object, e.g. the factory is a generator function): **generator**;
   each later pass calls the factory again (with ``epoch=`` the pass number if it takes it);
4. a ``generate_data()`` method: **generator**, each pass calls ``generate_data()``;
5. ``__iter__``: **generator**, each pass calls ``iter(obj)``;
6. callable: **generator**, each pass calls ``obj()`` and iterates what it returns.

Anything else raises :class:`SourceError`. A worker whose user code imported torch runs
``torch.set_num_threads(1)`` once the factory returned, as PyTorch's DataLoader workers do;
tensor fields are taken as :mod:`h5feed.common.elements` says (by class, never importing torch).

Errors of the user's code (import, factory, item, generator) are raised as SourceError naming
the source and the index or element, chained to the original exception, so the worker's
traceback (sent to the trainer) shows the user's frames.
"""

from __future__ import annotations

import collections
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import numpy as np

from h5feed.common import elements, messages, tree
from h5feed.common.elements import ElementSpec
from h5feed.common.errors import SourceError
from h5feed.common.import_paths import ImportPathError
from h5feed.common.source_kinds import SourceKind
from h5feed.producer import import_path, seeding
from h5feed.producer.code_policy import CodePolicy
from h5feed.producer.seeding import Purpose

MAP: Final = SourceKind.MAP
KERAS: Final = SourceKind.KERAS
GENERATOR: Final = SourceKind.GENERATOR

#: Elements a map source reads, spread over the dataset, to infer the element spec.
PROBE_ELEMENTS: Final = 8
#: Elements a generator yields first, kept and sent as its first elements, for the spec.
PROBE_GENERATOR_ELEMENTS: Final = 4

_KERAS_CLASSES = ("PyDataset", "Sequence")
_KERAS_MODULES = ("keras", "tensorflow", "tf_keras")
_END: Final = object()  # what _next returns when the iterator is exhausted


def load_factory(path: str, policy: CodePolicy) -> Callable[..., Any]:
    """The factory named ``"package.module:attribute"`` (the attribute may be dotted where
    ``policy`` is trusted); SourceError naming the path, CodeRefused when ``policy`` refuses
    it (nothing imported)."""
    try:
        return import_path.load_callable(path, policy)
    except ImportPathError as exc:
        raise SourceError(f"source {path!r} {exc}") from exc


def call_accepting(
    function: Callable[..., Any], args: Mapping[str, Any], extra: Mapping[str, Any]
) -> Any:
    """``function(**args, **extra')`` where extra' holds the ``extra`` keywords that the
    signature names explicitly (and ``args`` does not set)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin without a signature: no extras
        parameters = {}  # type: ignore[assignment]
    accepted = {k: v for k, v in extra.items() if k in parameters and k not in args}
    return function(**args, **accepted)


def detect_kind(obj: Any) -> SourceKind:
    """The kind of source ``obj`` is (see the module docstring for the order)."""
    if hasattr(obj, "__len__") and hasattr(obj, "__getitem__"):
        if isinstance(obj, (Mapping, str, bytes)):
            raise SourceError(f"a {type(obj).__name__} is not a source (a list or dataset is)")
        if any(
            cls.__name__ in _KERAS_CLASSES and cls.__module__.startswith(_KERAS_MODULES)
            for cls in type(obj).__mro__
        ):
            return KERAS
        return MAP
    if isinstance(obj, Iterator) or hasattr(obj, "generate_data") or hasattr(obj, "__iter__"):
        return GENERATOR
    if callable(obj):
        return GENERATOR
    raise SourceError(
        f"the factory returned a {type(obj).__name__}, which is none of: a dataset "
        "(__len__ + __getitem__), a keras PyDataset, an iterator or generator, an object with "
        "generate_data() or __iter__, or a callable returning an iterable"
    )


class SourceJob:
    """One source job in this worker: the user's object, its kind and the unit producer.

    Units: map — an ITEMS of element indices; keras — an ITEMS of one batch index;
    generator — a PULL: the next ``count`` elements of iteration ``pass_`` (a new pass number
    starts a new iteration). DATA ``samples``: the indices, the batch index, or the elements'
    positions in their pass. A unit of the other kind, an index out of range, or an element
    that does not match the spec raises :class:`SourceError` (the worker sends it as ERROR).
    Not thread-safe: the worker's single event-loop thread uses it.
    """

    def __init__(self, source: messages.Source, local: bool, policy: CodePolicy) -> None:
        self.id = source.job
        self.path = source.source
        self.args: dict[str, Any] = dict(source.args)
        if local:  # the trainer's own modules, where it found them (same host, same files)
            for entry in source.sys_path:
                if entry not in sys.path:
                    sys.path.append(entry)
        if not all(isinstance(k, str) for k in self.args):
            raise SourceError(f"source {self.path!r}: argument names must be str")
        self.worker = source.worker
        self.workers = source.workers
        self.seed = source.seed
        self.first_epoch = source.epoch
        self.batched = source.batched
        self.factory = load_factory(self.path, policy)
        self.obj = self._construct()
        import_path.single_threaded_torch()  # the factory may import torch lazily
        self.kind = detect_kind(self.obj)
        if self.batched and self.kind != GENERATOR:
            raise SourceError(
                f"source {self.path!r}: source_batched=True takes a generator of batches; "
                f"this source is a {self.kind} source (a dataset whose items are whole batches "
                "is a keras Sequence/PyDataset, taken as it is)"
            )
        self.length: int | None = None
        if self.kind != GENERATOR:
            self.length = len(self.obj)
        self.spec: ElementSpec | None = None
        self._pass = self.first_epoch  # a generator's passes are numbered by their first epoch
        self._ordinal = 0
        self._iterator: Iterator[Any] | None = None
        self._probed: collections.deque[Any] = collections.deque()
        self._last_epoch = self.first_epoch

    def _construct(self) -> Any:
        """A new copy of the user's object, made after the same seeding in every worker: one
        object, as if it lived in the trainer."""
        try:
            seeding.seed_for(self.seed, Purpose.CONSTRUCT, self.first_epoch)
            return call_accepting(self.factory, self.args, self._extra(self.first_epoch))
        except Exception as exc:
            raise SourceError(
                f"source {self.path!r}: the factory raised {type(exc).__name__}: {exc}"
            ) from exc

    def _extra(self, epoch: int) -> dict[str, Any]:
        return {
            "shard_index": self.worker,
            "shard_count": self.workers,
            "seed": self.seed,
            "epoch": epoch,
        }

    def close(self) -> None:
        self._iterator = None
        self._probed.clear()

    # -- the spec --------------------------------------------------------------------------

    def info(self) -> messages.SourceInfo:
        """The SOURCE_INFO: kind, length, and the spec: the one the job gave (given by the
        user, or learnt by an earlier iteration), else inferred from a probe."""
        spec = self.spec if self.spec is not None else self.probe()
        checks = self.checks(self.first_epoch)
        return messages.SourceInfo(
            self.id, self.kind, self.length, spec.to_wire(), self.first_epoch, checks
        )

    def check(self, epoch: int) -> messages.SourceInfo:
        """The answer to a CHECK: this copy's :meth:`checks` at the start of ``epoch`` (keras:
        after the ``on_epoch_end`` calls up to it)."""
        spec = self.spec
        if spec is None:
            raise SourceError("a CHECK arrived before the element spec")
        if self.kind == KERAS:
            self._epoch_ends(epoch)
        checks = self.checks(epoch)
        return messages.SourceInfo(self.id, self.kind, self.length, spec.to_wire(), epoch, checks)

    def checks(self, epoch: int) -> tuple[messages.ItemCheck, ...]:
        """This copy's digest of the items every copy fetches (map: the first, middle and
        last item; keras: the first and last batch), each fetched twice under the same
        seeding: ``reproducible`` says whether both fetches were the same. Generators: none
        (each copy has its own shard)."""
        if self.kind == GENERATOR or not self.length:
            return ()
        length = self.length
        indices = sorted({0, length - 1} if self.kind == KERAS else {0, length // 2, length - 1})
        convention: tree.Convention = "keras" if self.kind == KERAS else "tfdata"
        out = []
        for index in indices:
            first, again = (
                seeding.item_digest(self._item(index, epoch), convention) for _ in range(2)
            )
            out.append(messages.ItemCheck(index, first, first == again))
        return tuple(out)

    def probe(self) -> ElementSpec:
        """The spec of the first elements (see ``elements.infer_spec``)."""
        if self.kind == GENERATOR:
            iterator = self._iterator_for(self.first_epoch)
            while len(self._probed) < PROBE_GENERATOR_ELEMENTS:
                element = self._next(iterator)
                if element is _END:
                    break
                self._probed.append(element)
            if not self._probed:
                raise SourceError(
                    f"source {self.path!r}: the generator of shard {self.worker} of "
                    f"{self.workers} yields no element, so the element spec cannot be inferred"
                )
            samples = list(self._probed)
            where = "the first elements of shard " + str(self.worker)
            names = [f"element #{i}" for i in range(len(samples))]
        else:
            length = self.length or 0
            if length == 0:
                raise SourceError(f"source {self.path!r} is empty (len() is 0)")
            count = 2 if self.kind == KERAS else min(PROBE_ELEMENTS, length)
            if self.kind == KERAS:
                indices = sorted({0, length - 1})
            else:
                indices = sorted(
                    {(j * length // count + self.worker) % length for j in range(count)}
                )
            samples = [self._item(i, self.first_epoch) for i in indices]
            where = f"items {indices}"
            names = [f"{'batch' if self.kind == KERAS else 'item'} {i}" for i in indices]
        try:
            # a keras item's lists are fields, as in Keras, but for lists of numbers one row
            # per sample (arrays): decided here, from the first and last batch, for good
            keras = self.kind == KERAS
            spec = elements.infer_spec(
                samples, convention="keras" if keras else "tfdata", names=names
            )
        except SourceError as exc:
            raise SourceError(f"source {self.path!r}, {where}: {exc}") from exc
        if self.kind == KERAS:  # a batch's first dimension is its size: the last one differs
            spec = ElementSpec(
                spec.tree,
                tuple(
                    elements.LeafSpec(leaf.path, leaf.dtype, (None, *leaf.shape[1:]))
                    if leaf.shape
                    else leaf
                    for leaf in spec.leaves
                ),
            )
        return spec

    def set_spec(self, value: Any) -> None:
        self.spec = ElementSpec.from_wire(value)

    # -- units -----------------------------------------------------------------------------

    def produce(self, unit: messages.Items | messages.Pull) -> messages.Data:
        """The DATA answering one unit (its fields were checked when it was decoded)."""
        spec = self.spec
        if spec is None:
            raise SourceError("a unit arrived before the element spec")
        if isinstance(unit, messages.Pull) != (self.kind == GENERATOR):
            raise SourceError(f"a {unit.KIND} unit for a {self.kind} source {self.path!r}")
        leaves: list[list[np.ndarray | bytes]] = []
        samples: list[int] = []
        if isinstance(unit, messages.Pull):
            for ordinal, element in self._take(unit.count, unit.pass_):
                leaves.append(self._checked(element, f"element #{ordinal} of pass {unit.pass_}"))
                samples.append(ordinal)
        else:
            if self.kind == KERAS:
                self._epoch_ends(unit.epoch)
            samples = list(unit.items)
            length = self.length or 0
            for index in unit.items:
                if not 0 <= index < length:
                    raise SourceError(f"index {index} out of range (length {length})")
                where = f"batch {index}" if self.kind == KERAS else f"index {index}"
                leaves.append(self._checked(self._item(index, unit.epoch), where))
        arrays = dict(elements.pack(spec, leaves))
        return messages.Data(self.id, unit.unit, unit.batch, tuple(samples), arrays)

    def _checked(self, element: Any, where: str) -> list[np.ndarray | bytes]:
        spec = self.spec
        if spec is None:  # unreachable: produce() checked it
            raise SourceError("no element spec")
        try:
            keras = self.kind == KERAS
            return elements.flatten_checked(
                element, spec, convention="keras" if keras else "tfdata"
            )
        except SourceError as exc:
            raise SourceError(
                f"source {self.path!r}, {where} (worker {self.worker} of {self.workers}): {exc}"
            ) from None

    def _item(self, index: int, epoch: int) -> Any:
        seeding.seed_for(self.seed, Purpose.ITEM, epoch, index)
        try:
            return self.obj[index]
        except Exception as exc:
            what = "batch" if self.kind == KERAS else "item"
            raise SourceError(
                f"source {self.path!r}: {what} {index} raised {type(exc).__name__}: {exc}"
            ) from exc

    def _epoch_ends(self, epoch: int) -> None:
        """keras: ``on_epoch_end()`` once for every epoch that ended since the last unit.

        A unit of an epoch this copy has already moved past (handed over from a lost worker
        after this one began the next epoch) gets a new copy, made and moved up to that epoch
        as every copy is (the same seeding): the object as it was in that epoch."""
        if epoch < self._last_epoch:
            self.obj = self._construct()
            if len(self.obj) != self.length:
                raise SourceError(
                    f"source {self.path!r}: a new copy has length {len(self.obj)}, the "
                    f"first had {self.length}"
                )
            self._last_epoch = self.first_epoch
        hook = getattr(self.obj, "on_epoch_end", None)
        while self._last_epoch < epoch:
            self._last_epoch += 1
            if callable(hook):
                try:
                    # The same in every copy: the one that ends (the epoch before this one).
                    seeding.seed_for(self.seed, Purpose.EPOCH_END, self._last_epoch - 1)
                    hook()
                except Exception as exc:
                    raise SourceError(
                        f"source {self.path!r}: on_epoch_end raised {type(exc).__name__}: {exc}"
                    ) from exc

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
        obj = self.obj
        try:
            seeding.seed_for(self.seed, Purpose.PASS, pass_number, self.worker)
            if isinstance(obj, Iterator):
                if pass_number != self.first_epoch:
                    obj = call_accepting(self.factory, self.args, self._extra(pass_number))
                    self.obj = obj
                iterable: Any = obj
            elif hasattr(obj, "generate_data"):
                iterable = obj.generate_data()
            elif hasattr(obj, "__iter__"):
                iterable = obj
            else:
                iterable = obj()
            iterator: Iterator[Any] = iter(iterable)
            if self.batched:
                iterator = self._unbatched(iterator)
        except Exception as exc:
            raise SourceError(
                f"source {self.path!r}: starting pass {pass_number} raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._iterator = iterator
        self._pass = pass_number
        return iterator

    def _unbatched(self, batches: Iterator[Any]) -> Iterator[Any]:
        """``source_batched=True``: each batch the generator yields, split into its samples
        along the first dimension, which every leaf must share."""
        for number, batch in enumerate(batches):
            try:
                description, pairs = tree.flatten_with_paths(batch)
            except tree.StructureError as exc:
                raise SourceError(
                    f"source {self.path!r}, batch #{number} of shard {self.worker}: "
                    f"{elements.field_name(exc.path)}: {exc.reason}"
                ) from None
            leaves = [elements.as_leaf(value, path) for path, value in pairs]
            rows: dict[str, int] = {}
            for (path, _value), leaf in zip(pairs, leaves, strict=True):
                if isinstance(leaf, bytes) or leaf.ndim == 0:
                    raise SourceError(
                        f"source {self.path!r}, batch #{number} of shard {self.worker}: "
                        f"{elements.field_name(path)} is a single value, not a batch "
                        "(source_batched=True: every field's first dimension is the batch's)"
                    )
                rows[path] = len(leaf)
            if len(set(rows.values())) > 1:
                shown = ", ".join(f"{elements.field_name(p)}: {n}" for p, n in rows.items())
                first = next(iter(rows.values()))
                odd = next(p for p, n in rows.items() if n != first)
                raise SourceError(
                    f"source {self.path!r}, batch #{number} of shard {self.worker}: "
                    f"{elements.field_name(odd)} has another first dimension than the others "
                    f"({shown}); with source_batched=True every field is a batch of the same "
                    "number of samples"
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
            raise SourceError(
                f"source {self.path!r}: the generator of shard {self.worker} raised "
                f"{type(exc).__name__}: {exc} at element #{self._ordinal} of pass {self._pass}"
            ) from exc
