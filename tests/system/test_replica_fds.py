"""A shared fleet's replica at a hard descriptor limit of 1,024 survives a flood of held
connections that need no key, and still serves a trainer exactly once (issue 38 item 3:
``h5feed produce --listen`` did not raise its soft limit, and at 1,024 held connections the
next worker start raised EMFILE out of the front: the replica exited, and its trainers' workers
with it). Real processes and sockets: the replica, its worker, a trainer, and 1,100 ZeroMQ
connections held by this test (each answers heartbeats, as an idle client does)."""

from __future__ import annotations

import pathlib
import re
import resource
import subprocess
import sys
import time

import pytest
from fleet_helpers import (
    ATTACH_TIMEOUT_S,
    SPEC,
    exactly_once,
    finished,
    fleet_dataset,
    fleet_figures,
    start_trainer,
    wait_for,
)
from metrics_helpers import metrics_port_of, scrape, stop
from ports import free_port

pytestmark = pytest.mark.xdist_group("shared-fleet")

#: The replica's limits: a soft limit it must raise, and the hard limit of many hosts.
_SOFT, _HARD = 256, 1024
#: Held connections: more than the hard limit.
_FLOOD = 1100
#: The flood, in a process of its own (its descriptors and sockets end with it): ZeroMQ
#: DEALERs that connect once and never reconnect, held until stdin closes (at most 300 s).
_FLOODER = f"""
import sys, select, zmq
context = zmq.Context()
context.set(zmq.MAX_SOCKETS, {_FLOOD} + 64)
held = []
for _ in range({_FLOOD}):
    s = context.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RECONNECT_IVL, -1)
    s.connect(sys.argv[1])
    held.append(s)
print("held", flush=True)
select.select([sys.stdin], [], [], 300)
"""


def _limit_descriptors() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (_SOFT, _HARD))


def _soft_limit(pid: int) -> int:
    text = pathlib.Path(f"/proc/{pid}/limits").read_text()
    found = re.search(r"Max open files\s+(\d+)\s+(\d+)", text)
    assert found is not None, text
    return int(found.group(1))


def test_a_replica_at_a_hard_limit_of_1024_survives_a_flood_and_serves_exactly_once(
    tmp_path: pathlib.Path,
) -> None:
    files = fleet_dataset(tmp_path)
    port, log = free_port(), tmp_path / "replica.log"
    with open(log, "wb") as err:
        replica = subprocess.Popen(
            [sys.executable, "-m", "h5feed", "-v", "produce", "--listen",
             f"tcp://127.0.0.1:{port}", "--data-root", str(tmp_path), "--workers", "1",
             "--name", "r", "--metrics-port", "0", "--attach-timeout-s",
             str(ATTACH_TIMEOUT_S), "--stop-wait-s", "5"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            preexec_fn=_limit_descriptors,
        )  # fmt: skip
    flood = None
    trainer = None
    try:
        metrics = metrics_port_of(log)
        assert _soft_limit(replica.pid) == _HARD  # raised from 256
        flood = subprocess.Popen(
            [sys.executable, "-c", _FLOODER, f"tcp://127.0.0.1:{port}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192)),
        )  # fmt: skip
        assert flood.stdout is not None and flood.stdout.readline() == b"held\n"
        shed = wait_for(
            "the flood shed", lambda: fleet_figures(metrics)["connections_shed"] >= 1000, 60, [log]
        )
        time.sleep(1.0)  # the rest of the flood arrives: held, within the bound
        figures = fleet_figures(metrics)
        assert replica.poll() is None and figures["connections"] < 100, figures
        samples = scrape(metrics)  # the replica's own /metrics say so
        assert samples["h5feed_fleet_connections_shed_total"][0][1] >= 1000
        assert samples["h5feed_fleet_connections"][0][1] < 100
        assert "h5feed_fleet_worker_start_failures_total" in samples
        out = tmp_path / "trainer.jsonl"
        trainer = start_trainer(out, free_port(), tmp_path, files, [port], batch_size=3)
        last = wait_for("the trainer's epoch", lambda: finished(out), 120,
                        [log, pathlib.Path(f"{out}.log")])  # fmt: skip
        assert "done" in last, last
        exactly_once(out, files, SPEC.videos_per_file)
        assert replica.poll() is None, log.read_text()[-3000:]
        assert shed
    finally:
        if flood is not None:
            flood.kill()  # every connection it held closes with it
            flood.wait(10)
        if trainer is not None and trainer.poll() is None:
            trainer.kill()
            trainer.wait(10)
        stop(replica, 30)
    assert replica.returncode == 0, log.read_text()[-3000:]
