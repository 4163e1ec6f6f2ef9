"""CPU and memory accounting from ``/proc`` (Linux), without psutil.

CPU: ``/proc/PID/stat`` utime + stime (all threads of a process); the machine's busy time from
``/proc/stat``. Memory: ``/proc/PID/status`` VmRSS, and ``/proc/PID/smaps_rollup`` Pss, where
shared pages (libraries, pages a forked worker still shares with its parent) are divided
among the processes that map them, so a sum over a process tree counts each page once.
On a system without ``/proc`` every function returns zeros or empty sets.
"""

from __future__ import annotations

import os

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def available_cores() -> int:
    """CPUs this process may run on (its affinity mask), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def proc_stat(pid: int | str) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or []."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return []
    return stat[stat.rfind(b")") + 2 :].split()


def process_cpu_s(pid: int | str) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), 0 if it is gone; of one
    thread with ``pid`` given as ``"PID/task/TID"``."""
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS if fields else 0.0


def self_sys_and_faults() -> tuple[float, int]:
    """This process's system CPU seconds and minor page faults so far."""
    fields = proc_stat("self")
    if not fields:
        return 0.0, 0
    return int(fields[12]) / _CLOCK_TICKS, int(fields[7])


def system_busy_s() -> float:
    """CPU seconds all CPUs of the machine spent busy since boot (not idle, not iowait)."""
    try:
        with open("/proc/stat") as handle:
            values = [int(v) for v in handle.readline().split()[1:]]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / _CLOCK_TICKS


def descendants(pid: int) -> set[int]:
    """Live (not zombie) processes below ``pid``: children, their children, and so on."""
    parent_of: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if entry.isdigit():
            fields = proc_stat(entry)
            if len(fields) >= 2 and fields[0] != b"Z":
                parent_of[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parent_of.items() if parent in frontier} - found
        found |= frontier
    return found


def proc_field(path: str, key: bytes) -> int:
    """The number on the ``key`` line of a /proc file (``b"VmRSS:"``: kB; ``b"voluntary_ctxt_
    switches:"``: a count), 0 if absent or unreadable."""
    try:
        with open(path, "rb") as handle:
            for line in handle:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_memory_mb(pid: int) -> tuple[float, float]:
    """(RSS, PSS) in MB summed over ``pid`` and its descendants, at this moment."""
    pids = {pid} | descendants(pid)
    rss = sum(proc_field(f"/proc/{p}/status", b"VmRSS:") for p in pids)
    pss = sum(proc_field(f"/proc/{p}/smaps_rollup", b"Pss:") for p in pids)
    return rss / 1024.0, pss / 1024.0
