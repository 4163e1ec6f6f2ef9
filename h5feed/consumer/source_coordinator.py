"""The coordinator of a user source (``source=``): the same thread, socket, credits, timeouts
and errors as the HDF5 :class:`Coordinator`, with the source's handshake, plan and batches.

Handshake: every worker gets a SOURCE job (its shard index and count, the seed), loads the
user's code and answers SOURCE_INFO (kind, length, and the spec of its first elements, unless
the job gave a spec: the user's ``output_signature``, or the one an earlier iteration learnt).
The kinds and lengths must agree; the element spec is the given one or the merge of the
workers' (dimensions that differ become ``None``). A second SOURCE gives every worker that
spec, which it checks every element against.

Plans, by kind (see ``h5feed.producer.sources``):

* map: each epoch's order of the ``length`` items is :func:`plan.epoch_order` (seeded
  permutation, shard); batches of ``batch_size`` consecutive items (the last partial unless
  ``drop_remainder``); each batch is one unit, sent to the worker holding the fewest units
  (every worker can serve any item). Exactly once, and the same batches whatever the number
  of workers; released in plan order when ``deterministic``.
* keras: the same over the ``length`` batch indices, one item per unit, not re-batched.
* generator: each worker iterates its own shard; a unit asks one worker for its next
  ``batch_size`` elements, and that answer is one batch (batches are per worker, released as
  they arrive). A worker that answers fewer elements has finished its pass. Without
  ``steps_per_epoch`` an epoch ends when every worker's pass has ended, and the next epoch
  starts new passes; with it, an epoch is ``steps_per_epoch`` batches and passes carry on
  across epochs (a worker whose pass ended starts a new one at the next epoch; an epoch ends
  short, with a warning, if every pass ends first).
"""

from __future__ import annotations

import itertools
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from h5feed.common import elements, wire
from h5feed.common.elements import ElementSpec, Field, RaggedArray
from h5feed.common.errors import H5FeedError, SourceError, WorkerDiedError, WorkerTimeoutError
from h5feed.consumer.assembly import Batch
from h5feed.consumer.coordinator import Coordinator
from h5feed.consumer.plan import epoch_order
from h5feed.consumer.source_options import Learnt, SourceConfig
from h5feed.consumer.work import Peer, Unit

_log = logging.getLogger("h5feed.consumer")

MAP, KERAS, GENERATOR = "map", "keras", "generator"
_KINDS = (MAP, KERAS, GENERATOR)


