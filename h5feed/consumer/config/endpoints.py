"""A shared fleet's endpoint, ``tcp://HOST:PORT``, parsed (:func:`parse_endpoint`): the
network group checks ``fleet=`` with it before anything starts, the announcer resolves the
host it names (:mod:`h5feed.consumer.processes.fleet_announcer`).
"""

from __future__ import annotations

import re
from typing import Final

_ENDPOINT: Final = re.compile(r"tcp://(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\[\]]+):(?P<port>\d{1,5})")


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """(host, port) of ``tcp://host:port`` (IPv6 in brackets); ValueError otherwise."""
    match = _ENDPOINT.fullmatch(endpoint)
    if match is None or not 0 < int(match["port"]) < 1 << 16:
        raise ValueError(f"fleet endpoint must be tcp://HOST:PORT, got {endpoint!r}")
    return match["host"].strip("[]"), int(match["port"])
