"""A shared fleet's front and a trainer's announcer, in this process on real sockets
(h5feed/producer/service/fleet.py, h5feed/consumer/processes/fleet_announcer.py): who is attached,
where its workers would
connect, what is refused, and how the replicas follow the name's answer. Fronts here run no
workers (``workers=0``): the real-process tests are in test_shared_fleet.py."""

from __future__ import annotations

import logging
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq
from fleet_helpers import wait_for
from ports import free_port
from stepped_fronts import SteppedFront

from h5feed.common.protocol import messages
from h5feed.common.trust.exposure import endpoint_of
from h5feed.common.worker_settings import WorkerSettings
from h5feed.consumer.config.endpoints import parse_endpoint
from h5feed.consumer.config.groups import NetworkOptions
from h5feed.consumer.processes import fleet_announcer as announcing
from h5feed.consumer.processes.fleet_announcer import Announcer, resolve
from h5feed.producer.service.server import _write_health, check_health

_LOG = logging.getLogger("h5feed.producer")


def _no_workers(worker: str, stats_file: str, endpoint: str, key: str | None) -> WorkerSettings:
    raise AssertionError("a front of these tests starts no worker")


@pytest.fixture
def fronts(tmp_path: pathlib.Path) -> Iterator[Callable[..., SteppedFront]]:
    made: list[SteppedFront] = []

    def make(**kwargs: Any) -> SteppedFront:
        made.append(SteppedFront(tmp_path, 0, _no_workers, {}, _LOG, **kwargs))
        return made[-1]

    yield make
    for front in made:
        front.close()


