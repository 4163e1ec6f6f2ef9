"""The test tree's TensorFlow-cluster runner (tests/support/tf_cluster.py) and its ports
(tests/support/ports.py): a cluster process that dies stops its peers at once instead of
leaving them waiting for it until pytest's timeout, a hang is killed at the deadline and
named, and only a taken port is retried. Plain ``python -c`` processes stand in for the
TensorFlow workers (what is under test is the runner, not TensorFlow)."""

from __future__ import annotations

import os
import pathlib
import socket
import sys
import time

import ports
import pytest
import tf_cluster

_SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def logs_in(directory: pathlib.Path, count: int) -> list[pathlib.Path]:
    return [directory / f"process{i}.log" for i in range(count)]


def test_a_process_that_exits_stops_its_waiting_peers_at_once(tmp_path: pathlib.Path) -> None:
    dies = [sys.executable, "-c", "import sys; print('no cluster for me'); sys.exit(3)"]
    started = time.monotonic()
    with pytest.raises(AssertionError) as caught:
        tf_cluster.run_cluster(lambda _: [(_SLEEPER, dict(os.environ)), (dies, {})], 0,
                               logs_in(tmp_path, 2))  # fmt: skip
    message = str(caught.value)
    assert "process 1: exited 3" in message and "no cluster for me" in message
    assert "process 0: killed: a peer failed" in message  # else it would wait a minute
    assert time.monotonic() - started < tf_cluster.DEADLINE_S


def test_a_hung_cluster_is_killed_at_the_deadline_and_named(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tf_cluster, "DEADLINE_S", 1.0)
    with pytest.raises(AssertionError, match=r"process 0: still running after 1 s \(killed\)"):
        tf_cluster.run_cluster(lambda _: [(_SLEEPER, {})], 0, logs_in(tmp_path, 1))


def _counted(marker: pathlib.Path, failing_runs: int, error: str) -> list[str]:
    """A process that counts its runs in ``marker``, prints ``error`` and exits 1 on its
    first ``failing_runs`` runs, and exits 0 after."""
    code = f"""
import pathlib, sys
marker = pathlib.Path({str(marker)!r})
runs = int(marker.read_text()) if marker.exists() else 0
marker.write_text(str(runs + 1))
if runs < {failing_runs}:
    print({error!r}, file=sys.stderr)
    sys.exit(1)
"""
    return [sys.executable, "-c", code]


def _taken_until(marker: pathlib.Path, failing_runs: int) -> list[str]:
    """TensorFlow's taken-port failure on the first ``failing_runs`` runs."""
    return _counted(marker, failing_runs, f"E0000 grpc_server_lib.cc] {tf_cluster.PORT_TAKEN}")


def test_a_taken_port_is_retried_on_fresh_ports(tmp_path: pathlib.Path) -> None:
    given: list[list[int]] = []

    def commands(free: list[int]) -> list[tf_cluster.Command]:
        given.append(free)
        return [(_taken_until(tmp_path / "runs", 1), {})]

    tf_cluster.run_cluster(commands, 2, logs_in(tmp_path, 1))
    assert len(given) == 2 and set(given[0]).isdisjoint(given[1])
    assert tf_cluster.PORT_TAKEN in (tmp_path / "process0.attempt1.log").read_text()


def test_a_port_taken_on_every_attempt_fails_and_nothing_else_is_retried(
    tmp_path: pathlib.Path,
) -> None:
    marker = tmp_path / "runs"
    with pytest.raises(AssertionError, match=tf_cluster.PORT_TAKEN):
        tf_cluster.run_cluster(lambda _: [(_taken_until(marker, 99), {})], 1, logs_in(tmp_path, 1))
    assert marker.read_text() == str(1 + tf_cluster.PORT_RETRIES)
    others = tmp_path / "other runs"
    crash = _counted(others, 99, "Segmentation fault")
    with pytest.raises(AssertionError, match="exited 1"):
        tf_cluster.run_cluster(lambda _: [(crash, {})], 1, logs_in(tmp_path, 1))
    assert others.read_text() == "1"


def test_free_ports_are_distinct_bindable_and_below_the_kernels_ephemeral_range() -> None:
    first_ephemeral = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
                          .split()[0])  # fmt: skip
    picked = ports.free_ports(20)
    assert len(set(picked)) == 20
    assert all(ports._LOWEST <= port < first_ephemeral for port in picked)
    for port in picked:
        with socket.socket() as probe:
            probe.bind(("0.0.0.0", port))
