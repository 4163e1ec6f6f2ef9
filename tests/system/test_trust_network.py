"""Secure by default off loopback: a consumer's ``listen`` and a producer's ``--connect``
beyond this host need CURVE keys or an explicit ``insecure``; secret key files are 0600;
``/metrics`` and ``/stats`` listen on 127.0.0.1 unless an address is given."""

from __future__ import annotations

import ipaddress
import json
import os
import pathlib
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import warnings
from collections.abc import Iterator

import pytest
from metrics_helpers import get, metrics_port_of, stop
from ports import free_port
from prometheus_client import CollectorRegistry

import h5feed
from h5feed.common import metrics_http
from h5feed.common.trust.curve import KeyPair, load_public
from h5feed.common.trust.exposure import is_local_address
from h5feed.consumer.api import Feed

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}
#: Never routed (RFC 1918, and no such host here): a connect there never gets an answer.
FAR = "tcp://10.1.2.3:5555"
#: Every subprocess of these tests is bounded by this.
RUN_TIMEOUT_S = 60


def host_address() -> str | None:
    """This host's address on its default route (not loopback), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # UDP: picks the route, sends nothing
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


def env_without_insecure() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "H5FEED_INSECURE"}


# -- which addresses are local --------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "local"),
    [
        ("tcp://127.0.0.1:5555", True),
        ("tcp://127.9.8.7:5555", True),
        ("tcp://localhost:5555", True),
        ("tcp://[::1]:5555", True),
        ("ipc:///tmp/h5feed.sock", True),
        ("inproc://feed", True),
        ("tcp://127.0.0.1;10.1.2.3:5555", False),  # source;destination: it goes to 10.1.2.3
        ("tcp://*:5555", False),
        ("tcp://0.0.0.0:5555", False),
        ("tcp://[::]:5555", False),
        ("tcp://10.1.2.3:5555", False),
        ("tcp://eth0:5555", False),
        ("tcp://trainer-host:5555", False),  # names are never resolved: doubt is exposure
        ("ws://127.0.0.1:5555", False),
    ],
)
def test_only_loopback_and_ipc_count_as_local(address: str, local: bool) -> None:
    assert is_local_address(address) is local


# -- the consumer's listen= -----------------------------------------------------------------


@pytest.mark.parametrize("host", ["*", "0.0.0.0", "10.1.2.3"])
def test_listen_beyond_loopback_without_keys_is_refused_before_anything_binds(
    small_dataset: list[pathlib.Path], host: str
) -> None:
    port = free_port()
    address = f"tcp://{host}:{port}"
    with pytest.raises(ValueError) as refused:
        h5feed.batches(small_dataset, **CLIP, workers=1, listen=address)
    text = str(refused.value)
    assert repr(address) in text and "curve_key=" in text and "insecure=True" in text, text
    with socket.socket() as s:  # refused at configuration: the port was never bound
        s.bind(("0.0.0.0", port))


def test_insecure_listen_is_allowed_and_warns_at_the_callers_line(
    small_dataset: list[pathlib.Path],
) -> None:
    assert issubclass(h5feed.InsecureWarning, UserWarning)  # shown by Python's default filters
    address = f"tcp://0.0.0.0:{free_port()}"
    with pytest.warns(h5feed.InsecureWarning, match=r"listens on tcp://0\.0\.0\.0:\d+") as seen:
        feed = h5feed.batches(small_dataset, **CLIP, workers=1, listen=address, insecure=True)
    assert [w.filename for w in seen] == [__file__]  # points at the user's call, not h5feed
    assert sum(len(b["label"]) for b in feed) == 24  # and it serves


def test_loopback_ipc_and_keys_need_nothing(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    _, secret = run_keys(tmp_path / "keys", "trainer")
    run_keys(authorized, "producer")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        for address in (
            f"tcp://127.0.0.1:{free_port()}",
            f"tcp://localhost:{free_port()}",
            f"tcp://[::1]:{free_port()}",
        ):
            assert isinstance(h5feed.batches(small_dataset, **CLIP, listen=address), Feed)
        keyed = h5feed.batches(
            small_dataset, **CLIP, listen=f"tcp://*:{free_port()}",
            curve_key=str(secret), curve_authorized=str(authorized),
        )  # fmt: skip
        assert keyed.config.options.network.insecure is False
        feed = h5feed.batches(
            small_dataset, **CLIP, workers=1, listen=f"ipc://{tmp_path}/listen.sock"
        )
        assert sum(len(b["label"]) for b in feed) == 24


def test_insecure_must_be_a_bool(small_dataset: list[pathlib.Path]) -> None:
    with pytest.raises(ValueError, match="insecure must be True or False"):
        h5feed.batches(small_dataset, **CLIP, insecure="yes")  # type: ignore[typeddict-item]


# -- the producer's --connect ---------------------------------------------------------------


def test_produce_refuses_a_connect_beyond_loopback_without_keys() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "h5feed", "produce", "--connect", FAR, "--workers", "1"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env_without_insecure(),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # one line, nothing else
    assert lines[0].startswith(f"h5feed produce: refused: --connect {FAR} ")
    assert "--key and --server-key" in lines[0] and "--insecure" in lines[0]
    odd = subprocess.run(
        [sys.executable, "-m", "h5feed", "produce", "--connect", FAR],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
        env={**env_without_insecure(), "H5FEED_INSECURE": "maybe"},
    )  # fmt: skip
    assert odd.returncode == 2 and "$H5FEED_INSECURE='maybe'" in odd.stderr, odd.stderr


@pytest.fixture()
def log(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "producer.log"


@pytest.mark.parametrize("how", ["flag", "env"])
def test_produce_starts_with_insecure_and_serves_metrics_on_loopback_only(
    tmp_path: pathlib.Path, log: pathlib.Path, how: str
) -> None:
    command = [sys.executable, "-m", "h5feed", "-v", "produce", "--connect", FAR]
    command += ["--workers", "1", "--metrics-port", "0"]
    env = env_without_insecure()
    if how == "flag":
        command.append("--insecure")
    else:
        env["H5FEED_INSECURE"] = "1"
    with open(log, "wb") as err:
        producer = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
        )
    try:
        port = metrics_port_of(log, timeout_s=RUN_TIMEOUT_S)
        assert f"metrics at http://127.0.0.1:{port}/metrics" in log.read_text()
        assert b'"role": "producer"' in get(f"http://127.0.0.1:{port}/stats")
        assert "without CURVE keys (--insecure)" in log.read_text()
        assert_unreachable_from_outside(port)
        assert producer.poll() is None, log.read_text()
    finally:
        stop(producer)  # SIGTERM, bounded wait, then kill
    assert producer.returncode == 0, log.read_text()


# -- key files ------------------------------------------------------------------------------


def run_keys(directory: pathlib.Path, name: str) -> tuple[pathlib.Path, pathlib.Path]:
    """``h5feed keys DIR --name NAME`` under umask 022 (the usual one); the two paths."""
    result = subprocess.run(
        ["sh", "-c", 'umask 022 && exec "$0" -m h5feed keys "$1" --name "$2"',
         sys.executable, str(directory), name],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return directory / f"{name}.key", directory / f"{name}.key_secret"


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keys_are_written_secret_0600_public_0644_also_over_an_old_file(
    tmp_path: pathlib.Path,
) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    old = keys / "p.key_secret"
    old.write_text("an old world-readable secret\n")
    old.chmod(0o644)
    public, secret = run_keys(keys, "p")
    assert (mode(secret), mode(public)) == (0o600, 0o644)
    assert "an old" not in secret.read_text()
    assert sorted(p.name for p in keys.iterdir()) == ["p.key", "p.key_secret"]  # no leftovers
    pair = KeyPair.load(str(secret))
    assert load_public(str(public)) == pair.public and len(pair.secret) == 40


def test_a_secret_key_mounted_read_only_0400_loads(tmp_path: pathlib.Path) -> None:
    """As a Docker or Kubernetes secret is mounted (read-only, 0400)."""
    public, secret = run_keys(tmp_path, "mounted")
    secret.chmod(0o400)
    public.chmod(0o444)
    pair = KeyPair.load(str(secret))
    assert pair.public == load_public(str(public))


@pytest.mark.parametrize("bits", [0o644, 0o640, 0o604, 0o440, 0o660, 0o610], ids=oct)
def test_a_secret_key_others_or_its_group_may_access_is_refused_naming_mode_and_chmod(
    tmp_path: pathlib.Path, bits: int
) -> None:
    _, secret = run_keys(tmp_path, "open")
    secret.chmod(bits)
    with pytest.raises(ValueError) as refused:
        KeyPair.load(str(secret))
    text = str(refused.value)
    assert f"mode {bits:04o}" in text and f"chmod 600 {secret}" in text, text


def test_a_trainer_and_a_producer_refuse_a_world_readable_secret_key_before_starting(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    public, secret = run_keys(tmp_path, "trainer")
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    secret.chmod(0o644)
    with pytest.raises(ValueError, match=r"mode 0644.*chmod 600"):
        h5feed.batches(
            small_dataset, **CLIP, listen=f"tcp://127.0.0.1:{free_port()}",
            curve_key=str(secret), curve_authorized=str(authorized),
        )  # fmt: skip
    command = [sys.executable, "-m", "h5feed", "produce", "--connect", FAR]
    command += ["--key", str(secret), "--server-key", str(public), "--workers", "1"]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
        env=env_without_insecure(),
    )  # fmt: skip
    assert result.returncode != 0, result.stderr
    assert "mode 0644" in result.stderr and f"chmod 600 {secret}" in result.stderr, result.stderr


# -- /metrics and /stats --------------------------------------------------------------------


def assert_unreachable_from_outside(port: int) -> None:
    """Nothing answers on ``port`` at this host's non-loopback address."""
    outside = host_address()
    if outside is None:
        return  # no other interface: the bound-address checks carry the test
    with pytest.raises(urllib.error.URLError):
        get(f"http://{outside}:{port}/stats")


