"""A keyless flood of held TCP connections against a CURVE trainer (docs/deploy/security.md, the
flood bound): 5,000 plain TCP connections that never send a ZMTP byte, held open and renewed
as the trainer closes them, against a trainer whose soft ``RLIMIT_NOFILE`` is 1024, with its
local worker SIGKILLed during the flood. The run completes exactly once; the trainer is never
aborted. Loopback only; every loop is bounded in count and in time.
"""

from __future__ import annotations

import errno
import json
import pathlib
import resource
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from conftest import trainer_and_producer_keys
from paths import SUPPORT
from ports import free_port

from h5feed.consumer.core.router import HANDSHAKE_TIMEOUT_S

#: Connections held at once, and the most ever opened (renewals included).
HELD = 5000
MAX_OPENED = 20_000
#: Every wait of this test is bounded by this.
WAIT_S = 120.0
TRAINER = SUPPORT.joinpath("flood_trainer.py")


class Flood:
    """Plain TCP connections to ``port`` that send nothing, held open (non-blocking)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sockets: dict[int, socket.socket] = {}
        self.poller = select.poll()
        self.opened = 0
        self.closed_by_trainer = 0

    def top_up(self) -> None:
        """Open connections until ``HELD`` are held (at most ``MAX_OPENED`` ever)."""
        while len(self.sockets) < HELD and self.opened < MAX_OPENED:
            conn = socket.socket()
            conn.setblocking(False)
            code = conn.connect_ex(("127.0.0.1", self.port))
            if code not in (0, errno.EINPROGRESS):
                conn.close()
                raise AssertionError(f"connect failed: {errno.errorcode.get(code, code)}")
            self.opened += 1
            self.sockets[conn.fileno()] = conn
            self.poller.register(conn, select.POLLIN)

    def reap(self) -> None:
        """Read what the trainer sent (its ZMTP greeting: never answered); close the
        connections it closed."""
        for fd, _events in self.poller.poll(0):
            conn = self.sockets[fd]
            try:
                closed = conn.recv(4096) == b""
            except BlockingIOError:
                closed = False
            except OSError:  # reset or refused
                closed = True
            if closed:
                self.poller.unregister(fd)
                self.sockets.pop(fd).close()
                self.closed_by_trainer += 1

    def keep(self, seconds: float) -> None:
        """Hold the flood for ``seconds``, renewing what the trainer closes."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.reap()
            self.top_up()
            time.sleep(0.05)

    def close(self) -> None:
        for conn in self.sockets.values():
            conn.close()
        self.sockets.clear()


@pytest.fixture()
def own_limit() -> Iterator[None]:
    """This process holds the flood's side of every connection: its soft limit must fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = HELD + 1024
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the flood needs a hard RLIMIT_NOFILE of {needed}; this host's is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, needed), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def wait_for_file(path: pathlib.Path, trainer: subprocess.Popen[bytes], log: pathlib.Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert trainer.poll() is None, f"trainer exited {trainer.returncode}: {log.read_text()}"
        assert time.monotonic() < deadline, f"no {path.name} within {WAIT_S} s"
        time.sleep(0.05)


def test_a_keyless_flood_of_5000_held_connections_does_not_end_or_abort_a_curve_trainer(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path, own_limit: None
) -> None:
    keys = trainer_and_producer_keys(tmp_path)
    trainer_secret, authorized = keys.trainer_secret, keys.authorized
    port = free_port()
    config = {
        "files": [str(p) for p in small_dataset], "listen": f"tcp://127.0.0.1:{port}",
        "curve_key": trainer_secret, "curve_authorized": str(authorized),
        "dir": str(tmp_path), "wait_s": WAIT_S,
    }  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    log = tmp_path / "trainer.log"
    flood = Flood(port)
    with open(log, "wb") as err:
        trainer = subprocess.Popen(
            [sys.executable, str(TRAINER), str(tmp_path / "config.json")],
            stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for_file(tmp_path / "ready", trainer, log)
        flood.top_up()
        assert len(flood.sockets) == HELD
        # The trainer closes connections that send nothing after its handshake timeout.
        deadline = time.monotonic() + WAIT_S
        while flood.closed_by_trainer == 0:
            assert time.monotonic() < deadline, "no idle connection was ever closed"
            assert trainer.poll() is None, log.read_text()
            flood.keep(0.5)
        flood.keep(1.0)  # renewed: as many held as before
        (tmp_path / "kill").write_text("")  # its local worker is SIGKILLed now
        deadline = time.monotonic() + WAIT_S
        while trainer.poll() is None:
            assert time.monotonic() < deadline, f"the trainer did not end: {log.read_text()}"
            flood.keep(0.2)
    finally:
        flood.close()
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait(10)
    text = log.read_text()
    assert trainer.returncode == 0, f"exit {trainer.returncode}: {text}"  # -6: aborted
    assert "Too many open files" not in text, text
    result = json.loads((tmp_path / "result.json").read_text())
    assert sorted(result["samples"]) == list(range(24))  # exactly once
    assert result["stats"]["workers_replaced"] == 1
    assert flood.opened >= HELD
    print(
        f"flood: {flood.opened} opened, {flood.closed_by_trainer} closed by the trainer "
        f"(handshake timeout {HANDSHAKE_TIMEOUT_S:g} s)"
    )
