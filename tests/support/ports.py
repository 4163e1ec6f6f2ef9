"""TCP ports for tests that must name a port before something binds it (a producer's
``--connect``, a cluster's ``TF_CONFIG``, a container's published port).

Why not the OS's pick (bind to port 0, close, hand the number on): that number comes from
the kernel's ephemeral range, the same range every ``connect()`` and every port-0 bind of
the tests running beside it draws from, so between the close and the real bind another
process can take it. A TensorFlow cluster then hangs: the worker whose port was taken
exits ("Could not start gRPC server") and its peers wait for it forever. These ports are
picked at random *below* the ephemeral range, where nothing is handed out by the kernel, and
each is checked free on every IPv4 (and, where there is one, IPv6) interface first.
"""

from __future__ import annotations

import errno
import pathlib
import random
import socket

_LOWEST = 20000
_EPHEMERAL_RANGE = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range")
_TRIES = 200
# SystemRandom: tests seed the global RNG, and two xdist workers with the same seed
# would pick the same ports.
_pick = random.SystemRandom()
_handed_out: set[int] = set()
#: What creating or binding an IPv6 socket fails with on a host without IPv6.
_NO_IPV6 = frozenset({errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT})


def _first_ephemeral() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    families = [(socket.AF_INET, "0.0.0.0")]
    if socket.has_ipv6:
        families.append((socket.AF_INET6, "::"))
    for family, host in families:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind((host, port))
        except OSError as error:
            if family == socket.AF_INET6 and error.errno in _NO_IPV6:
                continue  # no IPv6 on this host: nothing to collide with there
            return False
    return True


def free_port() -> int:
    """A TCP port no one listens on now, on any interface, outside the kernel's ephemeral
    range and not handed out before by this process."""
    high = _first_ephemeral()
    for _ in range(_TRIES):
        port = _pick.randrange(_LOWEST, high)
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free TCP port in {_LOWEST}..{high - 1} after {_TRIES} tries")


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (see :func:`free_port`)."""
    return [free_port() for _ in range(count)]
