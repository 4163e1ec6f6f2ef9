"""The scheduler of a user source (``source=``): one handshake, then the kind's own plan.

Handshake: every worker gets a SOURCE (its shard index and count, the seed, and the element
spec when it is known: the user's ``output_signature``, or the one an earlier iteration
learnt), loads the user's code and answers SOURCE_INFO (kind, length, the spec of its first
elements). The kinds and lengths must agree; the spec is the given one or the merge of the
workers' (dimensions that differ become ``None``); the copies must agree on the common items
each digested, or, for a generator, begin with different elements (the kind's
``check_copies``, :mod:`h5feed.consumer.sources.agreement`). A second SOURCE gives every
worker that spec, which it checks every element against. Then the kind's scheduler
(:mod:`h5feed.consumer.sources.kinds`: map, keras, generator; each following
:class:`~h5feed.consumer.sources.kind.KindScheduler`) takes over, behind the same protocol as
the HDF5 one; what differs between kinds here is read from the kind's class
(:class:`~h5feed.consumer.sources.kind.KindClass`), never from its name.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Iterator, Sequence

from h5feed.common.elements import values as elements
from h5feed.common.elements.values import ElementSpec
from h5feed.common.errors import SourceError
from h5feed.common.protocol import messages, wire
from h5feed.common.system.logs import consumer_log
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.code_identities import identities_of
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.scheduler import Figures, Reassignment, Send
from h5feed.consumer.plan.epoch_plan import Cursor
from h5feed.consumer.sources.kind import KindClass, KindScheduler, KindSetup
from h5feed.consumer.sources.kinds import kind_class
from h5feed.consumer.sources.options import Learnt, SourceConfig
from h5feed.consumer.sources.padding import pad_refusal


class SourceScheduler:
    """Runs one iteration of a user source (see the module docstring)."""

    def __init__(
        self,
        config: SourceConfig,
        job_id: str,
        epochs: Iterator[int],
        start: Cursor,
        counters: Counters,
        gate: CreditGate,
        learnt: Learnt | None = None,
    ) -> None:
        self.config = self.source = config
        self.job_id = job_id
        # The factory's module as its file is now: a worker running another copy refuses.
        self._code = identities_of(config.source)
        self.learnt = learnt
        self._epochs = epochs
        self._start = start
        self._counters = counters
        self._gate = gate
        self._spec = learnt.spec if learnt else config.spec
        self._peers: list[Peer] = []
        self._infos: dict[Peer, messages.SourceInfo] = {}
        self._kind: KindScheduler | None = None
        self._of: KindClass | None = None  # the kind's class, once agreed
        self._agreed: tuple[SourceKind, int | None] | None = None  # (kind, length) once agreed
        self._joining: set[Peer] = set()  # joined during the iteration, SOURCE sent
        self._vacant: list[int] = []  # shards_in_workers: lost workers' places, not refilled
        # the handshake's checks (first epoch), which a joiner's copy must agree with
        self._reference: dict[Peer, tuple[messages.ItemCheck, ...]] = {}
        self._logged: set[str] = set()

    # -- handshake -------------------------------------------------------------------------

    def start(self, peers: Sequence[Peer]) -> list[Send]:
        self._peers = sorted(peers, key=lambda p: p.identity)
        return [self._source(peer, self._spec) for peer in self._peers]

    def _source(self, peer: Peer, spec: ElementSpec | None) -> Send:
        shard_index, shard_count = self.config.options.plan.shard
        workers = len(self._peers)
        return Send(
            peer,
            messages.Source(
                job=self.job_id,
                source=self.source.source,
                args=dict(self.source.args),
                sys_path=tuple(self.source.sys_path or sys.path),
                # The worker's shard of this trainer's shard (shard=(i, n)): i * W + w of n * W.
                worker=shard_index * workers + self._peers.index(peer),
                workers=shard_count * workers,
                seed=self.config.options.plan.seed,
                epoch=self._start.epoch,
                spec=spec.to_wire() if spec is not None else None,
                batched=self.source.batched,
                code=self._code,
            ),
        )

    def on_control(self, peer: Peer, message: messages.Message) -> list[Send]:
        if isinstance(message, messages.SourceInfo) and peer in self._joining:
            return self._joined(peer, message)
        if isinstance(message, messages.SourceInfo) and self._kind is not None:
            return self._kind.on_check(peer, message)  # a CHECK's answer
        if not isinstance(message, messages.SourceInfo) or self._kind is not None:
            self._counters.malformed_messages += 1
            return []
        try:
            ElementSpec.from_wire(message.spec)
        except SourceError:
            self._counters.malformed_messages += 1
            return []
        if SourceKind.of_wire(message.kind) is None:
            self._counters.malformed_messages += 1
            return []
        self._infos[peer] = message
        if len(self._infos) < len(self._peers):
            return []
        kind, length, spec = self._agree()
        of = self._of = kind_class(kind)
        self._reference = {p: self._infos[p].checks for p in self._peers}
        of.check_copies(
            self.source, self._start.epoch,
            {str(p): checks for p, checks in self._reference.items()},
        )  # fmt: skip
        refusal = of.pad_refusal or pad_refusal(spec)
        if self.config.options.plan.pads and refusal is not None:
            raise SourceError(
                f"source {self.source.source!r} is a {kind} source: shard_remainder='pad' "
                f"cannot apply to it, as {refusal}; or use shard_remainder='drop' (the "
                "default)"
            )
        self._agreed = (kind, length)
        self.learnt = Learnt(kind, spec, length)
        if self._start.batch and of.shards_in_workers:
            raise SourceError(
                f"source {self.source.source!r} is a {kind}: it cannot resume inside an "
                f"epoch (cursor {self._start})"
            )
        self._kind = of.make(
            KindSetup(
                self.config, spec, length, self.job_id, self._epochs,
                self._start, self._counters, self._gate,
            )
        )  # fmt: skip
        for each in self._peers:
            self._kind.add(each)
        return [self._source(peer, spec) for peer in self._peers]

    def _agree(self) -> tuple[SourceKind, int | None, ElementSpec]:
        """Kind, length and spec from the workers' answers; SourceError where they differ."""
        infos = [self._infos[p] for p in self._peers]
        names = [p.name for p in self._peers]
        kinds = {info.kind for info in infos}
        if len(kinds) != 1:
            raise SourceError(f"the workers found different kinds of source: {sorted(kinds)}")
        kind = SourceKind(kinds.pop())  # each was checked on arrival
        of = kind_class(kind)
        length = None
        if of.sized:
            lengths = [info.length for info in infos]
            if len(set(lengths)) != 1 or lengths[0] is None:
                raise SourceError(
                    f"source {self.source.source!r} has different lengths in the workers "
                    f"{dict(zip(names, lengths, strict=True))}; a map-style source must be "
                    "the same in every worker"
                )
            length = int(lengths[0])
        probed = ElementSpec.from_wire(infos[0].spec)
        for info, name in zip(infos[1:], names[1:], strict=True):
            try:
                probed = elements.merge_specs(probed, ElementSpec.from_wire(info.spec))
            except SourceError as exc:
                raise SourceError(f"source {self.source.source!r}, worker {name}: {exc}") from None
        spec = self._spec if self._spec is not None else probed
        if spec.tree != probed.tree:
            paths = [leaf.path for leaf in probed.leaves]
            given = [leaf.path for leaf in spec.leaves]
            raise SourceError(
                f"source {self.source.source!r}: output_signature has the fields {given}, "
                f"the elements have {paths}"
            )
        _check_spec(spec, self.source, of)
        return kind, length, spec

    @property
    def ready(self) -> bool:
        return self._kind is not None

    @property
    def handshake_answers(self) -> int:
        return len(self._infos)

    def handshake_waiting(self) -> str:
        waiting = [p.name for p in self._peers if p not in self._infos]
        return f"workers {waiting} did not load source {self.source.source!r}"

    # -- the kind's scheduler --------------------------------------------------------------

    def _require_kind(self) -> KindScheduler:
        if self._kind is None:  # unreachable: units and data come after the handshake
            raise RuntimeError("the source's kind is not known yet")
        return self._kind

    def next_units(self, gate: CreditGate, peers: Sequence[Peer]) -> list[Send]:
        return self._require_kind().next_units(gate, peers)

    def take_released(self) -> list[Batch]:
        return [] if self._kind is None else self._kind.take_released()

    def on_data(self, peer: Peer, data: messages.Data) -> list[Batch]:
        if self._kind is None:  # no unit was sent yet: nobody may answer one
            self._counters.dropped_parts += 1
            return []
        return self._kind.on_data(peer, data)

    def owns(self, peer: Peer) -> bool:
        return self._kind is None or self._kind.owns(peer)

    def reassign(self, lost: Peer, heirs: Sequence[Peer], confirmed_dead: bool) -> Reassignment:
        self._joining.discard(lost)
        if lost not in self._peers:
            return Reassignment([], 0)  # it left before the work was shared out
        if self._kind is None:
            return Reassignment([], 0, "the source was not loaded everywhere yet")
        if self._of is not None and self._of.shards_in_workers:
            self._vacant.append(self._peers.index(lost))
        return self._kind.reassign(lost, heirs, confirmed_dead)

    def unreadable(self, peer: Peer, file_index: int, unit_id: int | None) -> list[Send] | None:
        return None  # a source has no files to move: its worker's error ends the run

    def join(self, peer: Peer) -> list[Send]:
        """A joiner loads the source (SOURCE with the agreed spec) and serves once its
        SOURCE_INFO agrees. A kind whose shards live in the workers (a generator) takes a
        joiner only into a lost worker's place (its shard starts over there), no other."""
        if self._kind is None or self._of is None or self.learnt is None:
            self._log_once(f"worker {peer} joined during the source's handshake: idle")
            return []
        if self._of.shards_in_workers:
            if not self._vacant:
                self._log_once(f"worker {peer} joined: {self._of.kind} sources take no new workers")
                return []
            self._peers[self._vacant.pop(0)] = peer
        else:
            self._peers.append(peer)
        self._joining.add(peer)
        return [self._source(peer, self.learnt.spec)]

    def _joined(self, peer: Peer, info: messages.SourceInfo) -> list[Send]:
        self._joining.discard(peer)
        if self._kind is None or self._of is None or self._agreed != (info.kind, info.length):
            self._counters.malformed_messages += 1
            consumer_log(self.job_id).error(
                "worker %s loaded %r as a %s of length %s, not as agreed %s: refused",
                peer, self.source.source, info.kind, info.length, self._agreed,
            )  # fmt: skip
            return []
        # A joiner of a generator took a lost worker's place (and shard): the lost copy's
        # check is no longer compared, the joiner's is from now on.
        answers = {str(p): c for p, c in self._reference.items() if p in self._peers}
        answers[str(peer)] = info.checks
        self._of.check_copies(self.source, self._start.epoch, answers)
        if self._of.shards_in_workers:
            self._reference = {p: c for p, c in self._reference.items() if p in self._peers}
            self._reference[peer] = info.checks
        return self._kind.add(peer)

    def _log_once(self, line: str) -> None:
        if line not in self._logged:
            self._logged.add(line)
            consumer_log(self.job_id).info("%s", line)

    @property
    def waiting_for_workers(self) -> bool:
        return self._kind is not None and self._kind.waiting_for_workers

    @property
    def finished(self) -> bool:
        return self._kind is not None and self._kind.finished

    def describe(self, unit_id: int) -> str:
        return self._kind.describe(unit_id) if self._kind else f"unit {unit_id}"

    def samples_of(self, unit_id: int) -> list[tuple[Hashable, str]]:
        return self._kind.samples_of(unit_id) if self._kind else []

    @property
    def epoch_length(self) -> int | None:
        """A map or keras source's batches per epoch, from its length (its kind's
        ``epoch_batches``); None for a generator (its epoch ends when its passes do) and
        before the workers told the length."""
        learnt = self.learnt
        if learnt is None:
            return None
        return kind_class(learnt.kind).epoch_batches(learnt.length, self.source.options)

    def figures(self) -> Figures:
        return Figures()  # no slots, no files, nothing skipped

    def close(self) -> None:
        return None


