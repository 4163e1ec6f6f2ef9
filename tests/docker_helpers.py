"""A Docker engine for the container tests (tests/test_compose.py, tests/test_swarm.py): found
or started with ../shared/ci/docker-engine.sh, once per session (the fixtures are in
conftest.py), and the test data where the image's non-root user can read it."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

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


def docker_engine() -> Iterator[dict[str, str]]:
    """A running Docker engine (started here if none answers), stopped again if we started it;
    yields the environment in which ``docker`` reaches it."""
    engine = engine_script()
    env = dict(os.environ)
    try:
        answers = subprocess.run(["docker", "info"], capture_output=True, env=env, timeout=60)
        running = answers.returncode == 0
    except FileNotFoundError:  # no docker CLI yet: the engine script installs it
        running = False
    started = False
    if not running:
        if not engine.exists():
            pytest.fail(f"no Docker engine answers and {engine} is missing")
        line = subprocess.run(
            ["bash", str(engine), "start"], capture_output=True, text=True, timeout=900
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
            subprocess.run(["bash", str(engine), "stop"], capture_output=True, timeout=300)


def readable_copy(paths: list[pathlib.Path]) -> Iterator[pathlib.Path]:
    """The files in a new directory where the containers' non-root user can read them."""
    directory = pathlib.Path(tempfile.mkdtemp(prefix="h5feed-docker-", dir="/var/tmp"))
    try:
        directory.chmod(0o755)
        for path in paths:
            shutil.copy(path, directory / path.name)
            (directory / path.name).chmod(0o644)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def free_port() -> int:
    """A TCP port free on every interface (the containers connect through the host's)."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])
