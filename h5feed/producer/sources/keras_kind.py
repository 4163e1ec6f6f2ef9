"""**keras**: a dataset whose class has a ``PyDataset`` or ``Sequence`` from a ``keras``/
``tensorflow`` module in its MRO (checked by name, so the worker never imports TensorFlow);
item ``i`` is a whole batch. Units are ITEMS of one batch index. ``on_epoch_end()`` is
called once for every epoch that ended, in every copy, before that epoch's first unit or
CHECK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Final

from h5feed.common.elements import tree
from h5feed.common.elements import values as elements
from h5feed.common.elements.values import ElementSpec
from h5feed.common.errors import SourceError
from h5feed.common.protocol import messages
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.producer.sources.items import Items, is_dataset, refuse_batched
from h5feed.producer.sources.kind import Element
from h5feed.producer.sources.user_code import UserCode
from h5feed.producer.worker import seeding
from h5feed.producer.worker.seeding import Purpose

_KERAS_CLASSES: Final = ("PyDataset", "Sequence")
_KERAS_MODULES: Final = ("keras", "tensorflow", "tf_keras")


class KerasSource:
    """A keras PyDataset or Sequence (see the module docstring)."""

    kind: ClassVar[SourceKind] = SourceKind.KERAS
    # a keras item's lists are fields, as in Keras, but for lists of numbers one row per
    # sample (arrays): decided by the probe, from the first and last batch, for good
    convention: ClassVar[tree.Convention] = "keras"
    unit: ClassVar[type[messages.Items] | type[messages.Pull]] = messages.Items

    def __init__(self, code: UserCode, obj: Any) -> None:
        self._code = code
        self._items = Items(code, obj, "batch")
        self._last_epoch = code.first_epoch

    @classmethod
    def detects(cls, obj: Any) -> bool:
        return is_dataset(obj) and any(
            c.__name__ in _KERAS_CLASSES and c.__module__.startswith(_KERAS_MODULES)
            for c in type(obj).__mro__
        )

    @classmethod
    def load(cls, code: UserCode, obj: Any, batched: bool) -> KerasSource:
        if batched:
            raise refuse_batched(code, cls.kind)
        return cls(code, obj)

    @property
    def length(self) -> int:
        return self._items.length

    def probe(self) -> ElementSpec:
        """The first and last batch; a batch's first dimension is its size, which the last
        one may not share: it is ``None`` in the spec."""
        length = self.length
        if length == 0:
            raise SourceError(f"source {self._code.path!r} is empty (len() is 0)")
        spec = self._items.probe(sorted({0, length - 1}), self.convention)
        return ElementSpec(
            spec.tree,
            tuple(
                elements.LeafSpec(leaf.path, leaf.dtype, (None, *leaf.shape[1:]))
                if leaf.shape
                else leaf
                for leaf in spec.leaves
            ),
        )

    def checks(self, epoch: int) -> tuple[messages.ItemCheck, ...]:
        """The first and last batch, after the ``on_epoch_end`` calls up to ``epoch``."""
        self._epoch_ends(epoch)
        length = self.length
        if not length:
            return ()
        return self._items.digests(sorted({0, length - 1}), epoch, self.convention)

    def elements(self, unit: messages.Items | messages.Pull) -> Iterator[Element]:
        if not isinstance(unit, messages.Items):  # unreachable: the job checked the type
            raise SourceError(f"a {unit.KIND} unit for a keras source")
        self._epoch_ends(unit.epoch)
        return self._items.take(unit, "batch")

    def close(self) -> None:
        return None

    def _epoch_ends(self, epoch: int) -> None:
        """``on_epoch_end()`` once for every epoch that ended since the last unit.

        A unit of an epoch this copy has already moved past (handed over from a lost worker
        after this one began the next epoch) gets a new copy, made and moved up to that epoch
        as every copy is (the same seeding): the object as it was in that epoch."""
        code = self._code
        if epoch < self._last_epoch:
            obj = code.construct()
            if len(obj) != self.length:
                raise SourceError(
                    f"source {code.path!r}: a new copy has length {len(obj)}, the "
                    f"first had {self.length}"
                )
            self._items.obj = obj
            self._last_epoch = code.first_epoch
        hook = getattr(self._items.obj, "on_epoch_end", None)
        while self._last_epoch < epoch:
            self._last_epoch += 1
            if callable(hook):
                try:
                    # The same in every copy: the one that ends (the epoch before this one).
                    seeding.seed_for(code.seed, Purpose.EPOCH_END, self._last_epoch - 1)
                    hook()
                except Exception as exc:
                    raise SourceError(
                        f"source {code.path!r}: on_epoch_end raised {type(exc).__name__}: {exc}"
                    ) from exc
