"""Pipeline statistics: the waits, the input-bound verdict, and ``stats()`` assembled from
them and from the core's counters and rate meters (:mod:`h5feed.consumer.core.counters`;
:func:`iteration_stats`).

Everything here is cheap and thread-safe: the loop thread and the trainer's thread
record events, any thread may read a snapshot at any time.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from h5feed.common.system.cpus import available_cpus
from h5feed.consumer.core.counters import RECENT_WINDOW_S, MeterFigures, RateMeter
from h5feed.consumer.core.counters import Counters as Counters  # hdf5/scheduler.py's import
from h5feed.consumer.telemetry.sizing import WorkerRates, fleet_demand

if TYPE_CHECKING:
    from h5feed.consumer.core.credits import CreditGate
    from h5feed.consumer.core.ledger import Peer
    from h5feed.consumer.core.scheduler import Figures

#: Above this share of time waiting for input, the trainer is called input-bound.
INPUT_BOUND_WAIT_SHARE = 0.10


def verdict(wait_share: float, workers: int, cores: int | None = None) -> tuple[bool, int, str]:
    """(input-bound?, suggested extra workers, a one-line explanation).

    ``wait_share`` is the share of time the consumer of batches (tf.data's prefetch thread, or
    the trainer with ``batches()``) spent waiting for a batch that was not ready. With
    prefetch, the training step itself waits less than that (the buffer absorbs some of it);
    this share says whether the workers keep up with what tf.data asks of them. If it waited
    a share ``w`` of the time, it could take batches ``1 / (1 - w)`` times faster, so about
    ``workers / (1 - w)`` workers would keep up (assuming workers scale: cores to spare).

    ``cores``: the CPUs the workers may use when they all run on this host
    (:func:`h5feed.common.system.cpus.available_cpus`); None when some run elsewhere. The advice
    never goes past it: local processes beyond the cores only share the same cores (with the
    trainer), so past it the line says so, suggests what still fits (possibly 0) and points
    at producers on other hosts (docs/deploy/which-setup.md).
    """
    if wait_share <= INPUT_BOUND_WAIT_SHARE:
        return (
            False,
            0,
            f"not input-bound: tf.data waited for h5feed's next batch {wait_share:.0%} of the time",
        )
    needed = math.ceil(workers / max(1.0 - wait_share, 0.05))
    head = f"input-bound: tf.data waited for h5feed's next batch {wait_share:.0%} of the time; "
    if cores is None or needed <= cores:
        extra = max(needed - workers, 1)
        where = "given free cores on their hosts" if cores is None else f"on the {cores} cores here"
        plural = "s" if extra > 1 else ""
        return (
            True,
            extra,
            f"{head}about {extra} more worker{plural} ({needed} in all) would keep up, {where}",
        )
    room = max(cores - workers, 0)
    if room:
        return (
            True,
            room,
            f"{head}about {needed} workers would keep up, but this host gives {cores} cores: "
            f"{room} more ({cores} in all) fit here, the rest needs producers on other hosts",
        )
    return (
        True,
        0,
        f"{head}more workers would not help here: {workers} already share the {cores} cores this "
        "host gives (with the trainer); add cores, or producers on other hosts",
    )


class WaitMeter:
    """Time spent waiting for input, in total and over the last :data:`RECENT_WINDOW_S`,
    counted from the first batch on: the start-up (workers starting, files being indexed) is
    reported apart as ``startup_s``, since it says nothing about the steady state."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._created = time.monotonic()
        self._started: float | None = None
        self._waits: collections.deque[tuple[float, float]] = collections.deque()  # (end, s)
        self.total_s = 0.0

    def record(self, seconds: float) -> None:
        now = time.monotonic()
        with self._lock:
            if self._started is None:  # this wait ended with the first batch: start-up
                self._started = now
                return
            self.total_s += seconds
            self._waits.append((now, seconds))
            while self._waits and self._waits[0][0] < now - RECENT_WINDOW_S:
                self._waits.popleft()

    def snapshot(self) -> dict[str, float]:
        """``wait_s`` and ``elapsed_s`` in total, and the recent and total wait shares."""
        now = time.monotonic()
        with self._lock:
            recent = sum(s for end, s in self._waits if end >= now - RECENT_WINDOW_S)
            total, started = self.total_s, self._started
        startup = (now if started is None else started) - self._created
        elapsed = max(now - started, 1e-9) if started is not None else 1e-9
        window = min(RECENT_WINDOW_S, elapsed)
        return {
            "startup_s": startup,
            "wait_s": total,
            "elapsed_s": elapsed,
            "wait_share_total": min(total / elapsed, 1.0),
            "wait_share_recent": min(recent / window, 1.0),
        }


