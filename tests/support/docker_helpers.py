"""A Docker engine for the container tests (tests/deploy/test_compose.py,
tests/deploy/test_swarm.py), shared
with whoever else tests on this machine, and the names and locks that keep two runs apart.

The engine is ../shared/ci/docker-engine.sh's: one per machine, shared by its callers. ``start``
registers the caller as a holder (a live process id) under a machine-wide lock; ``stop``
unregisters it and stops dockerd only when no live holder is left. So:

1. ``make test`` prepares and starts the engine in a step of its own, before pytest, with its
   progress on the terminal and its own time limits (``python tests/support/docker_helpers.py --
   COMMAND...``: this module's ``main``); that step is the holder and exports ``HELD_ENV``, and
   the tests only connect.
2. Run alone under pytest, the session fixture registers the pytest process itself and
   unregisters it at the end; the engine's set-up may then happen inside the first test, which is
   why the container tests carry ``engine_timeout``'s long limit.
3. Every name a run makes on the engine carries ``RUN_ID`` (compose projects, stacks, image
   tags), and a swarm (one per engine, and its manager port one per machine) is used only under
   ``machine_lock(SWARM_LOCK)``: two clones testing at once never touch each other's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest
from paths import REPO

ROOT = REPO
_ENGINE_IN_SHARED = pathlib.Path("shared", "ci", "docker-engine.sh")

#: Set by ``make test``'s engine step: an engine is up and held for this run; only connect.
HELD_ENV = "H5FEED_DOCKER_HELD"
#: The one-time set-up on a fresh machine (apt, compose plugins, debootstrap): minutes.
PREPARE_TIMEOUT_S = 1500
#: dockerd up and the stand-in base image imported (after ``prepare``).
START_TIMEOUT_S = 300
_STOP_TIMEOUT_S = 300
_KILL_GRACE_S = 10
_INFO_TIMEOUT_S = 60
#: Building the producer image (docker-compose.yml's ``producer``) from this tree.
_BUILD_TIMEOUT_S = 600
#: The longest a test waits for another run's swarm test to end.
SWARM_LOCK_TIMEOUT_S = 900
#: One swarm per engine, and its manager port (127.0.0.1:2377) one per machine.
SWARM_LOCK = pathlib.Path("/var/tmp/h5feed-swarm.lock")

#: This run's suffix for everything it names on the shared engine (lower-case hex: valid in
#: compose project, stack, service and image tag names).
RUN_ID = f"{os.getpid():x}{secrets.token_hex(3)}"
#: The producer image this run builds (once: :func:`built_image`) and removes again.
IMAGE = f"h5feed-producer:test-{RUN_ID}"


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


def engine_timeout(test_s: float) -> pytest.MarkDecorator:
    """The time limit of a test that uses the engine: ``test_s``, plus the engine's whole set-up
    where the fixture may have to do it (not under ``make test``, whose own step did it)."""
    held = bool(os.environ.get(HELD_ENV))
    return pytest.mark.timeout(test_s + (0 if held else PREPARE_TIMEOUT_S + START_TIMEOUT_S))


def answers(env: dict[str, str]) -> bool:
    """Whether a Docker engine answers ``docker`` in ``env``."""
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, env=env, timeout=60)
    except FileNotFoundError:  # no docker CLI yet: the engine script installs it
        return False
    return info.returncode == 0


def _engine(command: str, holder: int, timeout_s: float, progress: bool) -> str:
    """Runs ``docker-engine.sh COMMAND`` as ``holder``; its stdout. Its progress (stderr) goes to
    the terminal when ``progress``, else into the failure message."""
    engine = engine_script()
    if not engine.exists():
        pytest.fail(f"no Docker engine answers and {engine} is missing")
    script = subprocess.Popen(
        ["bash", str(engine), command],
        env={**os.environ, "CI_DOCKER_HOLDER": str(holder)},
        stdout=subprocess.PIPE, stderr=None if progress else subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True,
        start_new_session=True,  # its own group: apt-get or debootstrap end with it (below)
    )  # fmt: skip
    try:
        out, err = script.communicate(timeout=timeout_s)
    except BaseException as exc:  # past its limit, or interrupted: nothing of it keeps running
        for sig, grace_s in ((signal.SIGTERM, _KILL_GRACE_S), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(script.pid, sig)  # SIGTERM first: apt and dpkg clean up after it
            with contextlib.suppress(subprocess.TimeoutExpired):
                script.wait(grace_s)
                break
        if isinstance(exc, subprocess.TimeoutExpired):
            pytest.fail(f"{engine} {command} took more than {timeout_s:g} s")
        raise
    if script.returncode != 0:
        pytest.fail(f"{engine} {command} failed (exit {script.returncode}):\n{err or ''}")
    return out


def start_engine(holder: int, progress: bool) -> dict[str, str]:
    """Prepares and starts the shared engine with ``holder`` registered; the environment in
    which ``docker`` reaches it."""
    _engine("prepare", holder, PREPARE_TIMEOUT_S, progress)
    line = _engine("start", holder, START_TIMEOUT_S, progress)
    env = dict(os.environ)
    for assignment in line.strip().removeprefix("export ").split():
        key, _, value = assignment.partition("=")
        env[key] = value
    return env


def stop_engine(holder: int) -> None:
    """Unregisters ``holder``; the script stops dockerd only if no live holder is left."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run(
            ["bash", str(engine_script()), "stop"],
            env={**os.environ, "CI_DOCKER_HOLDER": str(holder)},
            capture_output=True, stdin=subprocess.DEVNULL, timeout=_STOP_TIMEOUT_S,
        )  # fmt: skip


