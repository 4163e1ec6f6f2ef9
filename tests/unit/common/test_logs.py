"""Log lines carry their writer's ids; library use is quiet unless logging is configured."""

from __future__ import annotations

import logging
import os
import pathlib
import re
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from metrics_helpers import metrics_port_of, start_producer, stats, stop
from ports import free_port

import h5feed

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}


def test_consumer_lines_carry_host_pid_and_job(
    small_dataset: list[pathlib.Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="h5feed")
    feed = h5feed.batches(small_dataset, **CLIP, workers=1)
    assert sum(1 for _ in feed) > 0
    job = feed.stats()["job"][:8]
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("h5feed.consumer")]
    assert lines, "the consumer logged nothing at INFO"
    prefix = f"[consumer {socket.gethostname()} pid {os.getpid()} job {job}] "
    assert all(line.startswith(prefix) for line in lines), lines


def test_service_and_worker_lines_carry_their_ids(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    log = tmp_path / "producer.log"
    producer = start_producer(free_port(), small_dataset[0].parent, "pl", log, verbose="-vv")
    try:
        port = metrics_port_of(log)
        deadline = time.monotonic() + 30
        while any(w["updated_s_ago"] is None for w in stats(port)["workers"]):
            assert time.monotonic() < deadline, "the workers never started their loop"
            time.sleep(0.1)
    finally:
        stop(producer)  # -vv: the workers log at DEBUG too; at SIGTERM each says it leaves
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    host = socket.gethostname()
    service = [line for line in lines if "h5feed.producer:" in line]
    assert service and all(f"[producer {host} pid {producer.pid} name pl]" in s for s in service)
    workers = [line for line in lines if "[worker " in line]
    assert {w.split("[worker ")[1].split()[0] for w in workers} == {"pl-0", "pl-1"}, lines
    assert all(re.search(rf"\[worker pl-[01] host {host} pid \d+\]", w) for w in workers)
    assert len(service) + len(workers) == len(lines), lines


def test_library_use_is_quiet_without_logging_configured(
    small_dataset: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    # Listening beyond loopback without keys (insecure=True: safe here, nothing is served but
    # this test's 3 batches, and only for the seconds it runs) warns through `warnings`, seen
    # by default, and logs a line with the consumer's ids, unseen unless logging is set up.
    code = textwrap.dedent(f"""
        import h5feed
        feed = h5feed.batches({[str(p) for p in small_dataset]!r}, clip_len=4, workers=1,
                              listen="tcp://0.0.0.0:{free_port()}", insecure=True)
        print(sum(1 for _ in feed))
    """)
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)  # fmt: skip
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout.strip() == "3" and "[consumer " not in quiet.stderr, quiet.stderr
    assert "InsecureWarning: h5feed listens on tcp://0.0.0.0" in quiet.stderr, quiet.stderr
    loud = subprocess.run(
        [sys.executable, "-c", "import logging; logging.basicConfig()\n" + code],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert loud.returncode == 0, loud.stderr
    assert f"[consumer {socket.gethostname()} pid " in loud.stderr
    assert "listens on tcp://0.0.0.0" in loud.stderr