def worker_figures(
    received: Sequence[tuple[Peer, MeterFigures]],
    files_owned: Callable[[Peer], int] | None = None,
) -> list[dict[str, Any]]:
    """Per worker (with one reading of its meter: ``received``): name, pid, host, the
    protocol version spoken with it and its package
    version, whether it is one of the feed's own processes (``local``), the files it reads
    (``files_owned``: HDF5 feeds, the files it owns plus those it reads as a confirmed extra
    reader, so a file shared by 3 workers counts once for each; else 0), units outstanding,
    unit latency and what it delivered (counts, rates, and the busy seconds its parts took:
    ``busy_s``, and ``clips_recent`` with ``busy_s_recent`` over the last 10 s), and what its
    reads of object storage cost, as its parts said (``object_requests``, ``object_bytes``,
    ``object_retries``: its own retries of a read, ``object_refused``: reads refused because
    the object changed; 0 for local files and for a worker of an earlier release)."""
    return [
        {
            "name": p.name,
            "pid": p.pid,
            "host": p.host,
            "protocol": p.protocol,
            "package": p.package,
            "local": p.local,
            "files": files_owned(p) if files_owned is not None else 0,
            "outstanding_units": len(p.outstanding),
            "unit_latency_s": p.unit_latency_s,
            **figures.as_dict(),
            **p.storage.as_dict(),
        }
        for p, figures in received
    ]