def wait_until(check: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    """``check()``'s first true value, polled; AssertionError after ``timeout_s``."""
    return wait_for("the condition", check, timeout_s)


def test_replicas_that_join_the_answer_are_attached_and_those_that_leave_it_detached(
    fronts: Callable[..., SteppedFront], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(announcing, "RESOLVE_EVERY_S", 0.1)
    monkeypatch.setattr(announcing, "ATTACH_EVERY_S", 0.1)
    one, two = fronts(attach_timeout_s=1.0), fronts(attach_timeout_s=1.0)
    answer = [endpoint_of("127.0.0.1", one.port)]
    announcer = Announcer(
        ["tcp://fleet.example:5556"], 7000, name="t", resolver=lambda h, p: answer
    )
    try:
        wait_until(lambda: announcer.status()["serving"] == 1)
        assert len(one.front.attached) == 1 and not two.front.attached
        (attachment,) = one.front.attached.values()
        # Its workers connect where the ATTACH came from, at the port it named.
        assert attachment.endpoint == "tcp://127.0.0.1:7000"
        assert attachment.trainer == "t@127.0.0.1:7000"
        answer = [*answer, endpoint_of("127.0.0.1", two.port)]  # a replica added
        wait_until(lambda: announcer.status()["serving"] == 2)
        assert len(two.front.attached) == 1
        answer = answer[1:]  # the first left the answer: no longer attached to it
        wait_until(
            lambda: announcer.status()["serving"] == 1 and announcer.status()["replicas"] == 1
        )
        wait_until(lambda: not one.front.attached, timeout_s=5.0)  # its attach timeout
        assert len(two.front.attached) == 1
        status = announcer.status()
        assert status["share"] == 1.0 and status["trainers_max"] == 1 and status["refused"] == {}
    finally:
        announcer.close()
    wait_until(lambda: not two.front.attached, timeout_s=5.0)


def test_a_name_that_stops_resolving_keeps_the_replicas_it_had(
    fronts: Callable[..., SteppedFront], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(announcing, "RESOLVE_EVERY_S", 0.1)
    monkeypatch.setattr(announcing, "ATTACH_EVERY_S", 0.1)
    one = fronts(attach_timeout_s=1.0)
    answers: list[list[str] | Exception] = [[endpoint_of("127.0.0.1", one.port)]]

    def resolver(host: str, port: int) -> list[str]:
        answer = answers[-1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    announcer = Announcer(["tcp://fleet.example:5556"], 7001, name="t", resolver=resolver)
    try:
        wait_until(lambda: announcer.status()["serving"] == 1)
        answers.append(OSError("Temporary failure in name resolution"))
        time.sleep(2.0)  # twice the attach timeout: still attached
        assert announcer.status()["serving"] == 1 and len(one.front.attached) == 1
        answers.append(UnicodeError("encoding with 'idna' codec failed (label too long)"))
        time.sleep(2.0)  # a name the resolver cannot even encode: the same
        assert announcer.status()["serving"] == 1 and len(one.front.attached) == 1
    finally:
        announcer.close()


def test_a_trainer_past_the_limit_is_refused_and_learns_why(
    fronts: Callable[..., SteppedFront], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(announcing, "ATTACH_EVERY_S", 0.1)
    front = fronts(max_trainers=1)
    endpoint = [f"tcp://127.0.0.1:{front.port}"]
    first = Announcer(endpoint, 7002, name="first")
    wait_until(lambda: first.status()["serving"] == 1)  # then the second: it is the one refused
    second = Announcer(endpoint, 7003, name="second")
    try:
        why = wait_until(second.refusal)
        assert "this fleet serves at most 1 trainers at once (h5feed produce --max-trainers)" in why
        assert first.refusal() is None
        assert front.front.refused >= 1 and len(front.front.attached) == 1
        assert second.status()["refused"], second.status()
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize(
    "frames",
    [
        [b"not msgpack"],
        messages.encode(messages.Hello("w", 1, "h", "0", "n")),  # not an ATTACH
        messages.encode(messages.Attached("r", 1, 1)),
        [b"\x95\xa6h5feed\x06\xa6attach\x82\xa4port\x00\xa7trainer\xa1t\x90"],  # port 0
    ],
    ids=["garbage", "hello", "attached", "port-0"],
)
def test_anything_but_a_well_formed_attach_is_counted_and_answered_with_nothing(
    fronts: Callable[..., SteppedFront], frames: list[bytes]
) -> None:
    front = fronts()
    context = zmq.Context.instance()
    with context.socket(zmq.DEALER) as dealer:
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.RCVTIMEO, 300)
        dealer.connect(f"tcp://127.0.0.1:{front.port}")
        dealer.send_multipart(frames)
        wait_until(lambda: front.front.refused == 1)
        with pytest.raises(zmq.Again):
            dealer.recv_multipart()
        assert not front.front.attached
        # The same connection's next ATTACH is served: a bad message ends nothing.
        dealer.setsockopt(zmq.RCVTIMEO, 5000)
        dealer.send_multipart(messages.encode(messages.Attach(7004, "t")))
        reply = messages.decode(dealer.recv_multipart())
        assert reply == messages.Attached(f"f{front.port}", 0, 1)


def test_a_message_larger_than_the_fronts_limit_is_dropped_with_its_connection(
    fronts: Callable[..., SteppedFront],
) -> None:
    front = fronts()
    context = zmq.Context.instance()
    with context.socket(zmq.DEALER) as dealer:
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(f"tcp://127.0.0.1:{front.port}")
        dealer.send_multipart([b"x" * 10_000])  # MAXMSGSIZE: libzmq drops it unread
        time.sleep(0.5)
    assert front.front.refused == 0 and not front.front.attached


def test_endpoints_resolve_to_every_ipv4_address_else_ipv6() -> None:
    assert resolve("127.0.0.1", 5556) == ["tcp://127.0.0.1:5556"]
    assert resolve("localhost", 5556) == ["tcp://127.0.0.1:5556"]  # its ::1 left out
    assert endpoint_of("::1", 5556) == "tcp://[::1]:5556"
    assert parse_endpoint("tcp://[::1]:5556") == ("::1", 5556)
    assert parse_endpoint("tcp://tasks.h5feed_producer:5556") == ("tasks.h5feed_producer", 5556)
    for bad in ("tcp://host", "ipc:///tmp/x", "tcp://host:0", "tcp://host:99999", "host:1"):
        with pytest.raises(ValueError, match="fleet endpoint must be tcp://HOST:PORT"):
            parse_endpoint(bad)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fleet": "tcp://127.0.0.1:5556"}, "fleet= needs listen='tcp://"),
        (
            {"fleet": "tcp://127.0.0.1:5556", "listen": "ipc:///tmp/x.sock"},
            "fleet= needs listen='tcp://",
        ),
        (
            {"fleet": "tcp://fleet.example:5556", "listen": "tcp://127.0.0.1:5555"},
            "fleet='tcp://fleet.example:5556' leaves this host",
        ),
        ({"fleet_key": "fleet.key"}, "fleet_key= is the fleet's public key: it needs fleet="),
        (
            {"fleet": "tcp://127.0.0.1:1", "listen": "tcp://127.0.0.1:2", "fleet_key": "k"},
            "fleet_key= needs curve_key=",
        ),
        ({"fleet": [], "listen": "tcp://127.0.0.1:2"}, "fleet must be tcp://HOST:PORT or a list"),
        (
            {"fleet": "tcp://127.0.0.1:1", "listen": "tcp://127.0.0.1:2", "curve_key": "k"},
            "a trainer with curve_key= needs fleet_key=",
        ),
    ],
)
def test_fleet_options_are_checked_before_anything_starts(
    kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        NetworkOptions(**kwargs)


def test_a_list_of_fleet_endpoints_is_kept_as_a_tuple() -> None:
    options = NetworkOptions(
        listen="tcp://127.0.0.1:5555", fleet=["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"]
    )
    assert options.fleet_endpoints == ("tcp://127.0.0.1:1", "tcp://127.0.0.1:2")
    assert NetworkOptions().fleet_endpoints == ()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--listen", "tcp://0.0.0.0:5556"], "--listen tcp://0.0.0.0:5556 is reachable from other"),
        (["--listen", "tcp://127.0.0.1:5556", "--connect", "tcp://127.0.0.1:5555"], "one of"),
        ([], "give one of --connect (serve one trainer) and --listen"),
        (["--listen", "ipc:///tmp/fleet.sock"], "a fleet's front listens on tcp://"),
    ],
)
def test_produce_refuses_a_listen_it_cannot_run_safely(flags: list[str], says: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "h5feed", "produce", "--workers", "1", *flags],
        capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("H5FEED_")},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert says in result.stderr


