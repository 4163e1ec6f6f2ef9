"""Helpers of the metrics and top tests: scrape with a timeout, start a producer service with
its metrics endpoint and find the port it bound."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

#: Every HTTP request of the tests is bounded by this.
HTTP_TIMEOUT_S = 5.0


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
        body: bytes = response.read()
        return body


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``/metrics`` parsed by prometheus_client's own parser: sample name -> (labels, value)."""
    text = get(f"http://127.0.0.1:{port}/metrics").decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    """The value of an unlabelled sample."""
    ((labels, number),) = samples[name]
    assert labels == {}, labels
    return number


def by_worker(
    samples: dict[str, list[tuple[dict[str, str], float]]], name: str
) -> dict[str, float]:
    return {labels["worker"]: number for labels, number in samples.get(name, [])}


def stats(port: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(get(f"http://127.0.0.1:{port}/stats"))
    return data


def start_producer(
    connect_port: int,
    data_root: pathlib.Path,
    name: str,
    log: pathlib.Path,
    workers: int = 2,
    verbose: str = "-v",
    extra: Sequence[str] = (),
    pythonpath: pathlib.Path | None = None,
) -> subprocess.Popen[bytes]:
    """``h5feed -v produce --metrics-port 0`` (and ``extra`` flags; ``pythonpath`` first on
    its workers' ``PYTHONPATH``, e.g. for ``--allow-code``), its stderr (the log) into
    ``log``."""
    env = {**os.environ, "H5FEED_CONNECT": f"tcp://127.0.0.1:{connect_port}"}
    if pythonpath is not None:
        paths = (str(pythonpath), env.get("PYTHONPATH"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    with open(log, "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "h5feed", verbose, "produce", "--data-root", str(data_root),
             "--workers", str(workers), "--name", name, "--metrics-port", "0", *extra],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip


def metrics_port_of(log: pathlib.Path, timeout_s: float = 30.0) -> int:
    """The port a producer logged (``metrics at http://HOST:PORT/metrics``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(r"metrics at http://[^:]+:(\d+)/metrics", log.read_text())
        if found:
            return int(found.group(1))
        time.sleep(0.1)
    raise AssertionError(f"no metrics port logged within {timeout_s} s:\n{log.read_text()}")


def stop(process: subprocess.Popen[bytes], timeout_s: float = 15) -> None:
    """SIGTERM ``process`` and wait ``timeout_s`` for it to exit; SIGKILL it after that."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