class SourceCoordinator(Coordinator):
    """Runs one iteration of a user source (see the module docstring)."""

    def __init__(
        self, config: SourceConfig, *args: Any, learnt: Learnt | None = None, **kwargs: Any
    ) -> None:
        super().__init__(config, *args, **kwargs)
        self.source: SourceConfig = config
        # Given (output_signature), else what an earlier iteration learnt, else probed.
        self.spec: ElementSpec | None = learnt.spec if learnt is not None else config.spec
        self.kind: str | None = learnt.kind if learnt is not None else None
        self.length: int | None = None
        self._infos: dict[bytes, dict[str, Any]] = {}
        self._first_epoch: int | None = None
        self._unit_info: dict[int, tuple[int, int, int]] = {}  # unit -> (epoch, position, slot)
        self._complete: dict[int, Batch] = {}
        self._released_count = 0
        self._next_release = 0
        self._planned: Iterator[tuple[int, int, list[int]]] = iter(())
        # generator state
        self._epoch: int | None = None
        self._active: set[int] = set()
        self._ended: set[int] = set()
        self._passes: dict[int, int] = {}
        self._epoch_batches = 0
        self._epoch_expected = 0

    # -- handshake -------------------------------------------------------------------------

    def _handshake(self) -> None:
        if not self._wait_for_peers():
            return
        self._assigned = True
        self._slots = sorted(self._peers)
        first = next(self._epochs, None)
        if first is not None:
            self._epochs = itertools.chain([first], self._epochs)
        self._first_epoch = first if first is not None else 0
        for identity in self._slots:  # with a known spec (given or learnt), no probe
            self._send_source(self._peers[identity], self.spec)
        last_progress = time.monotonic()
        timeout = self.config.options.unit_timeout_s
        while len(self._infos) < len(self._slots):
            if self._stop.is_set():
                return
            count = len(self._infos)
            self._pump()
            if len(self._infos) > count:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > timeout:
                waiting = [self._peers[i].name for i in self._slots if i not in self._infos]
                raise WorkerTimeoutError(
                    f"workers {waiting} did not load source {self.source.source!r} within "
                    f"{timeout:g} s (unit_timeout_s)"
                )
        self._agree()
        spec = self.spec
        if spec is None:  # unreachable: _agree sets it
            raise SourceError("no element spec")
        for identity in self._slots:
            self._send_source(self._peers[identity], spec)
        if self.kind != GENERATOR:
            self._planned = self._plan()

    def _send_source(self, peer: Peer, spec: ElementSpec | None) -> None:
        shard_index, shard_count = self.config.options.shard
        self._send(
            peer,
            wire.SOURCE,
            {
                "job": self.job_id,
                "source": self.source.source,
                "args": dict(self.source.args),
                "sys_path": list(self.source.sys_path or sys.path),
                # The worker's shard of this trainer's shard (shard=(i, n)): i * W + w of n * W.
                "worker": shard_index * len(self._slots) + self._slots.index(peer.identity),
                "workers": shard_count * len(self._slots),
                "seed": self.config.options.seed,
                "epoch": self._first_epoch or 0,
                "spec": spec.to_wire() if spec is not None else None,
            },
        )

    def _agree(self) -> None:
        """Kind, length and spec from the workers' answers; SourceError where they differ."""
        infos = [self._infos[i] for i in self._slots]
        names = [self._peers[i].name for i in self._slots]
        kinds = {info["kind"] for info in infos}
        if len(kinds) != 1:
            raise SourceError(f"the workers found different kinds of source: {sorted(kinds)}")
        self.kind = kinds.pop()
        if self.kind != GENERATOR:
            lengths = [info["length"] for info in infos]
            if len(set(lengths)) != 1 or lengths[0] is None:
                raise SourceError(
                    f"source {self.source.source!r} has different lengths in the workers "
                    f"{dict(zip(names, lengths, strict=True))}; a map-style source must be "
                    "the same in every worker"
                )
            self.length = int(lengths[0])
        probed = ElementSpec.from_wire(infos[0]["spec"])
        for info, name in zip(infos[1:], names[1:], strict=True):
            try:
                probed = elements.merge_specs(probed, ElementSpec.from_wire(info["spec"]))
            except SourceError as exc:
                raise SourceError(f"source {self.source.source!r}, worker {name}: {exc}") from None
        if self.spec is None:
            self.spec = probed
        elif self.spec.tree != probed.tree:
            paths = [leaf.path for leaf in probed.leaves]
            given = [leaf.path for leaf in self.spec.leaves]
            raise SourceError(
                f"source {self.source.source!r}: output_signature has the fields {given}, "
                f"the elements have {paths}"
            )
        spec = self.spec
        if spec.wire_arrays() > wire.DEFAULT_LIMITS.max_arrays:
            raise SourceError(
                f"elements of {len(spec.leaves)} fields need {spec.wire_arrays()} arrays per "
                f"message, more than the wire allows ({wire.DEFAULT_LIMITS.max_arrays})"
            )
        padded = [
            bool(leaf.variable_axes) and not self.source.is_ragged(leaf.path)
            for leaf in spec.leaves
        ]
        if self.kind != KERAS:
            elements.check_length_names(spec, lambda i: padded[i])
        for leaf in spec.leaves:
            ragged = self.kind != KERAS and self.source.is_ragged(leaf.path)
            if ragged and leaf.variable_axes and leaf.variable_axes != (0,):
                raise SourceError(
                    f"{elements.field_name(leaf.path)} ({leaf.describe()}): ragged= takes "
                    "fields whose first dimension only varies"
                )

    def _on_other(self, peer: Peer, message: wire.Message) -> None:
        if message.kind != wire.SOURCE_INFO:
            super()._on_other(peer, message)
            return
        fields = message.fields
        try:
            ElementSpec.from_wire(fields["spec"])
        except SourceError as exc:
            self._drop(f"source info from {peer.name}: {exc}")
            return
        if fields["kind"] not in _KINDS:
            self._drop(f"source info from {peer.name}: unknown kind {fields['kind']!r}")
            return
        self._infos[peer.identity] = fields

    # -- map / keras plan ------------------------------------------------------------------

    def _plan(self) -> Iterator[tuple[int, int, list[int]]]:
        """(epoch, position, items) of each batch of each epoch."""
        options = self.config.options
        plan_options = options.plan_options()
        length = self.length or 0
        per_batch = 1 if self.kind == KERAS else options.batch_size
        for epoch in self._epochs:
            order = epoch_order(length, plan_options, epoch)
            batches = len(order) // per_batch
            if self.kind != KERAS and not options.drop_remainder:
                batches = -(-len(order) // per_batch)
            if batches == 0:
                raise H5FeedError(
                    f"an epoch has no batch: {len(order)} items in shard {options.shard} of "
                    f"{length}, batch_size={options.batch_size}, "
                    f"drop_remainder={options.drop_remainder}"
                )
            for position in range(batches):
                items = order[position * per_batch : (position + 1) * per_batch]
                yield epoch, position, items.tolist()

    # -- dispatch --------------------------------------------------------------------------

    def _dispatch(self) -> None:
        if self.kind == GENERATOR:
            self._dispatch_generator()
            return
        budget = self.config.options.inflight_batches
        while not self._plan_done and self._dispatched - self._taken < budget:
            item = next(self._planned, None)
            if item is None:
                self._plan_done = True
                return
            epoch, position, items = item
            seq = self._dispatched
            self._count_dispatch()
            slot = self._least_loaded(range(len(self._slots)))
            self._send_unit(slot, seq, epoch, position, items)

    def _least_loaded(self, slots: Any) -> int:
        live = [s for s in slots if self._slots[s] in self._peers]
        if not live:
            raise WorkerDiedError("no worker is left to serve the source")
        chosen: int = min(live, key=lambda s: (len(self._peers[self._slots[s]].outstanding), s))
        return chosen

    def _send_unit(self, slot: int, seq: int, epoch: int, position: int, rows: list[int]) -> None:
        # A source's elements always travel over the socket: no shared-memory slot.
        peer = self._peers[self._slots[slot]]
        # Known before the send: a failed send hands the unit over, which reads it.
        self._unit_info[self._next_unit] = (epoch, position, slot)
        self._issue_unit(peer, seq, epoch, rows, np.arange(len(rows)), list(rows), None)

    def _dispatch_generator(self) -> None:
        options = self.config.options
        steps = self.source.steps_per_epoch
        while not self._plan_done:
            if self._epoch is None:
                if self._units:
                    return  # the previous epoch's last answers are on their way
                epoch = next(self._epochs, None)
                if epoch is None:
                    self._plan_done = True
                    return
                self._start_epoch(epoch)
            epoch = self._epoch
            if epoch is None:  # unreachable: just started
                return
            full = steps is not None and self._epoch_expected >= steps
            if not self._active or full:
                if self._units:
                    return
                self._end_epoch(epoch)
                continue
            if self._dispatched - self._taken >= options.inflight_batches:
                return
            slot = self._least_loaded(sorted(self._active))
            self._count_dispatch()
            self._epoch_expected += 1
            rows = [options.batch_size, self._passes[slot]]
            self._send_unit(slot, self._dispatched - 1, epoch, -1, rows)

    def _start_epoch(self, epoch: int) -> None:
        for slot in range(len(self._slots)):
            if slot not in self._passes or slot in self._ended:
                self._passes[slot] = epoch  # a new pass, numbered by the epoch it starts in
        self._ended.clear()
        self._active = {s for s in range(len(self._slots)) if self._slots[s] in self._peers}
        self._epoch = epoch
        self._epoch_batches = 0
        self._epoch_expected = 0

    def _end_epoch(self, epoch: int) -> None:
        steps = self.source.steps_per_epoch
        if self._epoch_batches == 0:
            raise H5FeedError(
                f"epoch {epoch} of source {self.source.source!r} has no batch: every "
                "worker's generator ended at once"
                + (
                    " (drop_remainder=True dropped partial batches)"
                    if self.config.options.drop_remainder
                    else ""
                )
            )
        if steps is not None and self._epoch_batches < steps:
            _log.warning(
                "epoch %d ended after %d of steps_per_epoch=%d batches: every worker's "
                "generator ended first",
                epoch, self._epoch_batches, steps,
            )  # fmt: skip
        self._epoch = None

    # -- data ------------------------------------------------------------------------------

    def _on_data(self, peer: Peer, message: wire.Message) -> None:
        fields = message.fields
        unit = self._units.get(fields["unit"])
        samples = fields["samples"]
        if unit is None or unit.peer != peer.identity:
            self.counters["dropped_parts"] += 1
            _log.warning("dropped an unexpected part (unit %s) from %s", fields["unit"], peer.name)
            return
        epoch, position, slot = self._unit_info[unit.id]
        if self.kind == GENERATOR:
            fits = len(samples) <= unit.samples[0] and all(type(s) is int for s in samples)
        else:
            fits = samples == unit.samples
        spec = self.spec
        if not fits or spec is None:
            self._drop(f"part of unit {unit.id} from {peer.name} with other samples")
            return
        try:
            batch_fields = elements.unpack(spec, message.arrays, len(samples))
        except ValueError as exc:
            self._drop(f"part of unit {unit.id} from {peer.name}: {exc}")
            return
        del self._units[unit.id]
        del self._unit_info[unit.id]
        peer.unit_done(unit.id, time.monotonic())
        size = elements.nbytes(batch_fields)
        peer.received.record(len(samples), size)
        if self.kind == GENERATOR:
            self._generator_part(unit, epoch, slot, batch_fields, len(samples), size)
            return
        element = self._element(batch_fields)
        batch = Batch(epoch, position, {}, element, self._rows(batch_fields, len(samples)), size)
        if not self.config.options.deterministic:
            self._deliver(batch)
            return
        self._complete[unit.seq] = batch
        while self._next_release in self._complete:
            self._deliver(self._complete.pop(self._next_release))
            self._next_release += 1

    def _generator_part(
        self, unit: Unit, epoch: int, slot: int, fields: list[Field], rows: int, size: int
    ) -> None:
        if rows < unit.samples[0]:  # this worker's pass has ended
            self._active.discard(slot)
            self._ended.add(slot)
        keep = rows > 0 and not (rows < unit.samples[0] and self.config.options.drop_remainder)
        if not keep:
            self._dispatched -= 1  # a credit that yields no batch returns at once
            self._epoch_expected -= 1
            return
        batch = Batch(epoch, self._epoch_batches, {}, self._element(fields), rows, size)
        self._epoch_batches += 1
        self._deliver(batch)

    def _rows(self, fields: list[Field], elements_in_unit: int) -> int:
        if self.kind == KERAS and fields:
            first = fields[0].values
            return int(first.shape[1]) if first.ndim > 1 else 1
        return elements_in_unit

    def _element(self, fields: list[Field]) -> Any:
        spec = self.spec
        if spec is None:  # unreachable: data arrives after the handshake
            raise SourceError("no element spec")
        if self.kind == KERAS:  # one item: the batch itself, not re-batched
            items = [f.values[0] for f in fields]
            return elements.build_batch(spec, items, lambda i: None)
        values: list[Any] = []
        for leaf, field in zip(spec.leaves, fields, strict=True):
            if field.lengths is not None and self.source.is_ragged(leaf.path):
                values.append(RaggedArray(field.values, field.lengths))
            else:
                values.append(field.values)

        def lengths(i: int) -> Any:
            if isinstance(values[i], RaggedArray):
                return None
            return fields[i].lengths

        return elements.build_batch(spec, values, lengths)

    def _deliver(self, batch: Batch) -> None:
        self._released_count += 1
        self.counters["batches"] += 1
        self.counters["clips"] += batch.rows
        self.counters["bytes"] += batch.nbytes
        self.out.put(batch)

    def _released(self) -> int:
        return self._released_count

    # -- failures --------------------------------------------------------------------------

    def _unit_label(self, unit: Unit) -> str:
        epoch = self._unit_info.get(unit.id, (-1, -1, -1))[0]
        if self.kind == GENERATOR:
            what = f"the next {unit.samples[0]} elements of pass {unit.samples[1]}"
        elif self.kind == KERAS:
            what = f"batch {unit.samples[0]}"
        else:
            shown = unit.samples[:8]
            what = f"items {shown}{'...' if len(unit.samples) > 8 else ''}"
        return f"unit {unit.id} ({what}, epoch {epoch})"

    def _on_bye(self, peer: Peer, reason: str) -> None:
        if self._is_local(peer) or not self._can_hand_over():
            raise WorkerDiedError(
                f"worker {peer.name} (pid {peer.pid} on {peer.host}) left the job: {reason}"
            )
        self._hand_over(peer, reason)

    def _can_hand_over(self) -> bool:
        # map / keras, once planned: any worker serves any item. A generator's shard lives
        # in its worker: its elements cannot be made elsewhere.
        return self.kind in (MAP, KERAS) and self.spec is not None

    def _hand_over(self, peer: Peer, reason: str) -> None:
        """A producer left (BYE, or unreachable): its units go to the others."""
        del self._peers[peer.identity]
        self._late.add(peer.identity)
        for unit_id in sorted(peer.outstanding):
            unit = self._units.pop(unit_id)
            epoch, position, _slot = self._unit_info.pop(unit_id)
            slot = self._least_loaded(range(len(self._slots)))
            self._send_unit(slot, unit.seq, epoch, position, unit.samples)
        self.counters["reassigned_units"] += len(peer.outstanding)
        _log.warning(
            "worker %s (%s) left the job (%s): %d units handed to the others",
            peer.name, peer.host, reason, len(peer.outstanding),
        )  # fmt: skip
