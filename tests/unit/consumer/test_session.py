"""The peer session alone: hello, refusal, malformed and stray messages, and every way a peer
is lost, as events, with a fake transport and fake local processes."""

from __future__ import annotations

import time
from typing import Any

import msgpack
import numpy as np
import pytest
from fake_peers import FakeLocalProcesses, FakeTransport, frames_of, hello_frames
from hypothesis import given, settings
from hypothesis import strategies as st

from h5feed.common.protocol import messages, wire
from h5feed.common.protocol.versions import OLDEST_VERSION, SPOKEN
from h5feed.consumer.core import session as session_module
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.events import Arrived, PeerJoined, PeerLost
from h5feed.consumer.core.ledger import Ledger
from h5feed.consumer.core.session import PeerSession

JOB = "job-1"


def make_session(
    transport: FakeTransport | None = None,
    local: FakeLocalProcesses | None = None,
    unit_timeout_s: float = 60.0,
) -> tuple[PeerSession, FakeTransport, Counters]:
    transport = transport or FakeTransport()
    counters = Counters()
    return PeerSession(JOB, transport, local, unit_timeout_s, counters), transport, counters


def joined(session: PeerSession, *names: str) -> None:
    for name in names:
        session.receive(name.encode(), hello_frames(name))
    session.events.clear()


def lost_events(session: PeerSession) -> list[PeerLost]:
    return [event for event in session.events if isinstance(event, PeerLost)]


def data(unit: int = 0, job: str = JOB) -> messages.Data:
    return messages.Data(job, unit, 0, (1, 2), {"frames": np.zeros((2, 1, 1, 1, 3), np.uint8)})


# -- hello ------------------------------------------------------------------------------


def test_hello_makes_a_peer_and_one_joined_event() -> None:
    session, _transport, _counters = make_session()
    session.receive(b"id-a", hello_frames("a", pid=17, host="h1"))
    peer = session.peers[b"id-a"]
    assert (peer.name, peer.pid, peer.host, peer.local) == ("a", 17, "h1", False)
    assert list(session.events) == [PeerJoined(peer)]


def test_a_second_hello_of_the_same_process_is_ignored() -> None:
    session, _transport, _counters = make_session()
    session.receive(b"a", hello_frames("a"))
    peer = session.peers[b"a"]
    session.receive(b"a", hello_frames("a"))  # a persistent producer's periodic hello
    assert session.peers == {b"a": peer}
    assert len(session.events) == 1


def test_a_hello_with_a_new_nonce_is_a_restarted_process() -> None:
    session, _transport, _counters = make_session()
    joined(session, "a")
    old = session.peers[b"a"]
    session.receive(b"a", hello_frames("a", pid=99))  # a new process: another nonce
    new = session.peers[b"a"]
    assert new is not old and new.pid == 99
    lost, rejoined = list(session.events)
    assert isinstance(lost, PeerLost) and lost.peer is old and lost.cause == "restarted"
    assert rejoined == PeerJoined(new)


def test_a_hello_with_a_new_nonce_from_the_same_process_is_a_reconnection() -> None:
    # The same pid and host with another nonce: a worker that started over because its
    # connection broke (h5feed/producer/worker/connection.py). Its old session is lost as
    # ``reconnected`` (no death, not killed: recovery), and a local one's later exit is
    # still reported (it is not listed as ended).
    local = FakeLocalProcesses(["w0"])
    session, _transport, _counters = make_session(local=local)
    joined(session, "w0")
    old = session.peers[b"w0"]
    again = messages.Hello("w0", old.pid, old.host, "h5feed-test", "another-nonce")
    session.receive(b"w0", messages.encode(again))
    new = session.peers[b"w0"]
    lost, rejoined = list(session.events)
    assert isinstance(lost, PeerLost) and lost.peer is old and lost.cause == "reconnected"
    assert rejoined == PeerJoined(new) and new is not old and new.local
    session.events.clear()
    local.exit("w0", -9, pid=old.pid)
    session.check(time.monotonic())
    [died] = lost_events(session)
    assert died.peer is new and died.cause == "exited"


