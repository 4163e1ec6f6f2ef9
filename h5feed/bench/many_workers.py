"""``h5feed bench many-workers``: one trainer with hundreds or a thousand connected workers
(what each figure means: ``h5feed bench many-workers --help``, :mod:`h5feed.bench.subcommands`).

The workers are synthetic (:mod:`h5feed.bench.swarm`: many DEALER sockets per process, the
real wire protocol, nothing decoded), in ``--processes`` processes, so that one process is
10 % of the workers: SIGKILL or SIGSTOP of it is 10 % vanishing at once. The trainer is
``h5feed.batches(workers=0, listen=ipc://...)`` with default timeouts, in this process; its
loop thread's CPU is read from ``/proc/self/task/TID/stat`` (the loop is one thread:
:mod:`h5feed.consumer.core.loop`), the whole process's (ZeroMQ's I/O thread too) from
``time.process_time``.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any, cast

import h5feed
from h5feed.bench.scale import make_files
from h5feed.bench.study_report import study_report, write_report

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_CONNECT_QUIET_S = 20.0  # no worker joined for this long: every one that will has
_SETTLE_S = 0.5  # after the last unit came back: the loop is back to its poll
_STOP_WAIT_S = 5.0
_AFTER_S = 1.0  # batches taken after a hand-over, before the next measurement


def thread_cpu_s(native_id: int) -> float:
    """CPU seconds (user + system) of thread ``native_id`` of this process."""
    with open(f"/proc/self/task/{native_id}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S  # utime, stime: fields 14, 15


def start_swarms(address: str, workers: int, processes: int) -> list[subprocess.Popen[bytes]]:
    """``workers`` synthetic workers in ``processes`` processes (as even as they divide)."""
    share, extra = divmod(workers, processes)
    swarms, first = [], 0
    for i in range(processes):
        count = share + (i < extra)
        if not count:
            continue
        command = [sys.executable, "-m", "h5feed.bench.swarm", "--connect", address]
        command += ["--first", str(first), "--count", str(count), "--parent-pid", str(os.getpid())]
        swarms.append(subprocess.Popen(command, stdin=subprocess.DEVNULL))
        first += count
    return swarms


def stop_swarms(swarms: list[subprocess.Popen[bytes]]) -> None:
    """Each leaves once its members were told BYE; what is left is stopped, then killed."""
    for swarm in swarms:
        for how in (None, swarm.terminate, swarm.kill):
            if how is not None:
                with_cont(swarm)
                how()
            try:
                swarm.wait(timeout=_STOP_WAIT_S)
                break
            except subprocess.TimeoutExpired:
                continue


def with_cont(swarm: subprocess.Popen[bytes]) -> None:
    """A stopped process takes no SIGTERM until continued."""
    if swarm.poll() is None:
        os.kill(swarm.pid, signal.SIGCONT)


class Trainer:
    """The trainer's side: the stream, its loop thread, and the counters read cheaply (the
    stream's ``stats()`` walks every worker: too dear to call in a timed window)."""

    def __init__(
        self, files: list[str], address: str, cache: str, batch_size: int, budget: int | None
    ) -> None:
        """``budget``: ``max_inflight_batches`` (None: the default, grown with the workers)."""
        self.feed = h5feed.batches(
            files,
            clip_len=2,
            batch_size=batch_size,
            workers=0,
            listen=address,
            index_cache=cache,
            epochs=None,
            seed=0,
            max_inflight_batches=budget,
        )
        began = time.perf_counter()
        self.stream: Any = cast(Any, iter(self.feed))  # a BatchStream: its loop is read
        next(self.stream)
        self.first_batch_s = time.perf_counter() - began
        self.loop_tid: int = self.stream._loop._thread.native_id

    def connected(self) -> int:
        return len(self.stream._loop.session.peers)

    def connected_in(self, first: int, count: int) -> int:
        """Connected workers among ``swarm-first`` .. ``swarm-(first+count-1)``."""
        names = {f"swarm-{i}" for i in range(first, first + count)}
        return sum(p.name in names for p in self.stream._loop.session.peers.values())

    def lost(self) -> int:
        return int(self.stream.counters.peers_lost)

    def settle(self, limit_s: float) -> float:
        """Wait (the trainer taking nothing) until no worker holds a unit: the budget is
        spent and nothing is left to make; the seconds it took (``limit_s`` at most)."""
        began = time.monotonic()
        peers = self.stream._loop.session.peers
        while time.monotonic() - began < limit_s:
            if not any(p.outstanding for p in list(peers.values())):
                break
            time.sleep(0.1)
        time.sleep(_SETTLE_S)  # the last DATA handled, the loop back to its poll
        return round(time.monotonic() - began, 2)

    def budget(self) -> int:
        return int(self.stream._gate.budget)

    def close(self) -> None:
        self.stream.close()


def cpu_window(trainer: Trainer, seconds: float, take: bool) -> dict[str, float]:
    """The loop thread's and the process's CPU over ``seconds``, taking batches as fast as
    they come (``take``) or none (idle)."""
    loop0, proc0, wall0 = thread_cpu_s(trainer.loop_tid), time.process_time(), time.monotonic()
    batches = 0
    while time.monotonic() - wall0 < seconds:
        if take:
            next(trainer.stream)
            batches += 1
        else:
            time.sleep(0.1)
    wall = time.monotonic() - wall0
    loop = thread_cpu_s(trainer.loop_tid) - loop0
    proc = time.process_time() - proc0
    figures = {"wall_s": round(wall, 2), "loop_cpu_share": round(loop / wall, 4)}
    figures["process_cpu_share"] = round(proc / wall, 4)
    if take:
        figures["batches_per_s"] = round(batches / wall, 1)
        figures["loop_cpu_ms_per_batch"] = round(1000 * loop / max(batches, 1), 3)
        figures["process_cpu_ms_per_batch"] = round(1000 * proc / max(batches, 1), 3)
    return figures


