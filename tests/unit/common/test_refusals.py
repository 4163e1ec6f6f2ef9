"""Refusals are counted and logged at a bounded rate, and a peer that keeps sending what it
was never asked for is refused (docs/deploy/security.md, "Misbehaving peers"): CURVE keys that are
not listed, and DATA parts of units the sender never held (forged)."""

from __future__ import annotations

import logging
import pathlib
import time

import numpy as np
import pytest
import zmq
from fake_peers import FakeTransport, frames_of, hello_frames
from ports import free_port

import h5feed
from h5feed.common.protocol import messages
from h5feed.common.trust import curve_server as security
from h5feed.consumer.core import session as session_module
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.events import PeerLost
from h5feed.consumer.core.session import PeerSession

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}
JOB = "job-r"
#: Every wait of the end-to-end test is bounded by this.
WAIT_S = 60.0


def forged(job: str, unit: int) -> messages.Data:
    """A part of ``unit`` (never issued to its sender), 2 rows of tiny frames."""
    frames = np.zeros((2, 4, 40, 40, 3), np.uint8)
    return messages.Data(job, unit, 0, (0, 1), {"frames": frames})


def test_unlisted_curve_keys_are_counted_and_logged_once_per_interval_whatever_the_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """1,000 fresh keys make one line within the interval, not one each (issue 38 item 7)."""
    listed = b"L" * 40
    provider = security._Listed({listed}, logging.getLogger("h5feed.consumer"))
    with caplog.at_level("WARNING", logger="h5feed"):
        assert provider.callback("*", listed) is True
        for i in range(1000):
            assert provider.callback("*", f"{i:040d}".encode()) is False
    assert provider.refused == 1000
    assert len(caplog.records) == 1
    assert "CURVE clients: refused (key not listed)" in caplog.records[0].getMessage()


def test_parts_of_units_never_held_are_logged_at_a_bounded_rate_then_refuse_the_sender(
    caplog: pytest.LogCaptureFixture,
) -> None:
    transport = FakeTransport()
    counters = Counters()
    session = PeerSession(JOB, transport, None, 60.0, counters)
    session.receive(b"f", hello_frames("f"))
    session.events.clear()
    peer = session.peers[b"f"]
    limit = session_module._MALFORMED_LIMIT
    with caplog.at_level("WARNING", logger="h5feed"):
        for unit in range(limit):
            session.unexpected_part(peer, 1000 + unit)
        assert b"f" in session.peers and not session.events
        assert len(caplog.records) == 1  # one line for 100 parts in 10 s
        session.unexpected_part(peer, 5000)
    [lost] = [e for e in session.events if isinstance(e, PeerLost)]
    assert lost.cause == "refused" and "which it does not hold" in lost.reason
    [bye] = transport.to(b"f")
    assert isinstance(bye, messages.Bye) and bye.reason.startswith("refused: ")
    # Parts of another job count the same way (dropped_parts, and towards the limit).
    session.receive(b"g", hello_frames("g"))
    for unit in range(limit + 1):
        session.receive(b"g", frames_of(forged("another-job", unit)))
    assert b"g" not in session.peers and counters.dropped_parts == limit + 1


def test_a_peer_forging_parts_is_refused_and_the_epoch_arrives_exactly_once(
    small_dataset: list[pathlib.Path], caplog: pytest.LogCaptureFixture
) -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    feed = h5feed.batches(
        small_dataset, **CLIP, batch_size=1, workers=1, seed=6, listen=address,
        join_grace_s=0.0, max_inflight_batches=2,
    )  # fmt: skip
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    forger = context.socket(zmq.DEALER)
    forger.setsockopt(zmq.LINGER, 0)
    forger.setsockopt(zmq.ROUTING_ID, b"forger")
    samples: list[int] = []
    limit = session_module._MALFORMED_LIMIT
    try:
        with caplog.at_level("WARNING", logger="h5feed"), feed.stream() as stream:
            for i, batch in enumerate(stream):
                samples += batch["sample"].tolist()
                if i == 1:
                    forger.connect(address)
                    hello = messages.Hello("forger", 4242, "elsewhere", "x", "n")
                    forger.send_multipart(messages.encode(hello))
                    for unit in range(10**6, 10**6 + limit + 20):  # never sent to it
                        forger.send_multipart(messages.encode(forged(stream.job_id, unit)))
                    refused = wait_for_refusal(forger)
            stats = stream.stats()
    finally:
        forger.close(0)
        context.term()
    assert refused.startswith("refused: sent"), refused
    assert sorted(samples) == list(range(24))  # exactly once: no forged row got in
    assert stats["dropped_parts"] >= limit + 1
    drops = [r.getMessage() for r in caplog.records if "dropped from b'forger'" in r.getMessage()]
    assert len(drops) == 1, drops  # one line for 120 parts within 10 s, not one per part


def wait_for_refusal(dealer: zmq.Socket[bytes]) -> str:
    """The reason of the BYE that refuses ``dealer`` (other messages skipped)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if dealer.poll(100):
            message = messages.decode(dealer.recv_multipart())
            if isinstance(message, messages.Bye):
                return message.reason
    raise AssertionError(f"no BYE within {WAIT_S} s")


logging.getLogger("h5feed").propagate = True  # caplog reads the package's records