def test_a_fleet_with_no_trainer_is_healthy_and_a_producer_with_no_worker_is_not(
    tmp_path: pathlib.Path,
) -> None:
    fleet, producer = str(tmp_path / "fleet.health"), str(tmp_path / "producer.health")
    _write_health(fleet, 0, fleet=True)
    _write_health(producer, 0)
    assert check_health(fleet) is None
    assert check_health(producer) == "no worker process is running"
    _write_health(fleet, 0, "worker f-t0-0 died 4 times in a minute", fleet=True)
    assert check_health(fleet) == "worker f-t0-0 died 4 times in a minute"


def test_a_slow_dns_answer_never_delays_an_attach(
    fronts: Callable[..., SteppedFront], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolving takes 3 s (a DNS server timing out) while the front's attach timeout is 1 s:
    the ATTACHes go on from the last answer, and the trainer stays attached."""
    monkeypatch.setattr(announcing, "RESOLVE_EVERY_S", 0.1)
    monkeypatch.setattr(announcing, "ATTACH_EVERY_S", 0.1)
    one = fronts(attach_timeout_s=1.0)
    calls = []

    def slow(host: str, port: int) -> list[str]:
        calls.append(time.monotonic())
        if len(calls) > 1:
            time.sleep(3.0)
        return [endpoint_of("127.0.0.1", one.port)]

    announcer = Announcer(["tcp://fleet.example:5556"], 7005, name="t", resolver=slow)
    try:
        wait_until(lambda: announcer.status()["serving"] == 1)
        time.sleep(3.5)  # the second resolution is under way the whole time
        assert len(calls) >= 2 and len(one.front.attached) == 1
        (attachment,) = one.front.attached.values()
        assert time.monotonic() - attachment.last_seen < 1.0
    finally:
        announcer.close()


def test_a_refusal_ends_the_wait_only_once_every_replica_refused(
    fronts: Callable[..., SteppedFront], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One replica full, another not there yet: no refusal (the other may serve); once every
    replica known has refused, the refusal names each."""
    monkeypatch.setattr(announcing, "ATTACH_EVERY_S", 0.1)
    full = fronts(max_trainers=1)
    holder = Announcer([f"tcp://127.0.0.1:{full.port}"], 7006, name="holder")
    wait_until(lambda: holder.status()["serving"] == 1)
    absent = free_port()  # nothing listens there yet
    trainer = Announcer(
        [f"tcp://127.0.0.1:{full.port}", f"tcp://127.0.0.1:{absent}"], 7007, name="late"
    )
    try:
        wait_until(lambda: trainer.status()["refused"])
        time.sleep(0.5)
        assert trainer.refusal() is None  # the absent replica has not answered
        assert trainer.status()["replicas"] == 2
    finally:
        holder.close()
        trainer.close()
