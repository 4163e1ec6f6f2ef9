"""``h5feed bench --ceiling --transports tcp,curve``: the consumer ceiling over real TCP between
network namespaces, next to raw ZeroMQ, and the namespace removed afterwards.

Behaviour only: rows and positive figures, never a speed threshold. The end-to-end run needs
root and ``ip`` (CI runs as root); elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
from paths import REPO

from h5feed.bench import markdown, netns, summary
from h5feed.bench.targets import Targets


def _leftovers() -> set[str]:
    """Namespaces and links of the socket benchmark that exist now."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=10)
    found = {ln.split()[0] for ln in names.stdout.splitlines() if ln.startswith(netns.NAME_PREFIX)}
    found |= {
        ln.split(":")[1].strip().split("@")[0]
        for ln in links.stdout.splitlines()
        if ln.split(":")[1].strip().startswith("h5fb")
    }
    return found


def _made_by_a_live_process(name: str) -> bool:
    """A namespace ``h5feed-bench-PID`` or link ``h5fbTAGh`` (TAG: the PID's last five digits)
    of a benchmark still running: another checkout's test run on this machine, not ours
    (ours has exited by the time the leftovers are read)."""
    digits = re.search(r"(\d+)[hp]?$", name)
    return digits is not None and pathlib.Path(f"/proc/{int(digits.group(1))}").exists()


@pytest.mark.bench  # h5feed bench end to end (tests/support/tiers.py)
@pytest.mark.xdist_group("machine")  # network namespaces and links: one user at a time
@pytest.mark.skipif(netns.missing() is not None, reason=str(netns.missing()))
@pytest.mark.timeout(120)
def test_socket_ceiling_reports_every_transport_and_removes_its_namespace(
    tmp_path: pathlib.Path,
) -> None:
    before = _leftovers()
    result = subprocess.run(
        [
            sys.executable, "-m", "h5feed", "bench", "--ceiling", "--quick",
            "--transports", "tcp,curve", "--window-s", "0.3", "--warmup-s", "0.1",
            "--producers", "1", "--data-dir", str(tmp_path / "data"),
            "--out", str(tmp_path / "out" / "socket"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "## Socket ceiling" in result.stdout
    socket = json.loads((tmp_path / "out" / "socket.json").read_text())["socket_ceiling"]
    assert "error" not in socket, socket
    assert set(socket["transports"]) == {"tcp", "curve"}
    for transport, entry in socket["transports"].items():
        for path in ("raw", "batches", "dataset"):
            figures = entry[path]
            assert figures["gb_per_s"] > 0, (transport, path)
            assert figures["trainer_cpu_ms_per_clip"] > 0, (transport, path)
        assert entry["dataset_vs_raw"] > 0 and entry["batches_vs_raw"] > 0
        assert len(entry["cpu_ms_per_clip_by_stage"]) == 3
    left = {name for name in _leftovers() - before if not _made_by_a_live_process(name)}
    assert not left, f"the benchmark left its network namespace or link behind: {left}"


def _holder(name: str, subnet: int) -> None:
    """A namespace ``name`` whose veth end here holds 10.213.SUBNET.1, as a run makes one."""
    link = f"h5fbt{subnet:03d}{name[-3:]}"[:15]
    for args in (
        ["netns", "add", name],
        ["link", "add", link, "type", "veth", "peer", "name", f"{link[:-1]}p"],
        ["link", "set", f"{link[:-1]}p", "netns", name],
        ["addr", "add", f"10.213.{subnet}.1/24", "dev", link],
    ):
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _dead_pid() -> int:
    """A pid no process has now, near pid_max and apart for each run (two at once)."""
    pid = int(pathlib.Path("/proc/sys/kernel/pid_max").read_text()) - 1 - os.getpid() % 10000
    while pathlib.Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


@pytest.mark.xdist_group("machine")
@pytest.mark.skipif(netns.missing() is not None, reason=str(netns.missing()))
def test_a_killed_runs_namespace_is_removed_and_a_subnet_in_use_is_never_drawn() -> None:
    """A live run's namespace (named for this process's parent: alive) holds the subnet this
    process draws first: it is kept, and that subnet skipped. A killed run's (named for a pid
    gone) holds the next: it is removed, and its subnet taken. A run on a subnet another
    namespace held lost its replies to it (issue 21's proof)."""
    drawn = os.getpid() % 250 + 1
    after = drawn % 250 + 1
    leftover, live = f"{netns.NAME_PREFIX}{_dead_pid()}", f"{netns.NAME_PREFIX}{os.getppid()}"
    try:
        with netns.machine_lock():  # as a run takes a subnet: none picked meanwhile
            _holder(leftover, after)
            _holder(live, drawn)
        with netns.network_namespace() as net:
            names = subprocess.run(
                ["ip", "netns", "list"], capture_output=True, text=True, timeout=10
            ).stdout
            assert leftover not in names and live in names
            assert net.host_address == f"10.213.{after}.1", net
            assert {drawn, after} <= netns.used_subnets()
    finally:
        for name in (leftover, live):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        for subnet in (drawn, after):  # the host ends, should a step above have failed
            for link in _leftovers():
                if link.startswith(f"h5fbt{subnet:03d}"):
                    subprocess.run(["ip", "link", "del", link], capture_output=True, timeout=10)


def test_without_root_or_ip_the_namespace_is_refused_naming_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(netns.shutil, "which", lambda name: None)
    refused = pytest.raises(netns.NetnsUnavailable, match=r"root .*uid 1000.* and the `ip` command")
    with refused, netns.network_namespace():
        pass


def _window(transport: str, path: str, gb: float, cpu_ms: float) -> dict[str, object]:
    return {
        "transport": transport,
        "path": path,
        "gb_per_s": gb,
        "clips_per_s": gb * 1e9 / (8 * 16 * 112 * 112 * 3) * 8,
        "trainer_cpu_ms_per_clip": cpu_ms,
        "worker_cpu_ms_per_clip": 0.1,
        "other_load_cores": 0.0,
    }


def test_the_report_gives_ratios_to_raw_and_where_the_cpu_goes() -> None:
    windows = [
        _window("tcp", "raw", 3.0, 0.10),
        _window("tcp", "batches", 2.7, 0.13),
        _window("tcp", "dataset", 2.1, 0.25),
    ]
    goals = Targets(socket={"dataset_vs_raw": 0.8, "trainer_cpu_ms_per_clip": 0.2})
    result = summary.socket_ceiling_summary(
        {
            "windows": windows,
            "transports": ["tcp"],
            "producers": 1,
            "netns": "x",
            "link": "veth",
            "trainer_cpus": [0],
            "producer_cpus": [1],
        },
        goals,
    )
    assert result is not None
    tcp = result["transports"]["tcp"]
    assert tcp["batches_vs_raw"] == pytest.approx(0.9)
    assert tcp["dataset_vs_raw"] == pytest.approx(0.7)
    stages = list(tcp["cpu_ms_per_clip_by_stage"].values())
    assert stages == pytest.approx([0.10, 0.03, 0.12])
    assert tcp["meets"] == {"dataset_vs_raw": False, "trainer_cpu_ms_per_clip": False}
    text = "\n".join(markdown._socket_lines(result))
    assert "| tcp | h5feed.dataset | 2.10 |" in text and "MISSES" in text
