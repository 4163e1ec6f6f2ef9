"""The session's memory of peers and identities (issue 39 item 5): what belongs to one peer goes
with it, what an identity keeps after its peer is one record, and nothing kept for a lost peer
acts on anyone else: not on its identity's next process, not on a local process that happens
to have a lost remote peer's pid. A state machine of joins, restarts, losses, sends and exits
checks it against a model after every step."""

from __future__ import annotations

import time

from fake_peers import FakeLocalProcesses, FakeTransport, frames_of, hello_frames
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from h5feed.common.protocol import messages
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.events import PeerJoined, PeerLost
from h5feed.consumer.core.identities import Identities
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.session import PeerSession

JOB = "job-1"


def test_a_remote_peers_pid_says_nothing_of_a_local_process_with_the_same_number() -> None:
    """A remote producer's pid is another host's: once it is lost, a local worker that exits
    with the same pid (before its hello) is still one loss. Before the fold the session kept
    the pids of every lost peer in one set and took the exit as reported: no event, so the
    local worker was never replaced."""
    local = FakeLocalProcesses(["w0"])
    session = PeerSession(JOB, FakeTransport(), local, 60.0, Counters())
    session.receive(b"remote", hello_frames("remote", pid=4242, host="elsewhere"))
    session.receive(b"remote", frames_of(messages.Bye("leaving")))
    session.events.clear()
    local.exit("w0", -9, pid=4242)
    session.check(time.monotonic())
    [event] = session.events
    assert isinstance(event, PeerLost)
    assert (event.peer.name, event.peer.pid, event.cause) == ("w0", 4242, "exited")


def test_nothing_meant_for_a_restarted_peers_old_process_reaches_its_successor() -> None:
    """A peer restarted under its identity is lost; a message still meant for the old process
    is not sent (rule 4: nothing is sent to a lost peer again), and losing the old one again
    leaves the new one listed. Before the fold both looked the identity up, found the new
    process and sent it the old one's message, in the old one's protocol version, or removed
    it with no event of its own (its units then waited for nobody)."""
    transport = FakeTransport()
    session = PeerSession(JOB, transport, None, 60.0, Counters())
    session.receive(b"a", hello_frames("a", pid=1))
    old = session.peers[b"a"]
    session.receive(b"a", hello_frames("a", pid=2))  # a new process under the same identity
    new = session.peers[b"a"]
    session.events.clear()
    assert session.send(old, messages.Ping()) is False
    assert not transport.sent and not session.events
    session.lose(old, "deadline", "a late check of the old process")
    assert session.peers == {b"a": new} and not session.events
    assert session.send(new, messages.Ping()) is True


def test_identities_that_only_struck_are_forgotten_past_the_bound_and_the_others_kept() -> None:
    """Identities cost a sender nothing: past ``tracked`` identities with strikes, every count
    starts over and a record that held nothing but strikes is gone; one that was a peer, or
    was refused, keeps what it holds (its strikes start over too)."""
    known = Identities(tracked=3)
    known.of(b"peer").nonce = "n"
    known.of(b"refused").refused = True
    for identity in (b"peer", b"refused", b"x"):
        assert known.strike(identity).strikes == 1
    assert known.strike(b"x").strikes == 2 and len(known) == 3  # one record each
    assert known.strike(b"y").strikes == 1  # the fourth with strikes: counts start over
    assert b"x" not in known and len(known) == 3
    assert (known.of(b"peer").nonce, known.of(b"peer").strikes) == ("n", 0)
    assert known.of(b"refused").refused and known.strike(b"refused").strikes == 1


def test_garbage_from_any_number_of_identities_keeps_a_bounded_number_of_records() -> None:
    session = PeerSession(JOB, FakeTransport(), None, 60.0, Counters())
    for i in range(5_000):
        session.receive(f"x{i}".encode(), [b"\x00not msgpack"])
    assert len(session._known) <= 4096


_IDENTITIES = (b"a", b"b", b"c")  # "a" is a local worker's name; b and c are remote
_PIDS = st.integers(1, 3)  # few, so that remote and local pids meet


