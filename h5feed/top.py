"""``h5feed top URL [URL ...]``: a live terminal view of feeds and producer services.

Design: ``top`` reads the ``/stats`` JSON endpoint that a consumer serves with
``metrics_port=`` (or ``$H5FEED_METRICS_PORT``) and that ``h5feed produce --metrics-port``
serves, over plain HTTP: the same numbers as ``ds.stats()``, from any machine that reaches the
port, without joining the trainer's ZeroMQ socket (which is for workers, may need CURVE keys,
and must not be slowed by observers). A consumer shows one row per worker and per host and
the input-bound verdict and the producer replicas needed; a producer service one row per
worker (with rates between two refreshes).

Guarantees: every request is bounded by ``--timeout``; an endpoint that does not answer is
shown as such (and with ``--once`` the exit status is 1) — ``top`` never hangs on one.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

#: Seconds between two refreshes of the live view.
REFRESH_S = 1.0
#: Seconds one request may take.
TIMEOUT_S = 2.0

_NONE = "-"  # a figure not known yet
Result = dict[str, Any] | str  # a /stats snapshot, or why there is none


def stats_url(target: str) -> str:
    """``host:port``, ``http://host:port`` or a full ``.../stats`` URL -> the ``/stats`` URL."""
    url = target if "://" in target else f"http://{target}"
    if url.rstrip("/").endswith("/stats"):
        return url
    return url.rstrip("/") + "/stats"


def fetch(url: str, timeout_s: float = TIMEOUT_S) -> Result:
    """The endpoint's snapshot, or a one-line reason it could not be read."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            data = json.loads(response.read())
    except (OSError, ValueError) as exc:  # URLError, timeouts, refused, bad JSON
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return f"unreachable: {reason}"
    if not isinstance(data, dict):
        return "not an h5feed /stats endpoint (no JSON object)"
    return data


def _num(value: Any, digits: int = 1, scale: float = 1.0) -> str:
    if value is None:
        return _NONE
    return f"{value * scale:,.{digits}f}"


def _consumer_view(url: str, stats: dict[str, Any]) -> RenderableType:
    if "job" not in stats:
        return Text(f"{url}  consumer: no iteration yet (running: {stats.get('running')})")
    recent, total = stats["per_s_recent"], stats["per_s_total"]
    state = "running" if stats["running"] else "finished"
    head = Text(f"{url}  consumer job {stats['job'][:8]} ({state})", style="bold")
    line = (
        f"batches {stats['batches']:,}  clips {stats['clips']:,}  "
        f"clips/s {recent['clips']:.1f} (10 s) {total['clips']:.1f} (all)  "
        f"MB/s {recent['bytes'] / 1e6:.1f}  "
        f"input wait {stats['wait_share_recent']:.0%} (10 s) {stats['wait_share_total']:.0%} "
        f"(all)  in flight {stats['inflight_batches']}/{stats['credit_budget']}  "
        f"queue {stats['queue_depth']}  startup {stats['startup_s']:.1f} s  "
        f"malformed {stats['malformed_messages']} dropped {stats['dropped_parts']} "
        f"reassigned {stats['reassigned_units']} (handed back "
        f"{stats.get('units_handed_back', 0)}, re-made {stats.get('units_remade', 0)})"
    )
    verdict = Text(stats["verdict"], style="bold red" if stats["input_bound"] else "bold green")
    # "fleet": the key's old name (a trainer before 0.3.0; the alias goes in 0.4.0).
    producers = Text(producers_line(stats.get("producers") or stats.get("fleet") or {}))
    workers = Table("worker", "host", "version", "files", "clips", "clips/s", "MB/s", "unit ms",
                    "last part", "units held", title="workers", title_justify="left")  # fmt: skip
    for w in sorted(stats["workers"], key=lambda w: (w["host"], w["name"])):
        workers.add_row(
            w["name"],
            w["host"],
            f"{w.get('package') or '?'} (p{w.get('protocol', '?')})",
            str(w["files"]),
            f"{w['clips']:,}",
            _num(w["per_s_recent"]["clips"]),
            _num(w["per_s_recent"]["bytes"], scale=1e-6),
            _num(w["unit_latency_s"], 0, 1e3),
            _NONE if w["last_seen_s_ago"] is None else f"{w['last_seen_s_ago']:.1f} s ago",
            str(w["outstanding_units"]),
        )
    hosts = Table("host", "workers", "clips", "clips/s", title="hosts", title_justify="left")
    for name, h in sorted(stats["hosts"].items()):
        hosts.add_row(name, str(h["workers"]), f"{h['clips']:,}", _num(h["clips_per_s"]))
    return Group(head, Text(line), verdict, producers, workers, hosts)


def producers_line(producers: dict[str, Any]) -> str:
    """The producer replicas that would keep up (docs/deploy/sizing.md), or why unknown; and
    on a shared fleet, that it is shared and this trainer's share."""
    shared = producers.get("shared")
    suffix = ""
    if shared is not None:
        share = "?" if shared["share"] is None else f"{shared['share']:.0%}"
        suffix = (
            f"; shared fleet: {shared['serving']} of {shared['replicas']} replicas serve this "
            f"trainer ({shared['workers']} workers), up to {shared['trainers_max']} trainers "
            f"a replica, share {share}"
        )
        if shared["refused"]:
            suffix += f"; refused by {len(shared['refused'])}"
    if producers.get("replicas_needed") is None:
        return "replicas needed: unknown (no remote producer has said its busy time)" + suffix
    return (
        f"replicas needed: {producers['replicas_needed']} (demand "
        f"{producers['demand_clips_per_s']:.1f} clips/s; a replica makes "
        f"{producers['replica_capacity_clips_per_s']:.1f} with every worker busy; "
        f"{producers['replicas']} measured)" + suffix
    )


