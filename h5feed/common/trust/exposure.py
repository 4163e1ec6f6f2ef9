"""Which ZeroMQ addresses stay on this host, and the rule for those that do not.

Without CURVE keys, anyone who reaches a consumer's ``listen`` address can join as a producer
(read the job's file list, send batches, end the run with one ERROR), and anyone a producer
``--connect``s to can hand it jobs. So an address that leaves the host is refused unless the
caller either brings CURVE keys or says ``insecure`` out loud; then :class:`InsecureWarning`
is raised through :mod:`warnings` (shown by default, unlike h5feed's logging).

Guarantees of :func:`is_local_address`: only these are local — ``ipc://`` and ``inproc://``
endpoints, and ``tcp://`` on a loopback host: ``127.0.0.0/8``, ``::1`` (``[::1]``) or
``localhost``. Everything else is not: ``tcp://*:N``, ``0.0.0.0``, ``::``, interface names,
host names (never resolved: a name can change what it points to), other transports. Doubt
counts as exposed.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import warnings
from types import FrameType

from h5feed.common.errors import InsecureWarning
from h5feed.common.system.package_dir import package_dir

_LOCAL_TRANSPORTS = ("ipc://", "inproc://")


def is_local_address(address: str) -> bool:
    """True when ``address`` (a ZeroMQ endpoint, to bind or to connect) stays on this host."""
    if address.startswith(_LOCAL_TRANSPORTS):
        return True
    if not address.startswith("tcp://"):
        return False
    rest = address.removeprefix("tcp://")
    rest = rest.rsplit(";", 1)[-1]  # "tcp://source;destination:port" connects to destination
    host, colon, _port = rest.rpartition(":")
    if not colon:
        return False
    return is_loopback_host(host)


def endpoint_of(address: str, port: int) -> str:
    """The ZeroMQ TCP endpoint of an IP address (a zone suffix allowed) and a port, IPv6 in
    brackets."""
    version = ipaddress.ip_address(address.split("%", 1)[0]).version
    return f"tcp://[{address}]:{port}" if version == 6 else f"tcp://{address}:{port}"


def is_loopback_host(host: str) -> bool:
    """True for ``localhost``, an address of ``127.0.0.0/8`` and ``::1`` (bracketed or not)."""
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "*", an interface or a host name: not provably loopback


def check_listen(address: str, *, keyed: bool, insecure: bool) -> None:
    """The consumer's rule for ``listen=``: a local address, or CURVE keys (``keyed``), needs
    nothing; else ValueError naming the address and both ways out, unless ``insecure``."""
    if keyed or is_local_address(address):
        return
    if not insecure:
        raise ValueError(
            f"h5feed: listen={address!r} is reachable from other hosts, and without CURVE keys "
            "anyone who reaches it can join as a producer (read the file list, send batches, "
            "end the run). Either give curve_key= and curve_authorized= "
            "(see docs/deploy/security.md), "
            "or pass insecure=True if every host that can reach this address is trusted."
        )


def warn_insecure_listen(address: str, *, keyed: bool, insecure: bool) -> None:
    """Warn (:class:`InsecureWarning`) when ``insecure`` is what lets ``address`` through."""
    if insecure and not keyed and not is_local_address(address):
        warnings.warn(
            f"h5feed listens on {address} without CURVE keys (insecure=True): any host that "
            "reaches it can join as a producer",
            InsecureWarning,
            stacklevel=_first_caller_outside_h5feed(),
        )


def _first_caller_outside_h5feed() -> int:
    """The ``stacklevel`` that points a warning issued by this module's caller at the user's
    line (``h5feed.batches(...)``) whichever h5feed functions lie in between."""
    package = str(package_dir()) + os.sep
    frame: FrameType | None = sys._getframe(1)  # the function that warns: stacklevel 1
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame = frame.f_back
        level += 1
    return level


def connect_refusal(address: str, *, keyed: bool, insecure: bool) -> str | None:
    """The producer's rule for ``--connect``: None when allowed, else the one-line reason."""
    if keyed or insecure or is_local_address(address):
        return None
    return (
        f"--connect {address} leaves this host and no CURVE keys were given: whoever answers "
        "there would send this producer its jobs. Give --key and --server-key (see "
        "docs/deploy/security.md), or --insecure (H5FEED_INSECURE=1) if the network is trusted."
    )


def fleet_refusal(address: str, *, keyed: bool, insecure: bool) -> str | None:
    """A shared fleet's rule for ``--listen``: None when allowed, else the one-line reason."""
    if keyed or insecure or is_local_address(address):
        return None
    return (
        f"--listen {address} is reachable from other hosts and no CURVE keys were given: any "
        "host that reaches it could attach as a trainer and have this fleet read every file "
        "under --data-root for it. Give --key and --trainer-keys (see "
        "docs/deploy/security.md), or --insecure (H5FEED_INSECURE=1) if the network is trusted."
    )