class SessionMachine(RuleBasedStateMachine):
    """Joins, restarts, BYEs, failed sends, stale hellos and local exits in any order."""

    def __init__(self) -> None:
        super().__init__()
        self.transport = FakeTransport()
        self.local = FakeLocalProcesses(["a"])
        self.session = PeerSession(JOB, self.transport, self.local, 60.0, Counters())
        self.listed: dict[bytes, Peer] = {}  # the model
        self.last_nonce: dict[bytes, str] = {}
        self.ended: set[int] = set()  # pids of "a" whose end was reported
        self.lost: list[Peer] = []
        self.reported_exits = 0

    def _events(self) -> list[object]:
        events = list(self.session.events)
        self.session.events.clear()
        return events

    def _lose_in_model(self, peer: Peer) -> None:
        del self.listed[peer.identity]
        self.lost.append(peer)
        if peer.local:
            self.ended.add(peer.pid)

    @rule(identity=st.sampled_from(_IDENTITIES), pid=_PIDS)
    def hello(self, identity: bytes, pid: int) -> None:
        name = identity.decode()
        self.session.receive(identity, hello_frames(name, pid=pid))
        events = self._events()
        before = self.listed.get(identity)
        if self.last_nonce.get(identity) == f"nonce-{name}-{pid}":
            assert events == []  # a periodic hello, or a lost process back: refused
            return
        expected: list[object] = []
        if before is not None:
            expected.append(PeerLost(before, "restarted", events[0].reason))  # type: ignore[attr-defined]
            self._lose_in_model(before)
        new = self.session.peers[identity]
        assert (new.pid, new.local) == (pid, identity == b"a")
        assert events == [*expected, PeerJoined(new)]
        self.listed[identity] = new
        self.last_nonce[identity] = new.nonce

    @rule(identity=st.sampled_from(_IDENTITIES))
    def bye(self, identity: bytes) -> None:
        self.session.receive(identity, frames_of(messages.Bye("leaving")))
        events = self._events()
        peer = self.listed.get(identity)
        if peer is None:
            assert events == []
            return
        assert events == [PeerLost(peer, "bye", "leaving")]
        self._lose_in_model(peer)

    @rule(identity=st.sampled_from(_IDENTITIES))
    def failing_send(self, identity: bytes) -> None:
        peer = self.listed.get(identity)
        if peer is None:
            return
        self.transport.failing.add(identity)
        assert self.session.send(peer, messages.Ping()) is False
        self.transport.failing.discard(identity)
        [event] = self._events()
        assert isinstance(event, PeerLost) and (event.peer, event.cause) == (peer, "unreachable")
        self._lose_in_model(peer)

    @rule(pid=_PIDS, code=st.sampled_from([-9, 0, 3]))
    def local_exit(self, pid: int, code: int) -> None:
        self.local.exit("a", code, pid=pid)
        self.session.check(time.monotonic())
        events = self._events()
        if pid in self.ended:
            assert events == []  # reported already, or its peer was lost already
            return
        self.ended.add(pid)
        [event] = events
        assert isinstance(event, PeerLost) and event.cause == "exited"
        peer = self.listed.get(b"a")
        if peer is not None:
            assert event.peer is peer
            self._lose_in_model(peer)
        else:  # it exited before its hello
            assert (event.peer.name, event.peer.pid) == ("a", pid)

    @invariant()
    def listed_as_modelled(self) -> None:
        assert self.session.peers == self.listed
        assert all(peer.lost_cause is None for peer in self.listed.values())

    @invariant()
    def nothing_reaches_a_lost_peer(self) -> None:
        sent = len(self.transport.sent)
        for peer in self.lost:
            assert peer.lost_cause is not None
            assert self.session.send(peer, messages.Ping()) is False
            self.session.lose(peer, "deadline", "again")
        assert len(self.transport.sent) == sent and not self.session.events
        assert self.session.peers == self.listed

    @invariant()
    def an_identity_is_kept_in_one_place(self) -> None:
        """Besides the live peers, no collection of the session is keyed by identity: what an
        identity keeps after its peer is its one record (core/identities.py)."""
        for name, value in vars(self.session).items():
            if name == "peers" or not isinstance(value, dict | set):
                continue
            keys = [k[0] if isinstance(k, tuple) and k else k for k in value]
            assert not set(keys) & set(_IDENTITIES), f"{name} is keyed by identity"


SessionMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=25, deadline=None)
TestSessionMachine = SessionMachine.TestCase
