"""The option groups every feed has (:class:`FeedOptions`: ``plan``, ``processes``,
``network``, ``record``): what the loop core, the input kinds and the processes may import.

They know no input kind, no front end and no announcer: a feed's whole configuration (an
HDF5 feed's data group and files, or a source's code) is :mod:`h5feed.consumer.options`',
which assembles these. Each group is frozen and validated once, in ``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from h5feed.common.metrics_http import metrics_address
from h5feed.common.protocol.wire import DEFAULT_LIMITS, DEFAULT_MAX_MESSAGE_BYTES
from h5feed.common.system.cpus import available_cpus
from h5feed.common.trust.curve import check_secret_mode
from h5feed.common.trust.exposure import check_listen, is_local_address
from h5feed.common.user_code import trainer_main
from h5feed.common.worker_settings import DEFAULT_MAX_OPEN_FILES
from h5feed.consumer.config.endpoints import parse_endpoint
from h5feed.consumer.plan.epoch_plan import PlanOptions


@dataclasses.dataclass(frozen=True, slots=True)
class ProcessOptions:
    """The processes group (``FeedOptions.processes``): the workers, and how long and how
    often they may fail."""

    #: Local workers: a count, or ``"auto"`` (from 1, grown and shrunk on the input-bound
    #: verdict up to this process's cores: ``h5feed/consumer/processes/autoscale.py``).
    workers: int | str = 2
    max_inflight_batches: int | None = None
    start_timeout_s: float = 60.0
    unit_timeout_s: float = 120.0
    #: Local workers that die are replaced; more than this many restarts of one worker within
    #: a minute end the iteration (a worker that dies on every start is a bug, not bad luck).
    max_restarts: int = 3
    #: A unit whose holder died this many times ends the iteration, naming its samples (a
    #: poison sample that kills every worker that makes it must not loop forever).
    max_unit_attempts: int = 3
    tune_malloc: bool = True
    shared_memory: bool = True
    #: HDF5 files each local worker keeps open at once, least recently used closed first
    #: (``h5feed/producer/files/open_files.py`` says why 128); producers have their own flag.
    max_open_files: int = DEFAULT_MAX_OPEN_FILES

    def __post_init__(self) -> None:
        if isinstance(self.workers, str):
            if self.workers != AUTO:
                raise ValueError(_WORKERS.format(repr(self.workers)))
        elif isinstance(self.workers, bool) or not isinstance(self.workers, int):
            raise ValueError(_WORKERS.format(repr(self.workers)))
        elif self.workers < 0:
            raise ValueError(_WORKERS.format(self.workers))
        if self.max_inflight_batches is not None and self.max_inflight_batches < 1:
            raise ValueError("max_inflight_batches must be >= 1")
        if self.start_timeout_s <= 0 or self.unit_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        if isinstance(self.max_restarts, bool) or self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts!r}")
        if isinstance(self.max_unit_attempts, bool) or self.max_unit_attempts < 1:
            raise ValueError(f"max_unit_attempts must be >= 1, got {self.max_unit_attempts!r}")
        if isinstance(self.max_open_files, bool) or self.max_open_files < 1:
            raise ValueError(f"max_open_files must be >= 1, got {self.max_open_files!r}")

    @property
    def inflight_batches(self) -> int:
        """The global credit budget: batches dispatched to workers and not yet taken by the
        trainer. Default ``max(4, 2 * workers)``, so every worker has a unit queued behind the
        one it is working on."""
        return self.inflight_budget(2)

    def inflight_budget(self, units_each: int) -> int:
        """:attr:`inflight_batches` for feeds that keep ``units_each`` units per worker
        (four for files on object storage: ``h5feed/consumer/core/credits.py``): default
        ``max(2 * units_each, units_each * workers)``; ``max_inflight_batches`` when given."""
        if self.max_inflight_batches is not None:
            return self.max_inflight_batches
        workers = available_cpus() if self.auto else self.start_workers
        return max(2 * units_each, units_each * workers)

    @property
    def grows_budget(self) -> bool:
        """Whether the loop grows the budget with the connected workers, local or remote
        (two units each, within 1 GiB of batches: h5feed/consumer/core/credits.py): unless
        ``max_inflight_batches`` was given, which is then the budget, fixed."""
        return self.max_inflight_batches is None

    @property
    def auto(self) -> bool:
        """``workers="auto"``: the count follows the input-bound verdict."""
        return self.workers == AUTO

    @property
    def start_workers(self) -> int:
        """The local workers a new pool starts with (``"auto"``: 1)."""
        return 1 if isinstance(self.workers, str) else self.workers


#: ``workers=AUTO``: see :attr:`ProcessOptions.auto`.
AUTO = "auto"
_WORKERS = 'workers must be >= 1, "auto", or 0 with listen= (remote producers), got {}'


@dataclasses.dataclass(frozen=True, slots=True)
class NetworkOptions:
    """The network group (``FeedOptions.network``): where remote producers connect, with
    which keys, and what a peer may send."""

    listen: str | None = None
    #: A peer whose connection stops answering ZeroMQ heartbeats (killed without BYE, host
    #: down, cable cut, process stopped) is declared lost within this (see
    #: common/protocol/liveness.py).
    peer_timeout_s: float = 5.0
    join_grace_s: float = 1.5
    curve_key: str | None = None
    curve_authorized: str | None = None
    metrics_port: int | str | None = None
    #: ZMQ_MAXMSGSIZE of the consumer's socket and its local workers': a peer that sends a
    #: larger frame is disconnected by libzmq before the frame is buffered (see
    #: h5feed.common.protocol.wire.DEFAULT_MAX_MESSAGE_BYTES for why 1 GiB).
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    insecure: bool = False
    #: A shared fleet to attach to (``h5feed produce --listen``): its endpoint(s),
    #: ``tcp://HOST:PORT``, each name resolved to every replica
    #: (h5feed/consumer/processes/fleet_announcer.py).
    fleet: str | tuple[str, ...] | None = None
    #: The fleet's public ``.key`` file: CURVE to its fronts, with this trainer's curve_key.
    fleet_key: str | None = None

    @property
    def fleet_endpoints(self) -> tuple[str, ...]:
        """``fleet`` as a tuple (empty: no fleet)."""
        if self.fleet is None:
            return ()
        return (self.fleet,) if isinstance(self.fleet, str) else tuple(self.fleet)

    def __post_init__(self) -> None:
        if self.fleet is not None and not isinstance(self.fleet, str):
            object.__setattr__(self, "fleet", tuple(self.fleet))  # a list: kept as a tuple
        self._check_fleet()
        if (self.curve_key is None) != (self.curve_authorized is None):
            raise ValueError(
                "CURVE needs both curve_key (this consumer's .key_secret file) and "
                "curve_authorized (the directory of the producers' public .key files)"
            )
        if self.curve_key is not None:  # refused before anything starts, as ssh does
            check_secret_mode(self.curve_key)
        if not self.peer_timeout_s >= 2.0:  # heartbeats run every 0.5 s: room for a few
            raise ValueError(f"peer_timeout_s must be >= 2, got {self.peer_timeout_s!r}")
        if self.metrics_port is not None:
            metrics_address(self.metrics_port, "metrics_port")
        if self.max_message_bytes < DEFAULT_LIMITS.max_header_bytes:
            raise ValueError(
                f"max_message_bytes must be at least {DEFAULT_LIMITS.max_header_bytes} (a "
                f"header's limit), got {self.max_message_bytes}"
            )
        if not isinstance(self.insecure, bool):
            raise ValueError(f"insecure must be True or False, got {self.insecure!r}")
        if self.listen is not None:  # beyond this host: CURVE keys, or insecure=True said
            check_listen(self.listen, keyed=self.curve_key is not None, insecure=self.insecure)

    def _check_fleet(self) -> None:
        """``fleet=``: trainers that announce themselves need a TCP ``listen`` (its port is
        what they announce), and beyond this host a key for the fleet unless insecure."""
        if self.fleet is None:
            if self.fleet_key is not None:
                raise ValueError("fleet_key= is the fleet's public key: it needs fleet=")
            return
        endpoints = self.fleet_endpoints
        if not endpoints or not all(isinstance(e, str) for e in endpoints):
            raise ValueError(f"fleet must be tcp://HOST:PORT or a list of them, got {self.fleet!r}")
        for endpoint in endpoints:
            parse_endpoint(endpoint)
        if self.listen is None or not self.listen.startswith("tcp://"):
            raise ValueError(
                "fleet= needs listen='tcp://*:PORT': the fleet's workers connect to this "
                f"trainer at that port, got listen={self.listen!r}"
            )
        if self.fleet_key is not None and self.curve_key is None:
            raise ValueError(
                "fleet_key= needs curve_key= (this trainer's .key_secret: the fleet's "
                "--trainer-keys must list its public key)"
            )
        if self.curve_key is not None and self.fleet_key is None:
            raise ValueError(
                "a trainer with curve_key= needs fleet_key= (the fleet's public .key) to attach: "
                "the fleet's workers learn this trainer's key from its CURVE handshake"
            )
        exposed = [e for e in endpoints if not is_local_address(e)]
        if exposed and self.fleet_key is None and not self.insecure:
            raise ValueError(
                f"h5feed: fleet={exposed[0]!r} leaves this host, and without keys anyone "
                "answering there is sent this trainer's jobs, and its workers reach this "
                "trainer unchecked. Give fleet_key= (the fleet's public .key) with curve_key= "
                "and curve_authorized= (see docs/deploy/security.md), or pass insecure=True "
                "if the network is trusted."
            )


@dataclasses.dataclass(frozen=True, slots=True)
class RecordOptions:
    """The record group (``FeedOptions.record``): what a feed writes down about its run.

    ``lineage``: a path; each batch the trainer takes appends one NDJSON line per row saying
    which step trained it and what the plan made it from (see
    :mod:`h5feed.consumer.position.lineage`); None: no record. Not part of the fingerprint: a run
    resumes with or without it."""

    lineage: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.lineage, os.PathLike):  # a pathlib.Path: kept as its text
            object.__setattr__(self, "lineage", os.fspath(self.lineage))
        if self.lineage is not None and (not isinstance(self.lineage, str) or not self.lineage):
            raise ValueError(f"lineage must be a file path or None, got {self.lineage!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class FeedOptions:
    """The options every feed has, grouped by concern: ``plan`` (:class:`PlanOptions`, the
    one the epoch plan takes), ``processes``, ``network``, ``record``. An HDF5 feed's data group is
    :attr:`HdfConfig.data`. ``dataset()`` takes every field of every group as one flat
    keyword (:meth:`of`), so a group is never copied field by field."""

    plan: PlanOptions = dataclasses.field(default_factory=PlanOptions)
    processes: ProcessOptions = dataclasses.field(default_factory=ProcessOptions)
    network: NetworkOptions = dataclasses.field(default_factory=NetworkOptions)
    record: RecordOptions = dataclasses.field(default_factory=RecordOptions)

    def __post_init__(self) -> None:
        if self.processes.start_workers == 0 and not self.network.listen:
            raise ValueError(_WORKERS.format(self.processes.workers))

    @classmethod
    def of(cls, kwargs: Mapping[str, Any]) -> FeedOptions:
        """The options of ``dataset()``'s keywords (each group takes its own, the caller
        checks the rest); ValueError for a bad value."""
        return cls(*(group(**taken(group, kwargs)) for group in GROUPS))

    @staticmethod
    def names() -> tuple[str, ...]:  # the keywords of every group, in order
        return tuple(name for group in GROUPS for name in field_names(group))


#: The groups of :class:`FeedOptions`, in the order of its fields.
GROUPS: tuple[type[Any], ...] = (PlanOptions, ProcessOptions, NetworkOptions, RecordOptions)


def field_names(cls: type[Any]) -> tuple[str, ...]:
    """The keywords of a group (a dataclass): its fields' names, in order."""
    return tuple(f.name for f in dataclasses.fields(cls))


def taken(cls: type[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords of ``kwargs`` that are ``cls``'s fields."""
    return {k: v for k, v in kwargs.items() if k in field_names(cls)}


def check_main_path(what: str, path: str | None, options: FeedOptions) -> None:
    """ValueError, before any worker starts, for ``"__main__:name"`` where the workers
    cannot load the training script (see :mod:`h5feed.common.user_code.trainer_main`)."""
    if path is None or path.partition(":")[0] != trainer_main.MAIN:
        return
    remote = options.network.listen is not None
    refusal = trainer_main.main_refusal(f"{what} {path!r}", remote=remote)
    if refusal is not None:
        raise ValueError(f"h5feed: {refusal}")