def test_the_same_process_on_a_new_routing_id_is_a_reconnection() -> None:
    # A worker that started over opens a new socket under a routing id of its own: its
    # HELLO names the same process (name, pid, host), so the old session is lost as
    # ``reconnected`` and the new identity is its peer from now on.
    session, _transport, _counters = make_session()
    joined(session, "w0")
    old = session.peers[b"w0"]
    again = messages.Hello("w0", old.pid, old.host, "h5feed-test", "another-nonce")
    session.receive(b"w0~1", messages.encode(again))
    lost, rejoined = list(session.events)
    assert isinstance(lost, PeerLost) and lost.peer is old and lost.cause == "reconnected"
    assert list(session.peers) == [b"w0~1"] and rejoined == PeerJoined(session.peers[b"w0~1"])


def test_a_hello_naming_a_listed_process_under_another_key_takes_nothing_from_it() -> None:
    # With CURVE, only the same key is the same process: another authorized key that names
    # a listed worker's name, pid and host joins as a peer of its own; the listed one keeps
    # its units.
    session, _transport, _counters = make_session()
    session.receive(b"w0", hello_frames("w0"))
    old = session.peers[b"w0"]
    old.key = "key-of-w0"
    session.events.clear()
    again = messages.Hello("w0", old.pid, old.host, "h5feed-test", "another-nonce")
    session.receive(b"w0~1", messages.encode(again))
    assert session.peers[b"w0"] is old and not lost_events(session)
    assert [type(event) for event in session.events] == [PeerJoined]


def test_a_hello_from_a_local_worker_name_makes_a_local_peer() -> None:
    session, _transport, _counters = make_session(local=FakeLocalProcesses(["w0", "w1"]))
    session.receive(b"x", hello_frames("w1"))
    session.receive(b"y", hello_frames("remote"))
    assert session.peers[b"x"].local
    assert not session.peers[b"y"].local


def test_a_lost_process_that_comes_back_with_its_old_nonce_is_refused_and_counted() -> None:
    session, transport, counters = make_session()
    joined(session, "a")
    peer = session.peers[b"a"]
    session.lose(peer, "unreachable", "its connection stopped answering heartbeats")
    session.events.clear()
    session.receive(b"a", hello_frames("a"))  # the same process, reconnected
    session.receive(b"a", hello_frames("a"))
    assert not session.peers and not session.events
    assert counters.refused_reconnects == 1  # counted once per process
    byes = transport.to(b"a")
    assert len(byes) == 1 and isinstance(byes[0], messages.Bye) and not byes[0].refused
    session.receive(b"a", hello_frames("a", pid=2))  # a new process (new nonce): welcome
    assert isinstance(session.events[0], PeerJoined) and session.peers[b"a"].pid == 2


def test_a_new_identity_joins_during_the_iteration() -> None:
    session, _transport, _counters = make_session()
    joined(session, "a")
    session.receive(b"late", hello_frames("late"))
    assert list(session.peers) == [b"a", b"late"]
    assert session.events[-1] == PeerJoined(session.peers[b"late"])


# -- refusal ----------------------------------------------------------------------------


def frames_of_version(version: int) -> list[Any]:
    """A HELLO of protocol ``version`` (one this side does not speak), packed by hand."""
    fields = {"worker": "old", "pid": 1, "host": "h", "package": "0.1", "nonce": "n"}
    return [msgpack.packb(["h5feed", version, "hello", fields, []], use_bin_type=True)]


def test_another_protocol_version_is_refused() -> None:
    session, transport, _counters = make_session()
    old = OLDEST_VERSION - 1
    session.receive(b"old", frames_of_version(old))
    assert not session.peers
    assert not session.events
    assert len(session.refused) == 1
    assert session.refused[0].startswith("old: ")
    assert f"version {old}, this side speaks {SPOKEN}" in session.refused[0]
    [(identity, bye, flags)] = transport.sent
    assert identity == b"old"
    assert isinstance(bye, messages.Bye) and bye.refused
    assert bye.reason.startswith("refused:")
    assert flags & 1  # zmq.NOBLOCK: a refusal never blocks the loop


def test_a_refused_peer_is_named_once_and_never_joins() -> None:
    session, transport, _counters = make_session()
    header = msgpack.packb(  # packed by hand: a newer peer's HELLO
        ["h5feed", wire.PROTOCOL_VERSION + 1, "hello", {"worker": "new"}, []], use_bin_type=True
    )
    session.receive(b"new", [header])
    session.receive(b"new", [header])
    session.receive(b"new", hello_frames("new"))  # even if it then speaks our version
    assert not session.peers
    assert len(session.refused) == 1
    assert all(isinstance(m, messages.Bye) and m.refused for m in transport.to(b"new"))