def _producer_view(
    url: str, stats: dict[str, Any], previous: dict[str, Any] | None, seconds: float
) -> RenderableType:
    head = Text(
        f"{url}  producer {stats['producer']} on {stats['host']}: "
        f"{stats['running_workers']}/{len(stats['workers'])} workers running",
        style="bold",
    )
    before = {w["name"]: w for w in (previous or {}).get("workers", [])}
    table = Table("worker", "host", "up", "pid", "restarts", "units", "clips", "clips/s",
                  "MB sent", "busy", "errors", "jobs")  # fmt: skip
    for w in stats["workers"]:
        old = before.get(w["name"])
        rate = busy = _NONE
        if old is not None and seconds > 0:
            rate = _num((w["clips"] - old["clips"]) / seconds)
            busy = f"{min((w['busy_s'] - old['busy_s']) / seconds, 1.0):.0%}"
        table.add_row(
            w["name"], w["host"], "yes" if w["running"] else "NO", str(w["pid"]),
            str(w["restarts"]), f"{w['units']:,}", f"{w['clips']:,}", rate,
            _num(w["bytes"], scale=1e-6), busy, str(w["errors"]), str(w["jobs"]),
        )  # fmt: skip
    if "fleet" not in stats:
        return Group(head, table)
    return Group(head, table, trainers_table(stats["fleet"], previous, seconds))


def trainers_table(
    fleet: dict[str, Any], previous: dict[str, Any] | None, seconds: float
) -> RenderableType:
    """A shared fleet's replica: its trainers, each with its workers and its share of their
    CPU since the previous refresh (h5feed/producer/service/fleet.py)."""
    before = {t["trainer"]: t for t in ((previous or {}).get("fleet") or {}).get("trainers", [])}
    used = {
        t["trainer"]: t["cpu_s"] - before[t["trainer"]]["cpu_s"]
        for t in fleet["trainers"]
        if t["trainer"] in before and seconds > 0
    }
    total = sum(used.values())
    table = Table("trainer", "workers", "running", "CPU s", "CPU share", "busy s", "refused",
                  title=f"trainers: {fleet['attached']} of at most {fleet['max_trainers']} "
                        f"(refused {fleet['refused']}, stopping {fleet['stopping']})",
                  title_justify="left")  # fmt: skip
    for t in sorted(fleet["trainers"], key=lambda t: t["trainer"]):
        share = f"{used[t['trainer']] / total:.0%}" if total > 0 and t["trainer"] in used else _NONE
        table.add_row(
            t["trainer"], str(t["workers"]), str(t["running"]), _num(t["cpu_s"]), share,
            _num(t["busy_s"]), t["refused"] or "",
        )  # fmt: skip
    return table


class Top:
    """Fetches every endpoint and renders them; keeps the previous producer snapshots for
    rates."""

    def __init__(self, targets: Sequence[str], timeout_s: float = TIMEOUT_S) -> None:
        self.urls = [stats_url(t) for t in targets]
        self.timeout_s = timeout_s
        self._previous: dict[str, tuple[float, dict[str, Any]]] = {}
        self.failed = False

    def view(self) -> RenderableType:
        parts: list[RenderableType] = []
        self.failed = False
        for url in self.urls:
            now = time.monotonic()
            result = fetch(url, self.timeout_s)
            if isinstance(result, str):
                self.failed = True
                parts.append(Text(f"{url}  {result}", style="bold red"))
            elif result.get("role") == "producer":
                seen, old = self._previous.get(url, (now, None))
                parts.append(_producer_view(url, result, old, now - seen))
                self._previous[url] = (now, result)
            else:
                parts.append(_consumer_view(url, result))
            parts.append(Text(""))
        return Group(*parts)


def run_top(
    targets: Sequence[str],
    *,
    once: bool = False,
    interval_s: float = REFRESH_S,
    timeout_s: float = TIMEOUT_S,
    console: Console | None = None,
) -> int:
    """Show the endpoints, refreshed every ``interval_s`` until Ctrl-C; ``once``: print one
    snapshot and return 1 if an endpoint could not be read, else 0."""
    from rich.live import Live

    if console is None:
        console = Console()
        if not console.is_terminal:  # piped: no terminal width to fit, keep rows whole
            console = Console(width=200)
    top = Top(targets, timeout_s)
    if once:
        console.print(top.view())
        return 1 if top.failed else 0
    try:
        with Live(top.view(), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(interval_s)
                live.update(top.view(), refresh=True)
    except KeyboardInterrupt:
        return 0
