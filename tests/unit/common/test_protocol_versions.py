"""Protocol versions N and N-1 side by side: the golden bytes of both, the HELLO that names a
range in each, the choice of a version per peer, and refusals that name both sides.

The real previous code speaking to this one (a worktree of the last version-5 commit) is in
tests/system/test_upgrade.py; these are the rules alone, with fakes.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from typing import Any

import msgpack
import pytest
import zmq
from fake_peers import FakeTransport
from wire_golden import GOLDEN_BYE, VALID_FIELDS, little_endian_only

from h5feed.common.config import CLIP_SEMANTICS
from h5feed.common.errors import FeatureVersionError, ProtocolError, VersionMismatchError
from h5feed.common.protocol import messages, wire
from h5feed.common.protocol.handshake import first_hello, hello_says
from h5feed.common.protocol.versions import (
    OLDEST_VERSION,
    PROTOCOL_VERSION,
    SPOKEN,
    VersionRange,
    legacy_package,
)
from h5feed.common.worker_settings import Network, Process, WorkerSettings
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.events import PeerLost
from h5feed.consumer.core.session import PeerSession
from h5feed.producer.worker.hdf5_job import job_spec
from h5feed.producer.worker.loop import Worker

# -- golden bytes of version 6 (version 5's: tests/unit/common/test_wire.py)
# ---------------------------

MAGIC_AND_VERSION_6 = "95 a6 683566656564 06"  # fixarray(5), fixstr(6) "h5feed", fixint 6

GOLDEN_HELLO_6_FIELDS = {
    "worker": "w0", "pid": 4242, "host": "node-a", "package": "0.1.0", "nonce": "n1",
    "protocols": [5, 6], "clip_semantics": 1,
}  # fmt: skip
GOLDEN_HELLO_6 = bytes.fromhex(
    MAGIC_AND_VERSION_6
    + "a5 68656c6c6f"  # fixstr(5) "hello"
    + "87"  # fixmap(7), keys sorted: clip_semantics, host, nonce, package, pid, protocols, worker
    + "ae 636c69705f73656d616e74696373 01"  # "clip_semantics": 1 (new in 6)
    + "a4 686f7374 a6 6e6f64652d61"  # "host": "node-a"
    + "a5 6e6f6e6365 a2 6e31"  # "nonce": "n1"
    + "a7 7061636b616765 a5 302e312e30"  # "package": "0.1.0"
    + "a3 706964 cd 1092"  # "pid": uint16 4242
    + "a9 70726f746f636f6c73 92 05 06"  # "protocols": [5, 6] (new in 6)
    + "a6 776f726b6572 a2 7730"  # "worker": "w0"
    + "90"  # fixarray(0): no arrays
)

#: A version-6 worker's first HELLO, said in version 5: exactly version 5's fields, its range
#: and clip semantics in the text of "package", which a version-5 trainer never reads.
GOLDEN_LEGACY_HELLO_FIELDS = {
    "worker": "w0", "pid": 4242, "host": "node-a",
    "package": "0.1.0 (protocols 5-6; clips 1)", "nonce": "n1",
}  # fmt: skip
GOLDEN_LEGACY_HELLO = bytes.fromhex(
    "95 a6 683566656564 05"  # version 5
    + "a5 68656c6c6f"
    + "85"  # fixmap(5): version 5's HELLO fields, no more
    + "a4 686f7374 a6 6e6f64652d61"
    + "a5 6e6f6e6365 a2 6e31"
    + "a7 7061636b616765 be"  # "package": fixstr(30)
    + "302e312e30 2028 70726f746f636f6c73 20 352d36 3b20 636c697073 20 31 29"
    + "a3 706964 cd 1092"
    + "a6 776f726b6572 a2 7730"
    + "90"
)


@little_endian_only
def test_golden_hello_of_version_6() -> None:
    assert wire.encode(wire.HELLO, GOLDEN_HELLO_6_FIELDS, version=6) == [GOLDEN_HELLO_6]
    message = wire.decode([GOLDEN_HELLO_6])
    assert (message.version, message.fields) == (6, GOLDEN_HELLO_6_FIELDS)
    assert messages.decode([GOLDEN_HELLO_6]) == messages.Hello(
        "w0", 4242, "node-a", "0.1.0", "n1", (5, 6), 1
    )


@little_endian_only
def test_golden_first_hello_is_an_exact_version_5_hello() -> None:
    hello, version = first_hello("w0", 4242, "node-a", "0.1.0", "n1")
    assert version == OLDEST_VERSION == 5
    assert messages.encode(hello, version) == [GOLDEN_LEGACY_HELLO]
    # It holds version 5's fields exactly (a version-5 decoder refuses any other).
    assert msgpack.unpackb(GOLDEN_LEGACY_HELLO, raw=False)[3] == GOLDEN_LEGACY_HELLO_FIELDS
    assert set(GOLDEN_LEGACY_HELLO_FIELDS) == set(wire.SCHEMAS_BY_VERSION[5][wire.HELLO])


def test_kinds_unchanged_in_6_differ_from_5_only_in_the_version_byte() -> None:
    # docs/architecture/wire-format.md's table says the same
    changed = {wire.HELLO, wire.JOB, wire.SOURCE, wire.DATA}
    for kind, fields in VALID_FIELDS.items():
        if kind in (wire.ATTACH, wire.ATTACHED):  # new in 6: test_kinds_new_in_6_...
            assert kind not in wire.SCHEMAS_BY_VERSION[5]
            continue
        if kind in changed:
            assert wire.SCHEMAS_BY_VERSION[5][kind] != wire.SCHEMAS_BY_VERSION[6][kind]
            continue
        assert wire.SCHEMAS_BY_VERSION[5][kind] == wire.SCHEMAS_BY_VERSION[6][kind], kind
        five, six = wire.encode(kind, fields, version=5)[0], wire.encode(kind, fields)[0]
        assert five[8] == 5 and six[8] == 6
        assert five[:8] + five[9:] == six[:8] + six[9:], kind
    assert GOLDEN_BYE[8] == 5 and wire.encode(wire.BYE, {"reason": "done"})[0][8] == 6


def test_version_6_fields_are_refused_in_a_version_5_message() -> None:
    fields = {**VALID_FIELDS[wire.JOB]}
    unknown = "unknown fields \\['clip_semantics', 'code'\\]"
    with pytest.raises(ProtocolError, match=unknown):
        wire.encode(wire.JOB, fields, version=5)
    header = msgpack.packb(["h5feed", 5, "job", fields, []], use_bin_type=True)
    with pytest.raises(ProtocolError, match=unknown):
        wire.decode([header])


def test_a_version_5_job_decodes_with_clip_semantics_1() -> None:
    job = messages.Job("j", (), {}, {}, None)
    said = messages.decode_said(messages.encode(job, 5))
    assert said == (job, 5) and job.clip_semantics == 1


def test_a_field_version_5_cannot_carry_is_refused_when_encoded_naming_it() -> None:
    job = messages.Job("j", (), {}, {}, None, clip_semantics=2)
    with pytest.raises(FeatureVersionError, match="JOB clip_semantics=2 needs protocol version 6"):
        messages.encode(job, 5)
    assert messages.decode(messages.encode(job)) == job  # version 6 carries it


GOLDEN_DATA_6 = bytes.fromhex(
    MAGIC_AND_VERSION_6
    + "a4 64617461"  # "data"
    + "86"  # fixmap(6), keys sorted: batch, busy_s, job, samples, skipped, unit
    + "a5 6261746368 02"  # "batch": 2
    + "a6 627573795f73 cb 3fe8000000000000"  # "busy_s": float64 0.75 (new in 6)
    + "a3 6a6f62 a2 6a31"  # "job": "j1"
    + "a7 73616d706c6573 91 05"  # "samples": [5]
    + "a7 736b6970706564 90"  # "skipped": []
    + "a4 756e6974 07"  # "unit": 7
    + "90"  # no arrays
)


@little_endian_only
def test_golden_data_of_version_6_says_its_busy_seconds() -> None:
    data = messages.Data("j1", 7, 2, (5,), busy_s=0.75)
    assert messages.encode(data) == [GOLDEN_DATA_6]
    assert messages.decode([GOLDEN_DATA_6]) == data


def test_busy_seconds_are_left_out_for_a_version_5_peer_not_refused() -> None:
    """Advisory: a version-5 trainer goes on without them (its sizing gauge stays unknown)."""
    data = messages.Data("j1", 7, 2, (5,), busy_s=0.75)
    (header,) = messages.encode(data, 5)
    assert "busy_s" not in msgpack.unpackb(header, raw=False)[3]
    assert messages.decode_said([header]) == (dataclasses.replace(data, busy_s=0.0), 5)


@pytest.mark.parametrize("busy", [-0.5, math.nan, math.inf, 1e9])
def test_busy_seconds_out_of_range_are_refused_on_decode(busy: float) -> None:
    header = msgpack.packb(
        ["h5feed", 6, "data", {**VALID_FIELDS[wire.DATA], "busy_s": busy}, []], use_bin_type=True
    )
    with pytest.raises(ProtocolError, match=r"DATA has .* busy_s, outside \[0, 86400\]"):
        messages.decode([header])


def test_a_data_without_storage_reads_is_the_previous_releases_and_decodes_to_none() -> None:
    """``storage`` is optional (Omissible): the previous release's DATA (GOLDEN_DATA_6, no
    such field) still decodes, and a DATA of local files (storage None) is still its bytes,
    so a previous-release trainer decodes it."""
    assert "storage" not in msgpack.unpackb(GOLDEN_DATA_6, raw=False)[3]
    assert messages.decode([GOLDEN_DATA_6]).storage is None
    assert messages.encode(messages.Data("j1", 7, 2, (5,), busy_s=0.75)) == [GOLDEN_DATA_6]


def test_storage_reads_go_in_data_of_version_6_and_are_left_out_for_version_5() -> None:
    reads = messages.StorageReads(requests=3, bytes=12_345, retries=1, refused=0)
    data = messages.Data("j1", 7, 2, (5,), busy_s=0.75, storage=reads)
    (header,) = messages.encode(data)
    assert msgpack.unpackb(header, raw=False)[3]["storage"] == [3, 12_345, 1, 0]
    assert messages.decode([header]) == data
    (old,) = messages.encode(data, 5)  # advisory: a version-5 trainer goes on without them
    assert "storage" not in msgpack.unpackb(old, raw=False)[3]


@pytest.mark.parametrize(
    ("storage", "error"),
    [
        ([1, 2, 3, -1], r"-1 refused, outside"),
        ([10**7, 0, 0, 0], r"requests, outside"),
        ([0, 1 << 41, 0, 0], r"bytes, outside"),
        ([1, 2, 3], r"must be a list of 4 values"),
        ([1, 2, 3, True], r"bad DATA storage"),
        ("many", r"storage"),
    ],
)
def test_storage_reads_out_of_their_bounds_are_refused_on_decode(storage: Any, error: str) -> None:
    header = msgpack.packb(
        ["h5feed", 6, "data", {**VALID_FIELDS[wire.DATA], "storage": storage}, []],
        use_bin_type=True,
    )
    with pytest.raises(ProtocolError, match=error):
        messages.decode([header])


def test_versions_not_spoken_are_refused_naming_both_ranges() -> None:
    for version, fields, said in [
        (7, {"worker": "w", "protocols": [7, 8]}, "7-8"),
        (4, {"worker": "w"}, "4"),
        (7, {"worker": "w", "protocols": [1, 1 << 40]}, "7"),  # a bad range is not repeated
    ]:
        header = msgpack.packb(["h5feed", version, "hello", fields, []], use_bin_type=True)
        with pytest.raises(VersionMismatchError) as info:
            wire.decode([header])
        assert str(info.value) == (
            f"peer speaks h5feed protocol version {said}, this side speaks {SPOKEN}"
        )
    assert str(SPOKEN) == f"{OLDEST_VERSION}-{PROTOCOL_VERSION}"


# -- ranges and what a HELLO says -------------------------------------------------------------


@pytest.mark.parametrize(
    ("ours", "theirs", "common"),
    [((5, 6), (5, 6), 6), ((5, 6), (5, 5), 5), ((5, 6), (6, 7), 6), ((5, 6), (7, 8), None),
     ((5, 6), (3, 4), None), ((6, 7), (5, 6), 6)],
)  # fmt: skip
def test_the_highest_common_version_is_chosen(
    ours: tuple[int, int], theirs: tuple[int, int], common: int | None
) -> None:
    assert VersionRange(*ours).common(VersionRange(*theirs)) == common
    assert VersionRange(*theirs).common(VersionRange(*ours)) == common


def test_what_each_form_of_hello_says() -> None:
    plain = messages.Hello("w", 1, "h", "0.5.0", "n")  # a version-5 worker
    says = hello_says(plain, 5)
    assert (says.versions, says.clip_semantics, says.package) == (VersionRange(5, 5), 1, "0.5.0")
    legacy = dataclasses.replace(plain, package=legacy_package("0.6.0", VersionRange(5, 6), 3))
    says = hello_says(legacy, 5)
    assert (says.versions, says.clip_semantics, says.package) == (VersionRange(5, 6), 3, "0.6.0")
    modern = messages.Hello("w", 1, "h", "0.7.0", "n", (6, 7), 2)
    says = hello_says(modern, 6)
    assert (says.versions, says.clip_semantics, says.package) == (VersionRange(6, 7), 2, "0.7.0")
    # The legacy form is read in version 5 only; elsewhere "package" is only text.
    assert hello_says(dataclasses.replace(legacy, protocols=()), 6).versions == VersionRange(6, 6)


@pytest.mark.parametrize(
    ("hello", "version", "error"),
    [
        (messages.Hello("w", 1, "h", "0.6.0 (protocols 6-5; clips 1)", "n"), 5, "bad protocol"),
        (messages.Hello("w", 1, "h", "0.6.0 (protocols 3-4; clips 1)", "n"), 5, "names the range"),
        (messages.Hello("w", 1, "h", "0.7.0", "n", (7, 8)), 6, "names the range 7-8"),
    ],
)
def test_a_hello_whose_range_is_bad_or_leaves_out_its_own_version_is_refused(
    hello: messages.Hello, version: int, error: str
) -> None:
    with pytest.raises(ProtocolError, match=error):
        hello_says(hello, version)


def test_a_malformed_protocols_field_is_refused_on_decode() -> None:
    for protocols in ([6], [6, 5], [0, 6], [5, 6, 7]):
        fields = {**GOLDEN_HELLO_6_FIELDS, "protocols": protocols}
        with pytest.raises(ProtocolError, match="HELLO protocols"):
            messages.decode(wire.encode(wire.HELLO, fields))


# -- the trainer's side: a version per peer -------------------------------------------------


def _session() -> tuple[PeerSession, FakeTransport]:
    transport = FakeTransport()
    return PeerSession("job-1", transport, None, 60.0, Counters()), transport


def _hello(version: int, **fields: Any) -> list[Any]:
    return messages.encode(messages.Hello("w", 7, "h", **fields), version)


def test_each_peer_is_spoken_to_in_the_highest_version_both_speak() -> None:
    session, transport = _session()
    old = _hello(5, package="0.5.0", nonce="a")  # a version-5 worker
    new = messages.encode(*first_hello("w", 8, "h", "0.6.0", "b"))
    session.receive(b"old", old)
    session.receive(b"new", new)
    peers = session.peers
    assert (peers[b"old"].protocol, peers[b"old"].package) == (5, "0.5.0")
    assert (peers[b"new"].protocol, peers[b"new"].package) == (PROTOCOL_VERSION, "0.6.0")
    for identity in (b"old", b"new"):
        session.send(peers[identity], messages.Ping())
    assert transport.versions == [5, PROTOCOL_VERSION]


def test_a_peer_with_no_version_in_common_is_refused_naming_both() -> None:
    session, transport = _session()
    hello = _hello(5, package="0.4.9 (protocols 2-5; clips 1)", nonce="a")
    session.receive(b"w", hello)  # speaks 5: accepted, in 5
    assert session.peers[b"w"].protocol == 5
    session, transport = _session()
    session.receive(b"w", _hello(6, package="9.0", nonce="a", protocols=(6, 6)))
    assert session.peers[b"w"].protocol == 6
    future = msgpack.packb(
        ["h5feed", 7, "hello", {"worker": "w", "protocols": [7, 8]}, []], use_bin_type=True
    )
    session, transport = _session()
    session.receive(b"f", [future])
    assert not session.peers and not session.events
    [refused] = session.refused
    assert "version 7-8" in refused and f"this side speaks {SPOKEN}" in refused
    [(_, bye, _)] = transport.sent
    assert isinstance(bye, messages.Bye) and bye.refused


def test_a_peer_of_another_clip_semantics_is_refused_naming_both() -> None:
    session, transport = _session()
    other = CLIP_SEMANTICS + 1
    session.receive(
        b"w", _hello(6, package="1.0", nonce="a", protocols=(5, 6), clip_semantics=other)
    )
    assert not session.peers and not session.events
    [refused] = session.refused
    assert f"semantics {other}" in refused and f"needs {CLIP_SEMANTICS}" in refused
    [(_, bye, _)] = transport.sent
    assert isinstance(bye, messages.Bye) and bye.refused
    assert transport.versions == [6]  # told in the version chosen with it


def test_a_job_that_needs_a_later_feature_refuses_an_older_peer_naming_the_field() -> None:
    session, transport = _session()
    session.receive(b"old", _hello(5, package="0.5.0", nonce="a"))
    peer = session.peers[b"old"]
    session.events.clear()
    job = messages.Job("job-1", (), {}, {}, None, clip_semantics=CLIP_SEMANTICS + 1)
    assert not session.send(peer, job)  # never sent: no field is dropped
    assert not session.peers
    [lost] = list(session.events)
    assert isinstance(lost, PeerLost) and lost.cause == "refused"
    assert "clip_semantics" in lost.reason and "protocol 5" in lost.reason
    [(_, bye, _)] = transport.sent
    assert isinstance(bye, messages.Bye) and bye.refused and "clip_semantics" in bye.reason
    assert not any(isinstance(m, messages.Job) for _, m, _ in transport.sent)


def test_a_worker_refuses_a_job_of_other_clip_semantics_naming_both() -> None:
    """The worker's own check, behind the trainer's (which refuses it at its hello)."""
    other = CLIP_SEMANTICS + 1
    job = messages.Job("j", (), {}, {}, None, clip_semantics=other)
    with pytest.raises(ValueError, match=rf"needs clips of semantics {other}.*semantics 1"):
        job_spec(job)


def test_a_periodic_hello_keeps_the_version_the_consumer_chose(tmp_path: pathlib.Path) -> None:
    """A worker says every hello in the oldest version, but what it sends after one stays in
    the version its consumer last spoke (a persistent worker says hello after each second of
    silence while it holds a job: its next DATA must not fall back to version 5)."""
    address = f"ipc://{tmp_path}/consumer"
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.bind(address)
    worker = Worker(WorkerSettings(Network(address), Process("w0")))
    try:
        worker.protocol = PROTOCOL_VERSION  # as after a trainer of version 6 spoke to it
        worker.hello()
        assert router.poll(10_000), "no hello in 10 s"
        _identity, *frames = router.recv_multipart()
        hello, version = messages.decode_said(frames)
        assert isinstance(hello, messages.Hello) and version == OLDEST_VERSION
        assert worker.protocol == PROTOCOL_VERSION
    finally:
        worker.connection.close(0)
        worker.context.term()
        router.close(linger=0)
        context.term()


GOLDEN_ATTACH_6 = bytes.fromhex(
    MAGIC_AND_VERSION_6
    + "a6 617474616368"  # "attach" (a kind new in 6)
    + "82"  # fixmap(2), keys sorted: port, trainer
    + "a4 706f7274 cd 15b3"  # "port": uint16 5555
    + "a7 747261696e6572 a9 747261696e65722d31"  # "trainer": "trainer-1"
    + "90"  # no arrays
)
GOLDEN_ATTACHED_6 = bytes.fromhex(
    MAGIC_AND_VERSION_6
    + "a8 6174746163686564"  # "attached" (a kind new in 6)
    + "83"  # fixmap(3), keys sorted: replica, trainers, workers
    + "a7 7265706c696361 a7 666c6565742d31"  # "replica": "fleet-1"
    + "a8 747261696e657273 02"  # "trainers": 2
    + "a7 776f726b657273 04"  # "workers": 4
    + "90"  # no arrays
)


def test_kinds_new_in_6_have_their_golden_bytes_and_no_version_5_form() -> None:
    """A shared fleet's front and its trainers (issue 26) speak 6 only: a version-5 peer
    never sees ATTACH (the front refuses it as an unknown kind, counted)."""
    attach, attached = messages.Attach(5555, "trainer-1"), messages.Attached("fleet-1", 4, 2)
    assert messages.encode(attach) == [GOLDEN_ATTACH_6]
    assert messages.encode(attached) == [GOLDEN_ATTACHED_6]
    assert messages.decode([GOLDEN_ATTACH_6]) == attach
    assert messages.decode([GOLDEN_ATTACHED_6]) == attached
    for message in (attach, attached):
        with pytest.raises(FeatureVersionError, match="need a later protocol version than 5"):
            messages.encode(message, 5)
    five = msgpack.packb(["h5feed", 5, "attach", {"port": 5555, "trainer": "t"}, []])
    with pytest.raises(ProtocolError, match="unknown message kind 'attach' in protocol version 5"):
        messages.decode([five])


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"port": 0, "trainer": "t"}, r"ATTACH port must be in \[1, 65535\], got 0"),
        ({"port": 70000, "trainer": "t"}, r"ATTACH port must be in \[1, 65535\], got 70000"),
        ({"port": 5555, "trainer": "a b"}, "ATTACH trainer name 'a b' must match"),
        ({"port": 5555, "trainer": ""}, "ATTACH trainer name '' must match"),
        ({"port": 5555, "trainer": "x" * 65}, "too long"),
    ],
)
def test_an_attach_out_of_bounds_is_refused_on_decode(fields: dict[str, Any], match: str) -> None:
    header = msgpack.packb(["h5feed", 6, "attach", fields, []], use_bin_type=True)
    with pytest.raises(ProtocolError, match=match):
        messages.decode([header])