def hand_over(
    trainer: Trainer, swarm: subprocess.Popen[bytes], members: int, how: int, limit_s: float
) -> dict[str, Any]:
    """Send ``how`` to ``swarm`` (``members`` workers) while a thread takes batches at full
    rate; the time until every one of them was declared lost (their work handed over: the
    loop re-sends a lost peer's units in the pass that declares it lost), read every 10 ms,
    and the longest wait for a batch meanwhile (re-sent units queue behind the heirs' own)."""
    lost_before = trainer.lost()
    waits: list[float] = []
    stop = threading.Event()

    def take() -> None:
        while not stop.is_set():
            asked = time.monotonic()
            next(trainer.stream)
            waits.append(time.monotonic() - asked)

    taker = threading.Thread(target=take, name="bench-taker", daemon=True)
    taker.start()
    began = time.monotonic()
    os.kill(swarm.pid, how)
    done_s = None
    while time.monotonic() - began < limit_s:
        if trainer.lost() - lost_before >= members:
            done_s = time.monotonic() - began
            break
        time.sleep(0.01)
    time.sleep(_AFTER_S)  # the batches right after the hand-over count in the longest wait
    stop.set()
    taker.join(limit_s)
    return {
        "signal": signal.Signals(how).name,
        "workers": members,
        "hand_over_s": None if done_s is None else round(done_s, 2),
        "lost": trainer.lost() - lost_before,
        "longest_batch_wait_s": round(max(waits, default=0.0), 2),
        "batches_meanwhile": len(waits),
    }


def measure(args: argparse.Namespace, workers: int, files: list[str], root: str) -> dict[str, Any]:
    """Every figure for one worker count (the first process's workers are SIGKILLed, the
    second's SIGSTOPped)."""
    address = f"ipc://{root}/mw-{workers}.sock"
    swarms = start_swarms(address, workers, args.processes)
    row: dict[str, Any] = {"workers": workers, "processes": len(swarms)}
    trainer: Trainer | None = None
    try:
        cache = os.path.join(root, "cache")
        trainer = Trainer(files, address, cache, args.batch_size, args.budget)
        row["first_batch_s"] = round(trainer.first_batch_s, 2)
        began = changed = time.monotonic()
        seen = trainer.connected()
        while seen < workers and time.monotonic() - changed < _CONNECT_QUIET_S:
            next(trainer.stream)
            if trainer.connected() != seen:
                seen, changed = trainer.connected(), time.monotonic()
        row["connected"] = seen  # below `workers`: some never said hello (see the docs)
        row["all_connected_s"] = round(trainer.first_batch_s + changed - began, 2)
        row["credit_budget"] = trainer.budget()
        row["full"] = cpu_window(trainer, args.window_s, take=True)
        row["settled_s"] = trainer.settle(args.limit_s)
        row["idle"] = cpu_window(trainer, args.window_s, take=False)
        first = 0
        for swarm, how in zip(swarms, (signal.SIGKILL, signal.SIGSTOP), strict=False):
            argv = cast(list[str], swarm.args)
            count = int(argv[argv.index("--count") + 1])
            members = trainer.connected_in(first, count)
            name = signal.Signals(how).name.lower()
            row[name] = hand_over(trainer, swarm, members, how, args.limit_s)
            first += count
    finally:
        if trainer is not None:
            trainer.close()
        stop_swarms(swarms)
    return row


def table(rows: Sequence[dict[str, Any]]) -> str:
    head = (
        f"{'workers':>7} {'conn':>5} {'budget':>6} {'1st batch s':>11} {'idle loop':>9} "
        f"{'full loop':>9} {'batches/s':>9} {'loop ms/b':>9} {'proc ms/b':>9} "
        f"{'kill s':>7} {'stop s':>7}"
    )
    lines = [head]
    for r in rows:
        full, idle = r["full"], r["idle"]
        kill = r.get("sigkill", {}).get("hand_over_s")
        stop = r.get("sigstop", {}).get("hand_over_s")
        lines.append(
            f"{r['workers']:>7} {r['connected']:>5} {r['credit_budget']:>6} "
            f"{r['first_batch_s']:>11.2f} "
            f"{idle['loop_cpu_share']:>9.1%} {full['loop_cpu_share']:>9.1%} "
            f"{full['batches_per_s']:>9.1f} {full['loop_cpu_ms_per_batch']:>9.3f} "
            f"{full['process_cpu_ms_per_batch']:>9.3f} {kill!s:>7} {stop!s:>7}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Measure each count of ``args.workers``; print a table and write ``args.json``."""
    counts: list[int] = args.workers
    root = tempfile.mkdtemp(prefix="h5feed-mw-")
    rows: list[dict[str, Any]] = []
    try:
        files = make_files(pathlib.Path(root) / "files", args.files, args.videos, packed=True)
        print(table([]), flush=True)
        for count in counts:
            rows.append(measure(args, count, files, root))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    settings = {
        "files": args.files,
        "videos_per_file": args.videos,
        "batch_size": args.batch_size,
        "window_s": args.window_s,
    }
    if args.json:
        write_report(args.json, study_report("many-workers", settings, rows))
        print(f"wrote {args.json}")
    return 0
