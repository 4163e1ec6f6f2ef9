"""A Docker Swarm for the deploy tests: the stack, the service, the fixture, and the
Dockerfile's health check as the orchestrators read it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator

import pytest
import yaml
from docker_helpers import (
    ROOT,
    RUN_ID,
    SWARM_LOCK,
    SWARM_LOCK_TIMEOUT_S,
    machine_lock,
)

STACK = f"h5feedswarm-{RUN_ID}"  # another run's stack is not ours


SERVICE = f"{STACK}_producer"


# Apart from the CI engine's container addresses (198.18.0.0/15's first half), on loopback.
_SWARM_INIT = ["--advertise-addr", "127.0.0.1", "--listen-addr", "127.0.0.1:2377",
               "--default-addr-pool", "198.19.0.0/16"]  # fmt: skip


def dockerfile_healthcheck() -> list[str]:
    """The image's HEALTHCHECK command, as an exec list."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    line = next(x for x in text.splitlines() if x.startswith("HEALTHCHECK"))
    command: list[str] = yaml.safe_load(line.split(" CMD ", 1)[1])
    return command


def seconds(duration: str) -> float:
    """A compose duration of whole seconds or minutes (``30s``, ``1m``) in seconds."""
    units = {"s": 1, "m": 60}
    assert duration[-1] in units and duration[:-1].isdigit(), duration
    return int(duration[:-1]) * units[duration[-1]]


def dockerfile_start_period_s() -> float:
    """The image's HEALTHCHECK ``--start-period``, in seconds."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    line = next(x for x in text.splitlines() if x.startswith("HEALTHCHECK"))
    (period,) = (w.split("=", 1)[1] for w in line.split() if w.startswith("--start-period="))
    return seconds(period)


def docker(env: dict[str, str], *args: str, timeout: float = 120, check: bool = True) -> str:
    result = subprocess.run(
        ["docker", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check:
        assert result.returncode == 0, f"docker {' '.join(args)}:\n{result.stderr[-4000:]}"
    return result.stdout


def wait_for(what: str, done: Callable[[], bool], timeout_s: float, every_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout_s:g} s for {what}"
        time.sleep(every_s)


@pytest.fixture
def swarm(producer_image: dict[str, str]) -> Iterator[dict[str, str]]:
    """A single-node swarm on the engine (its addresses apart from the engine's 198.18.0.0/16),
    held alone under the machine-wide swarm lock (one swarm per engine, one manager port per
    machine), with this tree's producer image built as IMAGE (once per run: the session
    fixture ``producer_image``, which removes it at the end); this run's stack removed
    afterwards, and the swarm left again if this fixture made it and no other stack is on it."""
    docker_env = producer_image
    with machine_lock(SWARM_LOCK, "one swarm test at a time", SWARM_LOCK_TIMEOUT_S):
        state = docker(docker_env, "info", "--format", "{{.Swarm.LocalNodeState}}").strip()
        ours = state != "active"
        if ours:
            docker(docker_env, "swarm", "init", *_SWARM_INIT)
        try:
            yield docker_env
        finally:
            docker(docker_env, "stack", "rm", STACK, check=False)
            try:  # the stack goes asynchronously: its network last
                label = f"label=com.docker.stack.namespace={STACK}"
                wait_for(
                    "the stack's network to go",
                    lambda: (
                        not docker(docker_env, "network", "ls", "-q", "--filter", label).strip()
                    ),
                    timeout_s=60,
                    every_s=1,
                )
            finally:
                others = docker(docker_env, "stack", "ls", "--format", "{{.Name}}", check=False)
                if ours and not others.strip():  # never under another's stack
                    docker(docker_env, "swarm", "leave", "--force", check=False)