def _check_spec(spec: ElementSpec, source: SourceConfig, of: KindClass) -> None:
    """SourceError where the spec cannot travel or be batched as the options say (whole
    batches are taken as they are: no padding, no ragged fields)."""
    if spec.wire_arrays() > wire.DEFAULT_LIMITS.max_arrays:
        raise SourceError(
            f"elements of {len(spec.leaves)} fields need {spec.wire_arrays()} arrays per "
            f"message, more than the wire allows ({wire.DEFAULT_LIMITS.max_arrays})"
        )
    if of.whole_batches:
        return
    padded = [bool(leaf.variable_axes) and not source.is_ragged(leaf.path) for leaf in spec.leaves]
    elements.check_length_names(spec, lambda i: padded[i])
    for leaf in spec.leaves:
        check_ragged(leaf, source)


def check_ragged(leaf: elements.LeafSpec, source: SourceConfig) -> None:
    """SourceError for a ``ragged=`` field that varies in more than one dimension (a
    ``tf.RaggedTensor`` of it would be ragged in several: give it padded, with its shapes)."""
    if source.is_ragged(leaf.path) and len(leaf.variable_axes) > 1:
        raise SourceError(
            f"{elements.field_name(leaf.path)} ({leaf.describe()}): ragged= takes fields "
            "that vary in one dimension (any one); this one varies in dimensions "
            f"{list(leaf.variable_axes)}: leave it out of ragged= to get it zero-padded "
            "with its shapes"
        )
