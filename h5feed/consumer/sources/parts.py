"""What every kind's scheduler does with a DATA part: check it against its unit and the
spec, and build a batch of elements from its fields."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from h5feed.common.elements import values as elements
from h5feed.common.elements.values import ElementSpec, Field, RaggedArray
from h5feed.common.protocol import messages
from h5feed.common.system.logs import IdsLogger
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.ledger import Ledger, Peer, Unit, W
from h5feed.consumer.core.malformed import drop_malformed
from h5feed.consumer.sources.options import SourceConfig


class Parts:
    """Checks a DATA part against its unit and the spec (one per iteration of a source)."""

    def __init__(
        self, source: SourceConfig, spec: ElementSpec, counters: Counters, log: IdsLogger
    ) -> None:
        self.source, self.spec = source, spec
        self.counters = counters
        self.log = log

    def accept(
        self, ledger: Ledger[W], peer: Peer, data: messages.Data, fits: Callable[[W], bool]
    ) -> tuple[Unit[W], list[Field]] | None:
        """The unit ``data`` answers (now complete) and its fields; None, counted, for a
        part that is not expected from ``peer``; a part that does not ``fits`` its unit or
        whose arrays do not fit the spec is malformed (:mod:`h5feed.consumer.core.malformed`:
        ProtocolError from a local worker, dropped and warned from a remote one)."""
        unit = ledger.get(data.unit)
        if unit is None or unit.peer is not peer:
            self.counters.dropped_parts += 1
            self.log.warning("dropped %s", f"an unexpected part (unit {data.unit}) from {peer}")
            return None
        if not fits(unit.work):
            drop_malformed(peer, unit.id, "other samples", self.counters, self.log)
            return None
        try:
            fields = elements.unpack(self.spec, data.arrays, len(data.samples))
        except ValueError as exc:
            drop_malformed(peer, unit.id, str(exc), self.counters, self.log)
            return None
        ledger.complete(peer, unit.id)
        return unit, fields

    def malformed(self, peer: Peer, why: str) -> None:
        """A control message that fits no question: counted, logged."""
        self.counters.malformed_messages += 1
        self.log.warning("dropped %s from %s", why, peer)

    def batch(self, epoch: int, index: int, fields: list[Field], rows: int) -> Batch:
        """The batch of ``rows`` elements whose fields are ``fields`` (ragged or padded as
        the source says)."""
        values: list[Any] = [
            RaggedArray(f.values, f.lengths, leaf.variable_axes[0])
            if f.lengths is not None and self.source.is_ragged(leaf.path)
            else f.values
            for leaf, f in zip(self.spec.leaves, fields, strict=True)
        ]

        def lengths(i: int) -> Any:
            return None if isinstance(values[i], RaggedArray) else fields[i].lengths

        element = elements.build_batch(self.spec, values, lengths)
        return Batch(epoch, index, {}, element, rows, elements.nbytes(fields))

    def whole_batch(self, epoch: int, index: int, fields: list[Field]) -> Batch:
        """The batch that is the one item of ``fields`` (a keras item), not batched again."""
        items = [f.values[0] for f in fields]
        element = elements.build_batch(self.spec, items, lambda i: None)
        first = fields[0].values if fields else None
        rows = int(first.shape[1]) if first is not None and first.ndim > 1 else 1
        return Batch(epoch, index, {}, element, rows, elements.nbytes(fields))
