"""What a malformed DATA part costs: never silence.

A part that does not fit its unit (other samples) or the element spec (a field of another
shape or dtype) is never batched. What else happens depends on who sent it:

1. one of the iteration's own local workers (trusted: the same code, on this host): the part
   can only come from a bug, and its unit would wait for the unit timeout, then be produced
   again by a replacement that has the same bug. The iteration ends at once with a
   :class:`~h5feed.common.errors.ProtocolError` naming the worker, the unit and the field;
2. a remote producer (untrusted: another host, maybe another release): the part is dropped
   and counted (``stats()["malformed_messages"]``), logged, and warned as
   :class:`~h5feed.common.errors.MalformedPartWarning`, which Python shows by default
   (the package logger keeps its NullHandler). The unit moves on the unit timeout.
"""

from __future__ import annotations

import warnings

from h5feed.common.errors import MalformedPartWarning, ProtocolError
from h5feed.common.system.logs import IdsLogger
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.ledger import Peer


def drop_malformed(peer: Peer, unit: int, why: str, counters: Counters, log: IdsLogger) -> None:
    """Drop ``peer``'s part of unit ``unit`` (see the module docstring); raises for a local
    peer."""
    if peer.local:
        raise ProtocolError(
            f"local worker {peer} sent a part of unit {unit} that does not fit: {why} "
            "(a bug in h5feed or in how the element was packed; the iteration ends instead of "
            "waiting for the unit timeout)"
        )
    counters.malformed_messages += 1
    log.warning("dropped malformed part of unit %d from %s: %s", unit, peer, why)
    warnings.warn(
        f"h5feed dropped a malformed part of unit {unit} from producer {peer}: {why} "
        "(counted in stats()['malformed_messages']; the unit moves on the unit timeout)",
        MalformedPartWarning,
        stacklevel=2,
    )