@pytest.fixture()
def feeds() -> Iterator[list[Feed]]:
    made: list[Feed] = []
    yield made
    for feed in made:
        if feed._metrics is not None:
            feed._metrics.server.close()


def test_feed_metrics_listen_on_loopback_by_default(
    small_dataset: list[pathlib.Path], feeds: list[Feed]
) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, metrics_port=0)
    feeds.append(feed)
    assert feed._metrics is not None and feed.metrics_port
    assert feed._metrics.server.bound_address == ("127.0.0.1", feed.metrics_port)
    assert get(f"http://127.0.0.1:{feed.metrics_port}/stats")
    assert_unreachable_from_outside(feed.metrics_port)


def test_feed_metrics_on_every_interface_when_asked(
    small_dataset: list[pathlib.Path], feeds: list[Feed], monkeypatch: pytest.MonkeyPatch
) -> None:
    feed = h5feed.batches(small_dataset, **CLIP, metrics_port="0.0.0.0:0")
    feeds.append(feed)
    assert feed._metrics is not None and feed.metrics_port
    assert feed._metrics.server.bound_address == ("0.0.0.0", feed.metrics_port)
    assert get(f"http://127.0.0.1:{feed.metrics_port}/stats")
    outside = host_address()
    if outside is not None:
        assert get(f"http://{outside}:{feed.metrics_port}/stats")
    monkeypatch.setenv("H5FEED_METRICS_PORT", "0.0.0.0:0")  # the variable takes it too
    from_env = h5feed.batches(small_dataset, **CLIP)
    feeds.append(from_env)
    assert from_env._metrics is not None
    assert from_env._metrics.server.bound_address[0] == "0.0.0.0"