def docker_engine() -> Iterator[dict[str, str]]:
    """A running Docker engine; yields the environment in which ``docker`` reaches it. Under
    ``make test`` only connects; alone, registers this process with the shared engine (starting
    it if need be) and unregisters it afterwards."""
    env = dict(os.environ)
    if os.environ.get(HELD_ENV):
        if not answers(env):
            pytest.fail(
                f"{HELD_ENV} is set but no Docker engine answers at {env.get('DOCKER_HOST')}"
            )
        yield env
        return
    if answers(env):  # an engine of the machine's own (not ours to stop)
        yield env
        return
    holder = os.getpid()
    env = start_engine(holder, progress=False)
    try:
        yield env
    finally:
        stop_engine(holder)


@contextlib.contextmanager
def machine_lock(path: pathlib.Path, what: str, timeout_s: float) -> Iterator[None]:
    """Holds an exclusive lock on ``path`` (every run on this machine takes the same file),
    failing after ``timeout_s`` instead of waiting forever; released when the process dies."""
    with open(path, "a") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"waited {timeout_s:g} s for {path} ({what}): another run holds it")
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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


def built_image(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """``env`` (a running engine's) once this tree's producer image is built as :data:`IMAGE`
    (docker-compose.yml's ``producer``, which stack files run with ``H5FEED_IMAGE``: Swarm
    ignores ``build:``); the image removed afterwards. The session fixture ``producer_image``
    (tests/conftest.py): one build per run, shared by every container test, which all run in
    one pytest worker (xdist_group "machine")."""
    result = subprocess.run(
        ["docker", "compose", "-p", f"h5feedbuild-{RUN_ID}", "build", "producer"],
        cwd=ROOT, env={**env, "H5FEED_IMAGE": IMAGE}, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=_BUILD_TIMEOUT_S,
    )  # fmt: skip
    if result.returncode != 0:
        pytest.fail(f"docker compose build producer ({IMAGE}):\n{result.stderr[-4000:]}")
    try:
        yield env
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):  # after the tests' own outcome
            subprocess.run(
                ["docker", "image", "rm", IMAGE], env=env, capture_output=True,
                stdin=subprocess.DEVNULL, timeout=_INFO_TIMEOUT_S,
            )  # fmt: skip


def main(argv: list[str]) -> int:
    """``make test``'s engine step: ``python tests/support/docker_helpers.py -- COMMAND...``
    prepares and
    starts the shared engine (progress on the terminal, each part under its own limit), runs
    COMMAND with ``HELD_ENV`` set and ``docker`` reaching the engine, then unregisters; exits
    with COMMAND's status."""
    command = argv[argv.index("--") + 1 :] if "--" in argv else argv
    if not command:
        print("usage: python tests/support/docker_helpers.py -- COMMAND...", file=sys.stderr)
        return 2
    holder = os.getpid()
    started = False
    # SIGTERM (make killed, CI's limit) unwinds like Ctrl-C, so this run's hold is given back.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        if answers(dict(os.environ)):
            env = dict(os.environ)
            print("docker-engine: using the Docker engine that answers already", file=sys.stderr)
        else:
            print(
                f"docker-engine: preparing and starting the shared engine ({engine_script()}; at"
                f" most {PREPARE_TIMEOUT_S} s + {START_TIMEOUT_S} s; holder {holder})",
                file=sys.stderr,
                flush=True,
            )
            started = True
            env = start_engine(holder, progress=True)
        child = subprocess.Popen(command, env={**env, HELD_ENV: "1"})
        try:
            return child.wait()
        finally:
            if child.poll() is None:  # interrupted: let the command wind down first
                child.send_signal(signal.SIGINT)
                try:
                    child.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
    except pytest.fail.Exception as e:
        print(f"docker-engine: {e}", file=sys.stderr)
        return 1
    finally:
        if started:
            stop_engine(holder)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
