"""A host whose workers stop together (SIGSTOP, a frozen VM, a cut cable): nothing tells the
trainer but heartbeats, and their connections time out one by one over a second or two.

The work of each one lost must not go to the next of them: a unit handed from one stopped
worker to another dies again, and at ``max_unit_attempts`` deaths the run ended with a
``PoisonUnitError`` (or a file with a ``FileReadError``) for a unit that crashed nothing
(`h5feed bench many-workers`, 300 and 1,000 workers, one process in ten stopped, failed so).
A peer lost as unreachable puts the other remote peers of its host in doubt until heard from
(``Peer.in_doubt``); work goes to peers not in doubt first (``ledger.heard_first``, the
file moves, the deal of extra readers, the dispatch), and a unit sent to a peer already in
doubt counts no attempt when that peer is lost (``recovery`` rule 4). In memory: the real
scheduler, session and recovery with fake peers (tests/support/fake_peers.py)."""

from __future__ import annotations

import random
import time

from fake_peers import FakeWorker, Fleet, make_peer
from scheduler_data import INDEX, VIDEOS, check_hdf_batch, hdf_fleet

from h5feed.common.protocol import messages
from h5feed.consumer.core.ledger import SILENT_WITH_WORK_S, Peer, heard_first

UNREACHABLE = "its connection stopped answering heartbeats (Host unreachable)"


def fleet_of(peers: list[Peer]) -> Fleet:
    return hdf_fleet(peers)[0]  # 2 epochs


def test_the_work_of_a_stopped_host_goes_to_the_other_host_and_nothing_is_called_poison() -> None:
    stopped = [make_peer(f"a{i}", host="host-a") for i in range(4)]
    running = [make_peer(f"b{i}", host="host-b") for i in range(2)]
    fleet = fleet_of(stopped + running)
    fleet.handshake()
    for _ in range(3):  # every peer holds or made work
        fleet.dispatch()
        for peer in fleet.pending():
            fleet.answer_one(peer)
    fleet.dispatch()
    for peer in stopped:
        fleet.live.remove(peer)  # host a stops: connected, silent
    for peer in stopped:  # their heartbeats time out one by one
        for other in running:
            other.last_heard = time.monotonic()  # host b goes on answering
        before = len(fleet.posted)
        fleet.lose(peer, "unreachable", UNREACHABLE)  # no PoisonUnitError, no FileReadError
        handed = [s.peer for s in fleet.posted[before:] if isinstance(s.message, messages.Unit)]
        handed += [s.peer for s in fleet.posted[before:] if isinstance(s.message, messages.Job)]
        assert set(handed) <= set(running), f"{peer}'s work went to {handed}"
    taken = fleet.run(random.Random(7))
    samples = sorted(s for batch in taken for s in check_hdf_batch(batch))
    assert samples == sorted(list(range(INDEX.num_videos * 2)) * 2)  # 2 epochs, exactly once


def test_peers_in_doubt_are_passed_over_only_while_another_may_take_the_work() -> None:
    now = time.monotonic()
    quiet, busy, idle = (make_peer(n, host="h") for n in ("quiet", "busy", "idle"))
    for peer in (quiet, busy, idle):
        peer.last_heard = now
    quiet.outstanding[1] = now
    quiet.last_heard = now - SILENT_WITH_WORK_S - 0.1  # holds a unit, silent since
    busy.outstanding[2] = now  # holds a unit, heard just now
    assert quiet.in_doubt(now) and not busy.in_doubt(now) and not idle.in_doubt(now)
    assert heard_first([quiet, busy, idle], now) == [busy, idle]
    assert heard_first([quiet], now) == [quiet]  # nobody else: it may still take the work
    idle.host_doubted = now + 0.01  # another peer of its host was lost as unreachable
    assert idle.in_doubt(now + 0.01)
    idle.last_heard = now + 0.02  # then it was heard from: the doubt is over
    assert not idle.in_doubt(now + 0.02)


def test_a_unit_sent_to_a_peer_already_in_doubt_counts_no_attempt_when_it_is_lost() -> None:
    # One host for all, and all of it stops: as its peers are lost one by one every heir is
    # in doubt, so the work goes where it can (a unit may pass through all of them), and the
    # losses of peers already in doubt when it came count no attempt. A worker of another
    # host joins and makes everything.
    stopped = [make_peer(f"a{i}", host="host-a") for i in range(5)]
    fleet = fleet_of(stopped)
    fleet.handshake()
    for _ in range(3):
        fleet.dispatch()
        for peer in fleet.pending():
            fleet.answer_one(peer)
    fleet.dispatch()
    for peer in stopped:
        fleet.live.remove(peer)
    for peer in stopped:
        fleet.lose(peer, "unreachable", UNREACHABLE)  # no PoisonUnitError (3 attempts)
    fleet.join(FakeWorker(make_peer("b0", host="host-b"), VIDEOS))
    taken = fleet.run(random.Random(11))
    samples = sorted(s for batch in taken for s in check_hdf_batch(batch))
    assert samples == sorted(list(range(INDEX.num_videos * 2)) * 2)
