"""How many producer replicas would keep the trainer fed: the remote producers' sizing gauge.

A trainer knows both sides of the sum, so it makes the estimate (``stats()["producers"]``, and
the gauge ``h5feed_producers_replicas_needed`` of its ``/metrics``, which a Kubernetes
HorizontalPodAutoscaler or a Swarm loop acts on: docs/deploy/sizing.md):

* **demand**: the clips per second the trainer would take if it never waited, its recent
  intake divided by the share of time it did not wait (``taken / (1 - wait)``; a wait share
  above :data:`MOST_WAIT_SHARE` counts as it, so demand is at most 20 times the intake),
  less what the feed's own local workers delivered;
* **capacity of a replica**: clips per busy-second of its workers (each DATA part says how
  long its worker was busy making it), times its workers: what it makes with every worker
  busy. A replica is a host (a container) of remote producers; the estimate uses the mean
  over hosts. Busy time is wall time in the worker, so a replica with more workers than
  cores shows its cores' limit, not its workers': no core count is needed;
* **replicas needed**: ``ceil(demand / capacity)``, at least 1.

A producer says its busy time; the trainer measures the rest, and a claim is believed only
as far as the trainer's clock allows: each worker's busy seconds count at most the wall
seconds the trainer measured it over (the last 10 s, or since it joined), since one process
is busy at most all the time. So a replica's capacity is at least the clips per second the
trainer measured from it, and a producer that claims more busy time than there was cannot
inflate the gauge (two such peers once made it 6.45e6): it reaches at most the demand over
what the replicas delivered, which the trainer's own wait bounds (20x the intake). A claim
of less busy time than it took makes a replica look faster, never the gauge below 1.

The last 10 s are used where they hold busy time, else the iteration's totals. Unknown (None)
until the trainer has taken a batch and a remote worker has said its busy time (a version-5
worker never does): the gauge is then absent, so an autoscaler keeps the replicas it has
rather than act on a guess.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from h5feed.consumer.core.counters import MeterFigures

#: A wait share above this counts as this (demand at most 1 / (1 - it) times the intake).
MOST_WAIT_SHARE = 0.95
# A demand within this of a whole number of replicas does not round up to the next one.
_SLACK = 1e-6


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerRates:
    """What the estimate reads of one worker: where it runs, and what the trainer measured
    it deliver (its meter's reading, the one ``stats()["workers"]`` shows)."""

    host: str
    local: bool
    received: MeterFigures


def replica_capacities(workers: Sequence[WorkerRates]) -> dict[str, float]:
    """Clips per second each remote host would make with all its workers busy; hosts whose
    workers said no busy time are left out."""
    hosts: dict[str, list[MeterFigures]] = {}
    for worker in workers:
        if not worker.local:
            hosts.setdefault(worker.host, []).append(worker.received)
    capacities = {}
    for host, members in hosts.items():
        clips = sum(w.clips_recent for w in members)
        busy = sum(_busy_s(w, recent=True) for w in members)
        if busy <= 0:  # nothing in the last 10 s: the iteration's totals
            clips = sum(w.clips for w in members)
            busy = sum(_busy_s(w, recent=False) for w in members)
        if busy > 0 and clips > 0:
            capacities[host] = clips / busy * len(members)
    return capacities


def _busy_s(worker: MeterFigures, recent: bool) -> float:
    """The busy seconds ``worker`` claims, at most the wall seconds the trainer measured it
    over (see the module): the recent window, or the time since it joined. Both come from the
    trainer's own rates: events (clips) divided by their rate."""
    if recent:
        busy, events, rate = worker.busy_s_recent, worker.clips_recent, worker.per_s_recent.clips
    else:
        busy, events, rate = worker.busy_s, worker.count, worker.per_s_total.events
    wall = events / rate if rate > 0 else 0.0
    return float(min(max(busy, 0.0), wall))


def fleet_demand(
    taken_clips_per_s: float, wait_share: float, workers: Sequence[WorkerRates]
) -> dict[str, Any]:
    """The sizing figures of ``stats()["producers"]``: ``demand_clips_per_s`` (what the trainer
    would take never waiting, less its local workers' recent rate), ``replicas`` (remote
    hosts that said their busy time), ``replica_capacity_clips_per_s`` (their mean) and
    ``replicas_needed`` (None where unknown: see the module)."""
    local = sum(w.received.per_s_recent.clips for w in workers if w.local)
    wanted = taken_clips_per_s / (1.0 - min(max(wait_share, 0.0), MOST_WAIT_SHARE))
    demand = max(wanted - local, 0.0)
    capacities = replica_capacities(workers)
    capacity = sum(capacities.values()) / len(capacities) if capacities else None
    needed = None
    if capacity is not None and taken_clips_per_s > 0:
        needed = max(1, math.ceil(demand / capacity - _SLACK))
    return {
        "demand_clips_per_s": demand,
        "replicas": len(capacities),
        "replica_capacity_clips_per_s": capacity,
        "replicas_needed": needed,
    }
