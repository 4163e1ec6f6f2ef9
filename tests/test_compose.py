"""The compose deployment, for real: a Docker engine, the image, two producer containers
serving a consumer in this test, over the host gateway."""

from __future__ import annotations

import collections
import os
import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

import h5feed

ROOT = pathlib.Path(__file__).resolve().parent.parent
_ENGINE_IN_SHARED = pathlib.Path("shared", "ci", "docker-engine.sh")


def engine_script() -> pathlib.Path:
    """The script that starts a Docker engine on machines without one: ``$H5FEED_DOCKER_ENGINE``,
    else ``../shared/ci/docker-engine.sh`` beside this checkout, else beside the checkout this
    one was cloned from (a scratch clone of a local repository, e.g. in ``mktemp -d``)."""
    if os.environ.get("H5FEED_DOCKER_ENGINE"):
        return pathlib.Path(os.environ["H5FEED_DOCKER_ENGINE"])
    beside = ROOT.parent / _ENGINE_IN_SHARED
    if beside.exists():
        return beside
    origin = subprocess.run(
        ["git", "-C", str(ROOT), "config", "--get", "remote.origin.url"],
        capture_output=True, text=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    if origin and pathlib.Path(origin).is_dir():
        return pathlib.Path(origin).resolve().parent / _ENGINE_IN_SHARED
    return beside


ENGINE = engine_script()
PROJECT = "h5feedtest"

# One Docker engine per machine: never two of these at once (pytest-xdist).
pytestmark = [pytest.mark.compose, pytest.mark.xdist_group("machine")]


@pytest.fixture(scope="module")
def docker_env() -> Iterator[dict[str, str]]:
    """A running Docker engine (started here if none answers), stopped again if we started it."""
    env = dict(os.environ)
    try:
        answers = subprocess.run(["docker", "info"], capture_output=True, env=env, timeout=60)
        running = answers.returncode == 0
    except FileNotFoundError:  # no docker CLI yet: the engine script installs it
        running = False
    started = False
    if not running:
        if not ENGINE.exists():
            pytest.fail(f"no Docker engine answers and {ENGINE} is missing")
        line = subprocess.run(
            ["bash", str(ENGINE), "start"], capture_output=True, text=True, timeout=900
        )
        assert line.returncode == 0, line.stderr[-3000:]
        for assignment in line.stdout.strip().removeprefix("export ").split():
            key, _, value = assignment.partition("=")
            env[key] = value
        started = True
    try:
        yield env
    finally:
        if started:
            subprocess.run(["bash", str(ENGINE), "stop"], capture_output=True, timeout=300)


def compose(env: dict[str, str], *args: str, timeout: float = 600) -> str:
    result = subprocess.run(
        ["docker", "compose", "-p", PROJECT, *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert result.returncode == 0, f"docker compose {' '.join(args)}:\n{result.stderr[-4000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def readable_data(small_dataset: list[pathlib.Path]) -> Iterator[pathlib.Path]:
    """The dataset where the containers' non-root user can read it."""
    directory = pathlib.Path(tempfile.mkdtemp(prefix="h5feed-compose-", dir="/var/tmp"))
    try:
        directory.chmod(0o755)
        for path in small_dataset:
            shutil.copy(path, directory / path.name)
            (directory / path.name).chmod(0o644)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def test_compose_scaled_producers_deliver_one_epoch_exactly_once(
    docker_env: dict[str, str], readable_data: pathlib.Path
) -> None:
    port = free_port()
    env = {
        **docker_env,
        "H5FEED_DATA": str(readable_data),
        "H5FEED_CONNECT": f"tcp://host.docker.internal:{port}",
        "H5FEED_WORKERS": "1",
        # No CURVE keys: safe here, the producers reach this test's consumer over the host's
        # Docker bridge of this test's compose project, for one epoch of test data.
        "H5FEED_INSECURE": "1",
    }
    compose(env, "build")
    image = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "python3", "h5feed-producer", "-c",
         "import tensorflow"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert image.returncode != 0 and "No module named 'tensorflow'" in image.stderr
    try:
        compose(env, "up", "-d", "--scale", "producer=2")
        feed = h5feed.batches(
            sorted(p.name for p in readable_data.iterdir()),
            data_root=str(readable_data),
            workers=0,
            listen=f"tcp://0.0.0.0:{port}",
            insecure=True,  # the same: only this test's containers connect, for one epoch
            start_timeout_s=120,
            join_grace_s=3.0,
            clip_len=4,
            resize=(48, 64),
            batch_size=4,
        )
        seen = collections.Counter(s for b in feed for s in b["sample"].tolist())
        assert seen == collections.Counter(range(24))
        workers = feed.stats()["workers"]
        assert len({w["host"] for w in workers}) == 2, workers  # one per container
        assert all(w["clips"] > 0 for w in workers), workers
    finally:
        logs = subprocess.run(
            ["docker", "compose", "-p", PROJECT, "logs", "--no-color"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        compose(env, "down", "--timeout", "15")
        print(logs.stdout[-3000:])
