"""A network namespace joined to this one by a veth pair: real TCP between two "hosts".

The socket benchmark (:mod:`h5feed.bench.socket_ceiling`) runs its producers inside the
namespace and the trainer outside, so every batch crosses the kernel's TCP stack and a veth
link (no ``ipc://``, no loopback shortcut, no shared memory offered: see
``synthetic_worker --host``).

Guarantees of :func:`network_namespace`:

1. It needs root and the ``ip`` command (iproute2); without either it raises
   :class:`NetnsUnavailable` naming what is missing, before changing anything.
2. Everything it creates (the namespace and the veth pair) is removed when the ``with``
   block ends, however it ends, and again at interpreter exit if that removal failed
   (``atexit``); removal is idempotent. A SIGKILL leaves them behind: their names start with
   :data:`NAME_PREFIX` and hold the creating pid, and ``ip netns del NAME`` removes both.
3. Names are per process (the pid). The /24 subnet is one no interface of this host holds
   (drawn from the pid, else the next free one), picked and taken under a machine-wide lock
   (:data:`LOCK_FILE`), so two runs at once never share one. Namespaces that a killed run
   left behind (named for a pid no longer running) are removed first: their addresses would
   otherwise answer for the subnet and take a new run's replies (seen: a run that drew a
   leftover's subnet timed out waiting for its sender).
"""

from __future__ import annotations

import atexit
import dataclasses
import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

#: Start of every namespace this module creates (tests look for leftovers by it).
NAME_PREFIX = "h5feed-bench-"
#: The namespaces' subnets are 10.213.N.0/24, N in 1..250.
SUBNETS = range(1, 251)
#: Held while a subnet is picked and taken (guarantee 3).
LOCK_FILE = "/run/h5feed-bench-netns.lock"
_IP_TIMEOUT_S = 10.0


class NetnsUnavailable(RuntimeError):
    """The namespace cannot be made here: not root, no ``ip``, or ``ip`` refused."""


@dataclasses.dataclass(frozen=True, slots=True)
class Netns:
    """A namespace and the two ends of its link."""

    name: str
    host_address: str  # this (root) namespace's end, e.g. 10.213.7.1
    peer_address: str  # the namespace's end, e.g. 10.213.7.2
    host_link: str
    peer_link: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec NAME ...``)."""
        return ["ip", "netns", "exec", self.name, *argv]


def missing() -> str | None:
    """Why no namespace can be made here, or None."""
    problems = []
    if os.geteuid() != 0:
        problems.append(f"root (this process runs as uid {os.geteuid()})")
    if shutil.which("ip") is None:
        problems.append("the `ip` command (iproute2: apt-get install iproute2)")
    if not problems:
        return None
    return "network namespaces need " + " and ".join(problems)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S, check=False
    )
    if check and result.returncode != 0:
        raise NetnsUnavailable(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result


def exists(name: str) -> bool:
    """Whether a namespace named ``name`` exists."""
    listed = _ip("netns", "list", check=False).stdout.split("\n")
    return any(line.split(" ")[0] == name for line in listed if line)


def _remove(net: Netns) -> None:
    """Delete the veth pair (both ends go together) and the namespace; quiet when already
    gone."""
    _ip("link", "del", net.host_link, check=False)
    if exists(net.name):
        _ip("netns", "del", net.name)


def remove_stale() -> list[str]:
    """Remove the namespaces named for a pid that no longer runs (a killed run's), and their
    links: each link in the namespace is deleted first, which deletes a veth pair at once
    (the kernel destroys a deleted namespace's devices later, in the background, and until
    then the end here still holds its address). Returns their names."""
    stale = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split(" ")[0]
        pid = name.removeprefix(NAME_PREFIX)
        if name.startswith(NAME_PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            for link in _ip("-n", name, "-o", "link", "show", check=False).stdout.splitlines():
                device = link.split(":")[1].strip().split("@")[0] if ":" in link else "lo"
                if device != "lo":
                    _ip("-n", name, "link", "del", device, check=False)
            _ip("netns", "del", name, check=False)
            stale.append(name)
    return stale


def used_subnets() -> set[int]:
    """The N of every 10.213.N.x address an interface of this namespace holds."""
    shown = _ip("-o", "-4", "addr", "show", check=False).stdout
    return {int(n) for n in re.findall(r"\binet 10\.213\.(\d+)\.\d+/", shown)}


def _free_subnet(start: int) -> int:
    used = used_subnets()
    for offset in range(len(SUBNETS)):
        candidate = SUBNETS[(start - SUBNETS[0] + offset) % len(SUBNETS)]
        if candidate not in used:
            return candidate
    raise NetnsUnavailable(f"every subnet 10.213.N.0/24 (N in 1..250) is in use: {sorted(used)}")


@contextmanager
def machine_lock() -> Iterator[None]:
    """Held by one process of this machine at a time (:data:`LOCK_FILE`): guarantee 3."""
    with open(LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def network_namespace(name: str | None = None, subnet: int | None = None) -> Iterator[Netns]:
    """A fresh namespace ``name`` (default ``h5feed-bench-PID``) linked to this one by a veth
    pair with addresses 10.213.SUBNET.1 (here) and .2 (there), both up (and the namespace's
    loopback); ``subnet`` None: a free one (guarantee 3), else that one if free. See the
    module docstring for what is guaranteed."""
    why = missing()
    if why is not None:
        raise NetnsUnavailable(why)
    pid = os.getpid()
    tag = f"{pid % 100000:05d}"  # link names are at most 15 characters
    removed = False
    net: Netns | None = None

    def remove() -> None:
        nonlocal removed
        if not removed and net is not None:
            _remove(net)
            removed = True

    try:
        with machine_lock():
            remove_stale()
            third = _free_subnet(pid % len(SUBNETS) + 1) if subnet is None else subnet
            if third in used_subnets():
                raise NetnsUnavailable(f"subnet 10.213.{third}.0/24 is in use on this host")
            made = Netns(
                name=name or f"{NAME_PREFIX}{pid}",
                host_address=f"10.213.{third}.1",
                peer_address=f"10.213.{third}.2",
                host_link=f"h5fb{tag}h",
                peer_link=f"h5fb{tag}p",
            )
            if exists(made.name):  # not ours: never removed here
                raise NetnsUnavailable(f"a network namespace named {made.name} exists already")
            net = made  # from here on, ours to remove however this ends
            atexit.register(remove)
            _ip("netns", "add", net.name)
            _ip("link", "add", net.host_link, "type", "veth", "peer", "name", net.peer_link)
            _ip("link", "set", net.peer_link, "netns", net.name)
            _ip("addr", "add", f"{net.host_address}/24", "dev", net.host_link)
            _ip("link", "set", net.host_link, "up")
            _ip("-n", net.name, "addr", "add", f"{net.peer_address}/24", "dev", net.peer_link)
            _ip("-n", net.name, "link", "set", net.peer_link, "up")
            _ip("-n", net.name, "link", "set", "lo", "up")
        yield net
    finally:
        remove()
        atexit.unregister(remove)