def test_a_refusal_that_cannot_be_sent_is_no_error() -> None:
    session, _transport, _counters = make_session(FakeTransport(failing=[b"old"]))
    session.receive(b"old", frames_of_version(1))
    assert len(session.refused) == 1
    assert not session.events


# -- malformed and stray messages -------------------------------------------------------


@pytest.mark.parametrize(
    "frames",
    [
        [b"\x00not msgpack"],
        [msgpack.packb(["other", 3, "hello", {}, []])],
        [msgpack.packb(["h5feed", wire.PROTOCOL_VERSION, "hello", {"worker": "x"}, []])],
        [msgpack.packb(["h5feed", wire.PROTOCOL_VERSION, "nonsense", {}, []])],
        frames_of(data())[:1],  # an array frame missing
        [],
    ],
    ids=["garbage", "magic", "fields", "kind", "frames", "empty"],
)
def test_a_malformed_message_is_counted_and_dropped(frames: list[Any]) -> None:
    session, _transport, counters = make_session()
    joined(session, "a")
    session.receive(b"a", frames)
    assert counters.malformed_messages == 1
    assert not session.events
    assert list(session.peers) == [b"a"]


def test_a_peer_that_keeps_sending_malformed_messages_is_refused_then_ignored() -> None:
    session, transport, counters = make_session()
    joined(session, "a", "b")
    limit = session_module._MALFORMED_LIMIT
    for _ in range(limit):
        session.receive(b"a", [b"\x00not msgpack"])
    assert b"a" in session.peers and not session.events  # survived up to the limit
    session.receive(b"a", [b"\x00not msgpack"])
    [lost] = lost_events(session)
    assert (lost.peer.name, lost.cause) == ("a", "refused")
    assert f"sent {limit + 1} malformed messages" in lost.reason
    [bye] = transport.to(b"a")
    assert isinstance(bye, messages.Bye) and bye.reason.startswith("refused: sent")
    assert len(session.refused) == 1 and session.refused[0].startswith("a: ")
    session.events.clear()
    session.receive(b"a", hello_frames("a"))  # ignored from then on, even well-formed
    session.receive(b"a", frames_of(data()))
    assert not session.events and list(session.peers) == [b"b"]
    assert counters.malformed_messages == limit + 3
    assert len(transport.to(b"a")) == 1  # refused once