@pytest.mark.parametrize("bad", ["0.0.0.0:x", ":9100", "0.0.0.0:70000", "9100"])
def test_a_bad_metrics_address_is_refused(small_dataset: list[pathlib.Path], bad: str) -> None:
    with pytest.raises(ValueError, match=r'metrics_port must be a port number .* or "HOST:PORT"'):
        h5feed.batches(small_dataset, **CLIP, metrics_port=bad)


def test_idle_metrics_clients_hold_no_thread_and_are_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Connections that send nothing (a slowloris) take none of the trainer's threads beyond
    the pool's, and each is closed: at once beyond the queue, else after the idle timeout."""
    monkeypatch.setattr(metrics_http._QuietHandler, "timeout", 0.5)  # IDLE_TIMEOUT_S, shorter
    server = metrics_http.MetricsServer(CollectorRegistry(), lambda: {"ok": 1}, 0)
    idle: list[socket.socket] = []
    try:
        threads = threading.active_count()
        for _ in range(120):
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
        assert threading.active_count() == threads  # no thread per connection
        deadline = time.monotonic() + 60
        for conn in idle:  # all 120 closed by the server, none answered
            conn.settimeout(max(deadline - time.monotonic(), 0.1))
            assert conn.recv(1) == b""
        assert threading.active_count() == threads
        assert json.loads(get(f"http://127.0.0.1:{server.port}/stats")) == {"ok": 1}
    finally:
        for conn in idle:
            conn.close()
        server.close()
