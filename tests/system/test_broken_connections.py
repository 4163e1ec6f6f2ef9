"""Connections that break under a live feed, losing what was on the way (a network cut, or a
pause of the whole job longer than the heartbeat timeout): real producers (`h5feed produce`)
over TCP through a relay that swallows what the trainer sends and then cuts every connection
(tests/support/cut_proxy.py). ZeroMQ reconnects both ends by itself.

Whichever side notices first, every sample still arrives once per epoch and the feed goes on
at once: the trainer loses a producer whose send fails (``unreachable``), or a producer that
saw its connection break starts over as a new session (h5feed/producer/worker/connection.py)
and the trainer hands its units over (``reconnected``). Which of the two happens first is a
race here; tests/unit/producer/test_connection.py and the loop's in-process test pin the
start-over itself. ``unit_timeout_s`` is set far beyond the test's timeout, so a unit lost on
the way and never handed over would show as a stall, not as a slow pass.
"""

from __future__ import annotations

import collections
import pathlib
import subprocess
import time
from collections.abc import Iterator

import pytest
from cut_proxy import CutProxy
from remote_producers import remote_feed, two_producers

_NO_DEADLINE_S = 3600.0  # unit_timeout_s: a lost UNIT is never rescued by its deadline here
_MAX_GAP_S = 20.0  # between two batches, a cut included (a stall took unit_timeout_s)


@pytest.fixture()
def relay(port: int) -> Iterator[CutProxy]:
    proxy = CutProxy(port)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture()
def relayed_producers(
    relay: CutProxy, small_dataset: list[pathlib.Path]
) -> Iterator[list[subprocess.Popen[str]]]:
    with two_producers(relay.port, small_dataset[0].parent) as started:
        yield started


@pytest.mark.timeout(180)
def test_a_cut_that_loses_units_on_the_way_does_not_stall_the_feed(
    port: int,
    small_dataset: list[pathlib.Path],
    relay: CutProxy,
    relayed_producers: list[subprocess.Popen[str]],
) -> None:
    epochs, samples = 4, 24
    feed = remote_feed(
        port, small_dataset, epochs=epochs, batch_size=2, start_timeout_s=60,
        unit_timeout_s=_NO_DEADLINE_S,
    )  # fmt: skip
    seen: collections.Counter[tuple[int, int]] = collections.Counter()
    gaps, last = [], time.monotonic()
    for batches, batch in enumerate(feed, start=1):
        now = time.monotonic()
        gaps.append(now - last)
        seen.update(zip(batch["epoch"].tolist(), batch["sample"].tolist(), strict=True))
        if batches in (6, 30):  # mid-epoch, twice: the trainer keeps sending meanwhile
            relay.cut(swallow_s=0.5)
        last = time.monotonic()
    assert seen == collections.Counter({(e, s): 1 for e in range(epochs) for s in range(samples)})
    assert relay.cuts == 2 and relay.accepted >= 4, (relay.cuts, relay.accepted)
    assert max(gaps) < _MAX_GAP_S, max(gaps)
    stats = feed.stats()
    assert stats["peers_lost"] >= 1, stats["peers_lost"]  # the old sessions' units moved