def test_drops_and_refusals_of_any_number_of_identities_make_one_line_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Identities cost a sender nothing: 5,000 of them sending garbage, and 200 refused for
    another protocol version, make one line within the interval (issue 38 item 7: one line
    per identity made 5,000), and every message is still counted."""
    session, _transport, counters = make_session()
    joined(session, "a")
    with caplog.at_level("WARNING", logger="h5feed"):
        for i in range(5000):
            session.receive(f"x{i}".encode(), [b"\x00not msgpack"])
        for i in range(200):
            session._refuse(f"old{i}".encode(), "no protocol version in common")
    assert counters.malformed_messages == 5000 and len(session.refused) == 200
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines[:5]
    assert "worker messages: dropped from b'x0'" in lines[0]


def test_a_message_from_an_identity_that_never_said_hello_is_counted() -> None:
    session, _transport, counters = make_session()
    session.receive(b"stranger", frames_of(data()))
    assert counters.malformed_messages == 1
    assert not session.events and not session.peers


def test_data_of_another_job_is_dropped_and_counted() -> None:
    session, _transport, counters = make_session()
    joined(session, "a")
    session.receive(b"a", frames_of(data(job="job-0")))
    assert counters.dropped_parts == 1
    assert not session.events


def test_a_kept_local_workers_last_parts_before_its_hello_are_dropped_parts() -> None:
    """A worker kept across iterations finishes the last iteration's units before it says
    hello to the next session: those parts are dropped parts, not malformed traffic; the same
    from an unknown identity is malformed."""
    session, _transport, counters = make_session(local=FakeLocalProcesses(["w-0"]))
    session.receive(b"w-0", frames_of(data(job="job-0")))
    assert (counters.dropped_parts, counters.malformed_messages) == (1, 0)
    session.receive(b"stranger", frames_of(data(job="job-0")))
    assert counters.malformed_messages == 1
    assert not session.events


def test_data_from_a_peer_that_left_is_dropped_and_counted() -> None:
    session, _transport, counters = make_session()
    joined(session, "a")
    session.receive(b"a", frames_of(messages.Bye("leaving")))
    session.events.clear()
    session.receive(b"a", frames_of(data()))
    session.receive(b"a", frames_of(messages.Index(JOB, 0, ())))  # not a part: not counted
    assert counters.dropped_parts == 1
    assert counters.malformed_messages == 0
    assert not session.events


def test_a_message_of_this_job_arrives_as_an_event() -> None:
    session, _transport, _counters = make_session()
    joined(session, "a")
    session.receive(b"a", frames_of(data(unit=5)))
    [event] = session.events
    assert isinstance(event, Arrived)
    assert event.peer is session.peers[b"a"]
    assert isinstance(event.message, messages.Data) and event.message.unit == 5
    assert event.message.arrays["frames"].shape == (2, 1, 1, 1, 3)


# -- losses -----------------------------------------------------------------------------


def test_bye_is_one_peer_lost() -> None:
    session, transport, _counters = make_session()
    joined(session, "a", "b")
    peer = session.peers[b"a"]
    session.receive(b"a", frames_of(messages.Bye("shutting down")))
    session.receive(b"a", frames_of(messages.Bye("shutting down")))
    assert list(session.events) == [PeerLost(peer, "bye", "shutting down")]
    assert list(session.peers) == [b"b"]
    assert session.send(peer, messages.Bye("x")) is False  # nothing is sent to it again
    assert not transport.sent


def test_a_failing_send_is_one_peer_lost_and_never_raises() -> None:
    transport = FakeTransport()
    session, _transport, _counters = make_session(transport)
    joined(session, "a", "b")
    a, b = session.peers[b"a"], session.peers[b"b"]
    transport.failing.add(b"a")
    assert session.send(a, messages.Bye("x")) is False
    assert session.send(a, messages.Bye("y")) is False
    assert session.send(b, messages.Bye("z")) is True
    [event] = lost_events(session)
    assert (event.peer, event.cause) == (a, "unreachable")
    assert "cannot send" in event.reason
    assert list(session.peers) == [b"b"]
    assert transport.to(b"b") == [messages.Bye("z")]


def test_say_bye_tells_every_peer_and_ignores_failures() -> None:
    transport = FakeTransport(failing=[b"b"])
    session, _transport, _counters = make_session(transport)
    joined(session, "a", "b", "c")
    session.say_bye()
    assert [who for who, _m, _f in transport.sent] == [b"a", b"c"]
    assert not session.events


@pytest.mark.parametrize(
    ("code", "how"), [(-9, "killed by signal 9"), (3, "exited with code 3")], ids=["9", "3"]
)
def test_a_local_worker_that_exited_is_lost_once(code: int, how: str) -> None:
    local = FakeLocalProcesses(["w0", "w1"])
    session, _transport, _counters = make_session(local=local)
    session.receive(b"x0", hello_frames("w0"))
    session.receive(b"x1", hello_frames("w1"))
    session.events.clear()
    w0 = session.peers[b"x0"]
    local.exit("w0", code)
    session.check(time.monotonic())
    session.check(time.monotonic())
    [event] = session.events
    assert isinstance(event, PeerLost)
    assert (event.peer, event.cause) == (w0, "exited")
    assert how in event.reason
    assert list(session.peers) == [b"x1"]


def test_a_local_worker_that_exited_before_its_hello_is_lost_once() -> None:
    local = FakeLocalProcesses(["w0", "w1"])
    session, _transport, _counters = make_session(local=local)
    local.exit("w1", 2, pid=77)
    session.check(time.monotonic())
    session.check(time.monotonic())
    [event] = session.events
    assert isinstance(event, PeerLost)
    assert (event.peer.name, event.peer.pid, event.peer.local) == ("w1", 77, True)
    assert (event.cause, event.reason) == ("exited", "exited with code 2")


def test_a_local_worker_that_left_then_exited_is_lost_once() -> None:
    local = FakeLocalProcesses(["w0"])
    session, _transport, _counters = make_session(local=local)
    session.receive(b"x0", hello_frames("w0"))
    session.receive(b"x0", frames_of(messages.Bye("done")))
    local.exit("w0", 0, pid=1)  # the pid its hello gave
    session.check(time.monotonic())
    assert [event.cause for event in lost_events(session)] == ["bye"]


def test_a_peer_past_its_deadline_is_lost() -> None:
    session, _transport, _counters = make_session(unit_timeout_s=0.05)
    joined(session, "busy", "idle", "fresh")
    busy, idle, fresh = (session.peers[n] for n in (b"busy", b"idle", b"fresh"))
    ledger: Ledger[None] = Ledger()
    ledger.issue(busy, 0, None)
    ledger.issue(fresh, 1, None)
    busy.last_progress = time.monotonic() - 10.0  # held its unit for 10 s
    idle.last_progress = time.monotonic() - 10.0  # holds nothing: no deadline
    session.check(time.monotonic())
    session.check(time.monotonic())
    [event] = session.events
    assert isinstance(event, PeerLost)
    assert (event.peer, event.cause) == (busy, "deadline")
    assert "returned nothing for 10 s" in event.reason
    assert set(session.peers) == {b"idle", b"fresh"}


def test_progress_keeps_a_peer_within_its_deadline() -> None:
    session, _transport, _counters = make_session(unit_timeout_s=0.05)
    joined(session, "a")
    a = session.peers[b"a"]
    ledger: Ledger[None] = Ledger()
    first = ledger.issue(a, 0, None)
    ledger.issue(a, 1, None)
    a.last_progress = time.monotonic() - 10.0
    assert ledger.complete(a, first.id) is first  # its answer is progress
    session.check(time.monotonic())
    assert not session.events


# -- anything a peer may send -----------------------------------------------------------

_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def _headers(draw: st.DrawFn) -> list[Any]:
    kind = draw(st.sampled_from(sorted(wire.KINDS)))
    fields = {name: draw(_VALUES) for name in wire.SCHEMAS[kind] if draw(st.integers(0, 9))}
    fields |= draw(st.dictionaries(st.text(max_size=6), _VALUES, max_size=2))
    meta = draw(st.lists(st.lists(_VALUES, max_size=3), max_size=2))
    header = msgpack.packb(["h5feed", wire.PROTOCOL_VERSION, kind, fields, meta], use_bin_type=True)
    return [header, *draw(st.lists(st.binary(max_size=16), max_size=2))]


@settings(max_examples=200, deadline=None)
@given(frames=_headers() | st.lists(st.binary(max_size=40), max_size=3))
def test_nothing_a_known_peer_sends_makes_receive_raise(frames: list[Any]) -> None:
    session, _transport, counters = make_session()
    joined(session, "a")
    session.receive(b"a", frames)
    # counted, or one event (a HELLO of a known peer: nothing); the peer stays unless it left
    handled = len(session.events) + counters.malformed_messages + counters.dropped_parts
    assert handled <= 1
    assert (b"a" in session.peers) != bool(lost_events(session))


def test_a_stale_hello_of_a_replaced_local_process_is_ignored() -> None:
    local = FakeLocalProcesses(["w0"])
    local.retired.add(41)  # replaced between iterations; its hello was still queued
    session, _transport, _counters = make_session(local=local)
    session.receive(b"w0", hello_frames("w0", pid=41))
    assert not session.peers and not session.events
    session.receive(b"w0", hello_frames("w0", pid=42))  # its successor
    assert [peer.pid for peer in session.peers.values()] == [42]


def test_a_peer_just_sent_a_message_is_not_probed_but_a_quiet_one_is() -> None:
    # Rule 6: a send that went through proves the connection as a PING would, so at full
    # rate the units are the probes (a thousand workers each heard about once a second were
    # PINGed as often as they were sent units: docs/performance/many-workers.md).
    from h5feed.common.protocol.liveness import PROBE_EVERY_S

    session, transport, _counters = make_session()
    joined(session, "busy", "quiet")
    busy, quiet = session.peers[b"busy"], session.peers[b"quiet"]
    later = time.monotonic() + PROBE_EVERY_S  # neither heard from since
    for peer in (busy, quiet):
        peer.last_heard = later - 2 * PROBE_EVERY_S
    assert session.send(busy, messages.Bye("a message that is no probe"))
    session.check(time.monotonic() + PROBE_EVERY_S / 2)
    pings = [who for who, message, _ in transport.sent if isinstance(message, messages.Ping)]
    assert pings == [b"quiet"]
    session.check(later + 0.01)  # a probe period after the send: the busy one is probed too
    pings = [who for who, message, _ in transport.sent if isinstance(message, messages.Ping)]
    assert pings == [b"quiet", b"busy"]
