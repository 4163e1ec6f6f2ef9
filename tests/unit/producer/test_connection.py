"""A worker whose connection to its consumer breaks starts over as a new session
(h5feed/producer/worker/connection.py): real ZeroMQ sockets, a real Worker loop on a thread, a
ROUTER in the test's thread playing the consumer. The break is the consumer's socket closing
(what a network cut or a heartbeat timeout does to the connection): ZeroMQ reconnects the
worker to whoever binds the address next, and nothing but the monitor says it happened."""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from h5feed.common.protocol import messages
from h5feed.common.worker_settings import Network, Process, WorkerSettings
from h5feed.producer.worker.connection import Connection
from h5feed.producer.worker.loop import Worker

_WAIT_S = 10.0


def _router(context: zmq.Context[Any], address: str) -> zmq.Socket[Any]:
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(address)
    return router


def _next_message(router: zmq.Socket[Any]) -> tuple[bytes, messages.Message]:
    assert router.poll(int(_WAIT_S * 1000)), f"nothing from the worker in {_WAIT_S:g} s"
    identity, *frames = router.recv_multipart()
    message, _version = messages.decode_said(frames)
    return identity, message


def _receive(router: zmq.Socket[Any]) -> list[bytes]:
    assert router.poll(int(_WAIT_S * 1000)), f"nothing from the worker in {_WAIT_S:g} s"
    return router.recv_multipart()


def _wait_until_broke(connection: Connection) -> bool:
    deadline = time.monotonic() + _WAIT_S
    while time.monotonic() < deadline:
        if connection.broke():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture()
def address(tmp_path: pathlib.Path) -> str:
    return f"ipc://{tmp_path}/consumer"


@pytest.fixture()
def context() -> Iterator[zmq.Context[Any]]:
    context: zmq.Context[Any] = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture()
def greeted(
    address: str, context: zmq.Context[Any]
) -> Iterator[tuple[zmq.Socket[Any], Connection, bytes]]:
    """A ROUTER playing the consumer and a Connection (routing id ``w0``) that said hello to
    it: (router, connection, its identity at the router). The connection is closed after."""
    router = _router(context, address)
    connection = Connection(context, address, b"w0", 1 << 20)
    try:
        connection.socket.send(b"hello")
        identity, _ = _receive(router)
        yield router, connection, identity
    finally:
        connection.close(0)


def test_a_connection_that_was_heard_on_and_then_closed_is_broken(
    greeted: tuple[zmq.Socket[Any], Connection, bytes],
) -> None:
    router, connection, identity = greeted
    router.send_multipart([identity, b"ping"])
    assert connection.socket.poll(int(_WAIT_S * 1000))
    connection.socket.recv()
    connection.heard = True  # as the worker loop sets it
    assert not connection.broke()  # nothing happened yet
    router.close(linger=0)
    assert _wait_until_broke(connection), "no broken connection seen"
    assert not connection.broke()  # said once


def test_a_connection_never_heard_on_is_not_broken_by_a_close(
    greeted: tuple[zmq.Socket[Any], Connection, bytes],
) -> None:
    # Guarantee 1: no session on it, nothing lost (a refused handshake, a consumer that went
    # before answering): a worker does not start over again and again.
    router, connection, _identity = greeted
    router.close(linger=0)
    time.sleep(0.5)
    assert not connection.broke()


def test_a_renewed_connection_holds_nothing_of_the_old_one(
    greeted: tuple[zmq.Socket[Any], Connection, bytes],
) -> None:
    router, connection, identity = greeted
    router.send_multipart([identity, b"old"])  # waits, unread, in the old socket
    time.sleep(0.2)
    socket = connection.renew()
    assert socket is connection.socket and not connection.heard
    # Under a routing id of its own (guarantee 3): a router that still holds the old
    # connection would never hear a new one under the same id.
    socket.send(b"again")
    identity, body = _receive(router)
    assert (identity, body) == (b"w0~1", b"again")
    router.send_multipart([identity, b"new"])
    assert socket.poll(int(_WAIT_S * 1000))
    assert socket.recv() == b"new"  # never b"old"


def test_a_worker_whose_connection_broke_says_hello_again_with_a_new_nonce(
    address: str, context: zmq.Context[Any]
) -> None:
    # Guarantee 7 of the worker loop: without it, the worker sat on the new connection
    # holding nothing while the consumer waited for the UNITs lost with the old one.
    router = _router(context, address)
    worker = Worker(WorkerSettings(Network(address), Process("w0")))
    runner = threading.Thread(target=worker.run, name="worker", daemon=True)
    runner.start()
    try:
        identity, first = _next_message(router)
        assert isinstance(first, messages.Hello)
        router.send_multipart([identity, *messages.encode(messages.Ping())])  # a session
        time.sleep(0.3)  # it hears the PING
        router.close(linger=0)  # the connection breaks; a consumer binds the address again
        router = _router(context, address)
        deadline = time.monotonic() + _WAIT_S
        identity, again = _next_message(router)
        while isinstance(again, messages.Hello) and again.nonce == first.nonce:
            assert time.monotonic() < deadline, "only hellos of the old session"
            identity, again = _next_message(router)  # a periodic hello: the old nonce
        assert isinstance(again, messages.Hello), again
        assert again.pid == first.pid and again.nonce != first.nonce
        assert worker.counters.values["reconnects"] == 1
    finally:
        worker.request_stop()
        runner.join(timeout=_WAIT_S)
        router.close(linger=0)
    assert not runner.is_alive(), "the worker did not stop"