def host_figures(workers: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per host, the sums of :func:`worker_figures`: workers, clips, recent clips/s."""
    hosts: dict[str, dict[str, float]] = {}
    for worker in workers:
        host = hosts.setdefault(worker["host"], {"workers": 0, "clips": 0, "clips_per_s": 0})
        host["workers"] += 1
        host["clips"] += worker["clips"]
        host["clips_per_s"] += worker["per_s_recent"]["clips"]
    return hosts


def iteration_stats(
    *,
    job: str,
    running: bool,
    taken: RateMeter,
    waited: WaitMeter,
    peers: Sequence[Peer],
    workers_asked: int,
    gate: CreditGate,
    queue_depth: int,
    figures: Figures,
    slots_refused: int,
    counters: Counters,
    refused_keys: int,
    cursor: tuple[int, int],
    shared_fleet: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The plain dict of ``BatchStream.stats()``: the trainer's intake, the waits, the credit
    gate, the scheduler's figures, every counter, and the verdict. ``workers_asked``: the
    workers the feed was given, for the verdict before any joined.

    ``batches``/``clips``/``bytes``: taken by the trainer, with ``per_s_recent`` (last
    10 s) and ``per_s_total`` rates; ``startup_s``: until the first batch;
    ``wait_share_recent``/``wait_share_total``: share of time since the first batch that
    ``next()`` waited for a batch not yet ready; ``inflight_batches`` of
    ``credit_budget``; ``queue_depth``: complete batches not yet taken;
    ``shared_memory_slots`` (made), ``parts_copied_into_slots`` (parts whose rows came
    over the socket because their worker could not map the slot), ``slots_refused`` (jobs
    whose slots a local worker could not map, summed over this iteration's workers since
    they started: kept workers count across iterations); ``workers`` and
    ``hosts``: what each delivered; ``malformed_messages``, ``dropped_parts``,
    ``reassigned_units`` (re-sent after their worker was lost: the sum of
    ``units_handed_back``, given back unmade by a worker that left with a BYE, and
    ``units_remade``, sent again after a worker was lost without handing them back:
    possibly made twice), ``peers_lost``,
    ``workers_replaced`` (local processes started in place of dead ones),
    ``peers_joined`` (during the iteration), ``refused_reconnects`` (a lost process back
    without a new nonce, or under another CURVE key), ``refused_keys`` (connections
    refused for a CURVE key that is not listed), ``index_mismatches`` (a worker
    refused for a file whose copy differs), ``unreadable_files`` (a file moved from a worker
    that cannot read it); ``padded_samples`` (padded rows of a padded shard,
    ``shard_remainder="pad"``: zeros, ``valid`` False, never sent to a worker; counted
    apart from ``skipped``); ``cursor``: the next
    batch (epoch, batch); and the verdict: ``input_bound``, ``suggested_extra_workers``,
    ``verdict`` (one line); ``producers``: the replicas of remote producers that would keep
    up (:func:`h5feed.consumer.telemetry.sizing.fleet_demand`), and ``producers["shared"]``:
    with ``fleet=``, the shared fleet as this trainer sees it (the replicas serving it, how
    many trainers share each, this trainer's share of their CPUs, refusals:
    :meth:`h5feed.consumer.processes.fleet_announcer.Announcer.status`), else None. On a shared
    fleet the capacity figures are this trainer's share, not the fleet's. ``fleet``: the same
    dict as ``producers`` (the same object), its deprecated old name, kept until 0.4.0.

    Bad data: ``skipped``, ``skipped_per_epoch`` and ``skipped_samples`` (samples skipped
    for bad frames under ``on_error="skip"``, the first 100 listed with file, video,
    frame: see ``h5feed/consumer/hdf5/bad_data.py``).
    """
    intake = taken.snapshot()
    waits = waited.snapshot()
    # One reading of each worker's meter, for its figures and for the sizing alike.
    received = [(peer, peer.received.figures()) for peer in peers]
    workers = worker_figures(received, figures.files_owned)
    # Local workers only share this host's cores: the advice is capped by them (none elsewhere).
    local = all(w["local"] for w in workers)
    cores = available_cpus() if local else None
    bound, extra, line = verdict(waits["wait_share_recent"], len(workers) or workers_asked, cores)
    producers = {
        **fleet_demand(
            intake["per_s_recent"]["clips"],
            waits["wait_share_recent"],
            [WorkerRates(peer.host, peer.local, rates) for peer, rates in received],
        ),
        "shared": shared_fleet,
    }
    return {
        "job": job,
        "running": running,
        "batches": intake["count"],
        "clips": intake["clips"],
        "bytes": intake["bytes"],
        "per_s_recent": intake["per_s_recent"],
        "per_s_total": intake["per_s_total"],
        **waits,
        "inflight_batches": gate.inflight,
        "credit_budget": gate.budget,
        "queue_depth": queue_depth,
        "shared_memory_slots": figures.shared_memory_slots,
        "parts_copied_into_slots": counters.parts_copied_into_slots,
        "slots_refused": slots_refused,
        "workers": workers,
        "hosts": host_figures(workers),
        "malformed_messages": counters.malformed_messages,
        "dropped_parts": counters.dropped_parts,
        "reassigned_units": counters.reassigned_units,
        "units_handed_back": counters.units_handed_back,
        "units_remade": counters.units_remade,
        "peers_lost": counters.peers_lost,
        "workers_replaced": counters.workers_replaced,
        "peers_joined": counters.peers_joined,
        "refused_reconnects": counters.refused_reconnects,
        "refused_keys": refused_keys,
        "index_mismatches": counters.index_mismatches,
        "unreadable_files": counters.unreadable_files,
        "padded_samples": counters.padded_samples,
        "batches_dispatched": gate.dispatched,
        "max_inflight_batches": gate.most_inflight,
        "cursor": list(cursor),
        **figures.skipped,
        "input_bound": bound,
        "suggested_extra_workers": extra,
        "verdict": line,
        "producers": producers,
        # Deprecated alias: "fleet" means the shared fleet alone (fleet=) since 0.3.0; readers
        # of the old key keep working until 0.4.0 removes it (docs/changelog.md).
        "fleet": producers,
    }
