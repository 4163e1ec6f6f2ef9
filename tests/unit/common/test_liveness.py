"""The liveness arithmetic: a silent peer is declared lost within ``peer_timeout_s``.

The terms are libzmq's (its timeout clock starts at the first PING after the last message
received: up to one heartbeat interval late), the session's probe period and the loop's
health check; `tests/system/test_failures.py` and `tests/system/test_resilience.py` see a
stopped or cut-off peer lost for real."""

from __future__ import annotations

import pytest

from h5feed.common.protocol.liveness import (
    HEARTBEAT_IVL_S,
    PROBE_EVERY_S,
    consumer_heartbeat_timeout,
    loss_bound,
)
from h5feed.consumer.core.loop import _HEALTH_EVERY_S


@pytest.mark.parametrize("peer_timeout_s", [2.2, 2.5, 3.0, 5.0, 10.0, 60.0])
def test_a_silent_peer_is_lost_within_peer_timeout(peer_timeout_s: float) -> None:
    assert loss_bound(peer_timeout_s, _HEALTH_EVERY_S) <= peer_timeout_s + 1e-9


def test_the_bound_counts_the_interval_before_libzmq_arms_its_timeout() -> None:
    # Default peer_timeout_s: 0.5 s interval + 3.5 s timeout + 0.5 s probe + 0.2 s check.
    assert consumer_heartbeat_timeout(5.0) == pytest.approx(5.0 - 1.5)
    assert loss_bound(5.0, _HEALTH_EVERY_S) == pytest.approx(4.7)


def test_the_timeout_never_drops_below_two_heartbeats() -> None:
    # The smallest peer_timeout_s the options accept (2 s): a PONG still has two intervals.
    assert consumer_heartbeat_timeout(2.0) == 2 * HEARTBEAT_IVL_S
    assert loss_bound(2.0, _HEALTH_EVERY_S) == pytest.approx(
        HEARTBEAT_IVL_S + 2 * HEARTBEAT_IVL_S + PROBE_EVERY_S + _HEALTH_EVERY_S
    )
