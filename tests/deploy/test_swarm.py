"""The Swarm stack (deploy/swarm.yml), for real: a single-node swarm on the CI Docker engine,
two replicas with CURVE keys from Docker secrets serving a consumer in this test; one replica's
container is killed mid-epoch (Swarm starts its task again, h5feed hands its work over and the
new task joins), the service is scaled to 3 mid-epoch (the third replica delivers in that
epoch), and the epoch arrives exactly once. Also: the stack file cannot drift from the compose
service."""

from __future__ import annotations

import collections
import io
import pathlib
import re
import subprocess
import tarfile
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from docker_helpers import IMAGE, ROOT, RUN_ID, SWARM_LOCK_TIMEOUT_S, engine_timeout
from ports import free_port
from swarm_helpers import (
    SERVICE,
    STACK,
    docker,
    dockerfile_healthcheck,
    dockerfile_start_period_s,
    seconds,
    wait_for,
)
from upgrade_pins import PREVIOUS_PACKAGE, PREVIOUS_PROTOCOL, PREVIOUS_RELEASE

import h5feed
from h5feed.common.protocol.versions import PROTOCOL_VERSION
from h5feed.common.trust import curve

STACK_FILE = ROOT / "deploy" / "swarm.yml"
_EVENT_TIMEOUT_S = 120  # the longest the epoch is held open for one awaited event

# The environment only the compose file has, or only the stack file, and why.
_ENV_ONLY_IN_STACK: set[str] = set()
_ENV_FIXED_IN_STACK = {  # compose passes these through; the stack fixes them (secrets)
    "H5FEED_KEY": "/run/secrets/producer.key_secret",
    "H5FEED_SERVER_KEY": "/run/secrets/trainer.key",
    "H5FEED_INSECURE": "",
}


def load_yaml(path: pathlib.Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def test_the_stack_file_matches_the_compose_service() -> None:
    stack = load_yaml(STACK_FILE)
    compose = load_yaml(ROOT / "docker-compose.yml")["services"]["producer"]
    producer = stack["services"]["producer"]
    assert stack["version"] == "3.8"  # Debian's docker CLI 20.10 reads no version as 1.0
    assert producer["image"] == compose["image"] == "${H5FEED_IMAGE:-h5feed-producer}"
    assert producer["init"] is compose["init"] is True
    assert producer["stop_grace_period"] == compose["stop_grace_period"]
    assert producer["extra_hosts"] == compose["extra_hosts"]
    assert "command" not in producer and "command" not in compose  # the image's CMD, both
    env, compose_env = producer["environment"], compose["environment"]
    assert set(env) == set(compose_env) | _ENV_ONLY_IN_STACK
    for key, value in compose_env.items():
        assert env[key] == _ENV_FIXED_IN_STACK.get(key, value), key
    # The data: the same target, read-only.
    (volume,) = producer["volumes"]
    target, mode = compose["volumes"][0].rsplit(":", 2)[1:]
    assert (volume["target"], volume["read_only"], mode) == (target, True, "ro")
    assert volume["type"] == "bind" and volume["source"].startswith("${H5FEED_DATA:?")
    # Health: the image's, stated again (Swarm starts a task again when it turns unhealthy).
    assert producer["healthcheck"]["test"] == ["CMD", *dockerfile_healthcheck()]
    # Keys: Docker secrets, owned by the image's user, the secret one 0400.
    secrets = {s["target"]: s for s in producer["secrets"]}
    for name in ("producer.key_secret", "trainer.key"):
        assert env[next(k for k, v in env.items() if v == f"/run/secrets/{name}")]
        assert (secrets[name]["uid"], secrets[name]["gid"]) == ("10001", "10001")
    assert secrets["producer.key_secret"]["mode"] == 0o400
    assert set(stack["secrets"]) == {s["source"] for s in producer["secrets"]}
    policy = producer["deploy"]["restart_policy"]
    assert producer["deploy"]["mode"] == "replicated" and policy["condition"] == "any"
    for port in producer.get("ports", []):  # long syntax only
        assert isinstance(port, dict), port


def test_the_stack_updates_one_task_at_a_time_and_rolls_a_failed_update_back() -> None:
    """``docker service update --image``: one task at a time, the new one started (and
    healthy) before the old one is asked to stop; a new task that fails within ``monitor``
    (a producer the trainer refuses exits with status 2 within seconds:
    ``tests/system/test_stopping.py::test_a_refused_producer_service_exits_with_status_2_at_once``)
    rolls the service back; the grace period covers the producer's stop wait."""
    from h5feed.common.worker_settings import DEFAULT_STOP_WAIT_S
    from h5feed.producer.service.server import STOP_EXIT_MARGIN_S

    producer = load_yaml(STACK_FILE)["services"]["producer"]
    deploy = producer["deploy"]
    update, rollback = deploy["update_config"], deploy["rollback_config"]
    assert (update["parallelism"], update["order"], update["failure_action"]) == (
        1, "start-first", "rollback",
    )  # fmt: skip
    assert update["max_failure_ratio"] == 0  # one failed task is enough
    start_period = seconds(producer["healthcheck"]["start_period"])
    assert start_period == dockerfile_start_period_s()
    assert seconds(update["monitor"]) >= start_period
    assert (rollback["parallelism"], rollback["order"]) == (1, "start-first")
    assert seconds(rollback["monitor"]) >= start_period
    # Not set in the stack: the service's default stop wait is the one to cover.
    assert "H5FEED_STOP_WAIT_S" not in producer["environment"]
    assert seconds(producer["stop_grace_period"]) >= DEFAULT_STOP_WAIT_S + STOP_EXIT_MARGIN_S


# -- the swarm, for real -------------------------------------------------------------------


#: How a service update ends (``docker service inspect``'s ``UpdateStatus.State``):
#: ``rollback_completed`` when a new task failed within ``update_config``'s ``monitor``.
UPDATE_ENDED = frozenset({"completed", "rollback_completed", "paused", "rollback_paused"})


def start_update(env: dict[str, str], image: str) -> None:
    """``docker service update --image IMAGE --no-resolve-image`` of the stack's producers,
    detached: the test reads its epoch meanwhile (``Epoch.slowly_until``) and watches
    :func:`update_state` reach one of :data:`UPDATE_ENDED`."""
    docker(env, "service", "update", "--detach", "--image", image, "--no-resolve-image", SERVICE)


def update_state(env: dict[str, str]) -> str:
    """The producers' update state now (``updating``, ``completed``, ``rollback_started``,
    ``rollback_completed``, ...; empty before any update)."""
    return docker(
        env, "service", "inspect", "--format",
        "{{if .UpdateStatus}}{{.UpdateStatus.State}}{{end}}", SERVICE, check=False,
    ).strip()  # fmt: skip


def containers(env: dict[str, str]) -> dict[str, str]:
    """The service's running containers: hostname (what h5feed reports as host) -> task name."""
    lines = docker(
        env, "ps", "-q", "--filter", f"label=com.docker.swarm.service.name={SERVICE}"
    ).split()
    if not lines:
        return {}
    found = {}
    for line in docker(
        env, "inspect", "--format",
        '{{.Config.Hostname}} {{index .Config.Labels "com.docker.swarm.task.name"}}', *lines,
        check=False,  # one may have gone meanwhile
    ).splitlines():  # fmt: skip
        host, _, task = line.partition(" ")
        found[host] = task
    return found


def keys(directory: pathlib.Path) -> dict[str, str]:
    """Key pairs of a trainer and a producer; the producer's public key authorized."""
    curve.write_key_pair(str(directory), "trainer")
    curve.write_key_pair(str(directory), "producer")
    (directory / "authorized").mkdir()
    (directory / "authorized" / "producer.key").write_text((directory / "producer.key").read_text())
    return {
        "curve_key": str(directory / "trainer.key_secret"),
        "curve_authorized": str(directory / "authorized"),
    }


def stack_env(
    swarm: dict[str, str], data: pathlib.Path, port: int, keys_dir: pathlib.Path, image: str
) -> dict[str, str]:
    """The stack's environment: ``image``'s producers, one worker each, 2 replicas, reaching
    this test's trainer on ``port`` with the CURVE keys :func:`keys` wrote in ``keys_dir``."""
    return {
        **swarm,
        "H5FEED_IMAGE": image,
        "H5FEED_DATA": str(data),
        "H5FEED_CONNECT": f"tcp://host.docker.internal:{port}",
        "H5FEED_WORKERS": "1",
        "H5FEED_KEY_FILE": str(keys_dir / "producer.key_secret"),
        "H5FEED_SERVER_KEY_FILE": str(keys_dir / "trainer.key"),
        # Four tasks at once (a scale to 3; start-first's 2 + 2) fit on a 2-core CI machine.
        "H5FEED_CPUS": "0.1",
        "H5FEED_MEMORY": "128M",
        "H5FEED_REPLICAS": "2",
    }


def swarm_feed(
    data: pathlib.Path, port: int, consumer_keys: dict[str, str], clips_per_video: int, seed: int
) -> Any:
    """The trainer's feed of the swarm's producers: one clip per batch, 2 in flight, so the
    test paces the epoch."""
    return h5feed.batches(
        sorted(p.name for p in data.iterdir()),
        data_root=str(data),
        workers=0,
        listen=f"tcp://0.0.0.0:{port}",
        **consumer_keys,  # type: ignore[arg-type]
        start_timeout_s=120,
        join_grace_s=3.0,
        clip_len=4,
        resize=(48, 64),
        clips_per_video=clips_per_video,
        batch_size=1,
        max_inflight_batches=2,
        seed=seed,
    )


class Epoch:
    """One epoch taken by this test, at the pace it decides, recording which host delivered."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.batches = iter(stream)
        self.samples: collections.Counter[int] = collections.Counter()
        self.clips: dict[str, int] = {}  # host -> the most clips seen from it
        self.versions: set[tuple[int, str]] = set()  # (protocol, package) of every worker seen
        self.ended = False

    def take(self) -> None:
        try:
            batch = next(self.batches)
        except StopIteration:
            self.ended = True
            return
        self.samples.update(batch["sample"].tolist())
        self.look()

    def look(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.stream.stats()
        for worker in stats["workers"]:
            self.clips[worker["host"]] = max(self.clips.get(worker["host"], 0), worker["clips"])
            self.versions.add((worker["protocol"], worker["package"]))
        return stats

    def hold_until(self, what: str, done: Callable[[], bool]) -> None:
        """Take nothing until ``done()``: the epoch stays open (credits are not given back)."""
        wait_for(what, lambda: (self.look(), done())[1], _EVENT_TIMEOUT_S)

    def slowly_until(
        self,
        what: str,
        done: Callable[[], bool],
        every_s: float = 0.1,
        timeout_s: float = _EVENT_TIMEOUT_S,
    ) -> None:
        """Take a batch every ``every_s`` until ``done()``; failing if the epoch ends first."""
        deadline = time.monotonic() + timeout_s
        while not done():
            assert not self.ended, f"the epoch ended before {what}: {self.clips}"
            assert time.monotonic() < deadline, f"waited {timeout_s:g} s for {what}"
            self.take()
            time.sleep(every_s)

    def rest(self) -> None:
        while not self.ended:
            self.take()


@pytest.mark.compose
@pytest.mark.xdist_group(
    "machine"
)  # one Docker engine per machine (as tests/deploy/test_compose.py)
@engine_timeout(420 + SWARM_LOCK_TIMEOUT_S)
def test_swarm_producers_survive_a_kill_and_a_scale_up_mid_epoch_exactly_once(
    swarm: dict[str, str], readable_data: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    port = free_port()
    consumer_keys = keys(tmp_path)  # the stack's secrets read the producer's key files
    env = stack_env(swarm, readable_data, port, tmp_path, IMAGE)
    docker(env, "stack", "deploy", "-c", str(STACK_FILE), "--resolve-image", "never", STACK)
    feed = swarm_feed(readable_data, port, consumer_keys, clips_per_video=3, seed=14)  # 72
    try:
        with feed.stream() as stream:
            epoch = Epoch(stream)
            epoch.take()
            epoch.hold_until("both replicas", lambda: len(epoch.look()["workers"]) == 2)
            first = containers(env)
            assert set(first) <= set(epoch.clips), (first, epoch.clips)
            epoch.take()

            # Kill one replica's container while it holds a unit: Swarm starts its task again
            # in a new container (a new host name), which joins the epoch; h5feed hands the
            # lost one's files and unanswered units over. Its processes are stopped first
            # (kill -STOP -1 spares PID 1, dumb-init), so a unit sent to it stays unanswered.
            victim = max(first, key=lambda host: epoch.clips[host])
            docker(env, "exec", victim, "sh", "-c", "kill -STOP -1")

            def victim_holds_a_unit() -> bool:
                workers = epoch.look()["workers"]
                return any(w["host"] == victim and w["outstanding_units"] for w in workers)

            epoch.slowly_until("a unit held by the stopped replica", victim_holds_a_unit)
            docker(env, "kill", victim)
            epoch.hold_until(
                "the killed replica to be lost",
                lambda: epoch.look()["peers_lost"] >= 1,
            )
            restarted: list[str] = []

            def task_restarted() -> bool:
                now = containers(env)
                restarted[:] = [h for h in now if h not in first]
                return len(restarted) == 1 and restarted[0] in epoch.clips

            epoch.hold_until("Swarm to restart the killed task and it to join", task_restarted)
            assert containers(env)[restarted[0]].split(".")[1] == first[victim].split(".")[1]
            epoch.slowly_until(
                "the restarted task's first part", lambda: epoch.clips[restarted[0]] > 0
            )

            # Scale up mid-epoch: the third replica joins and delivers in this epoch.
            docker(env, "service", "scale", "--detach", f"{SERVICE}=3")
            third: list[str] = []

            def scaled() -> bool:
                third[:] = [h for h in containers(env) if h not in first and h not in restarted]
                return len(third) == 1 and third[0] in epoch.clips

            epoch.hold_until("the third replica to join", scaled)
            epoch.slowly_until("the third replica's first part", lambda: epoch.clips[third[0]] > 0)
            epoch.rest()
            stats = stream.stats()
        assert epoch.samples == collections.Counter(range(72)), epoch.samples
        assert stats["peers_lost"] >= 1 and stats["peers_joined"] >= 2, stats
        assert stats["reassigned_units"] >= 1, stats  # the unit the killed replica held
        print(
            f"hosts {epoch.clips}; reassigned_units {stats['reassigned_units']}, "
            f"peers_lost {stats['peers_lost']}, peers_joined {stats['peers_joined']}"
        )
    finally:
        feed.close()
        tasks = docker(env, "service", "ps", "--no-trunc", SERVICE, check=False)
        logs = docker(env, "service", "logs", "--no-task-ids", SERVICE, timeout=60, check=False)
        print(tasks, logs[-3000:])


# -- a rolling update from the previous release, and a bad image ---------------------------

#: The previous release (tests/support/upgrade_pins.py) and a release the trainer refuses,
#: each as this run's image with its h5feed package replaced: built in seconds, without the
#: network.
PREVIOUS_IMAGE = f"h5feed-producer:prev-{RUN_ID}"
BAD_IMAGE = f"h5feed-producer:bad-{RUN_ID}"
_BUILD_TIMEOUT_S = 300
#: The longest an update may take: two tasks, each started, healthy (within the health check's
#: 20 s start period) and its predecessor stopped (within the 30 s grace period), then
#: ``monitor`` (30 s); with room for a loaded 2-core CI machine.
_UPDATE_TIMEOUT_S = 300
#: The trainer's pace while an update runs (a batch per this many seconds): the epoch
#: (_SAMPLES batches) outlasts the update.
_UPDATE_PACE_S = 0.5
_CLIPS_PER_VIDEO = 24
_SAMPLES = 24 * _CLIPS_PER_VIDEO  # small_dataset: 4 files of 6 videos


def package_dir(env: dict[str, str]) -> str:
    """Where IMAGE has its h5feed package installed."""
    return docker(
        env, "run", "--rm", "--entrypoint", "python3", IMAGE, "-c",
        "import h5feed, os; print(os.path.dirname(h5feed.__file__))",
    ).strip()  # fmt: skip


def build_overlay(
    env: dict[str, str], tag: str, package: bytes, into: str, context: pathlib.Path
) -> None:
    """``tag``: IMAGE with its h5feed package replaced by ``package`` (a tar of ``h5feed/``),
    built from ``context`` (a new directory). Replaced, not copied over: a module of one
    release that is a package of the other (``producer/worker.py`` and ``producer/worker/``)
    would otherwise leave the newer one in the way, and Python imports a package first."""
    context.mkdir()
    with tarfile.open(fileobj=io.BytesIO(package)) as tar:
        tar.extractall(context, filter="data")  # our own tar: git archive's, or this tree's
    (context / "Dockerfile").write_text(
        f"FROM {IMAGE}\nUSER root\nRUN rm -rf {into}\nCOPY h5feed {into}\nUSER h5feed\n"
    )
    result = subprocess.run(
        ["docker", "build", "-q", "-t", tag, str(context)], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 0, f"docker build -t {tag}:\n{result.stderr[-4000:]}"


def previous_release_package() -> bytes:
    """The previous release's h5feed package, a tar from this repository's history."""
    result = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", PREVIOUS_RELEASE, "h5feed"],
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, (
        f"the previous release {PREVIOUS_RELEASE} (protocol {PREVIOUS_PROTOCOL}) is not in this "
        f"clone's history (a shallow clone?): {result.stderr.decode()[-2000:]}"
    )
    return result.stdout


def package_of_another_protocol() -> bytes:
    """This tree's h5feed package speaking protocol 99 only: a release the trainer refuses."""
    versions = ROOT / "h5feed" / "common" / "protocol" / "versions.py"
    text, changed = re.subn(
        r"^(PROTOCOL_VERSION|OLDEST_VERSION): Final = \d+$", r"\1: Final = 99",
        versions.read_text(), flags=re.MULTILINE,
    )  # fmt: skip
    assert changed == 2, "protocol/versions.py no longer states both versions as expected"
    data = text.encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(
            ROOT / "h5feed", arcname="h5feed",
            filter=lambda m: None if "__pycache__" in m.name or m.name.endswith(
                "common/protocol/versions.py") else m,
        )  # fmt: skip
        member = tarfile.TarInfo("h5feed/common/protocol/versions.py")
        member.size, member.mode, member.mtime = len(data), 0o644, int(time.time())
        tar.addfile(member, io.BytesIO(data))
    return buffer.getvalue()


def running_images(env: dict[str, str]) -> list[str]:
    """The images of the service's running containers."""
    return sorted(
        docker(
            env, "ps", "--filter", f"label=com.docker.swarm.service.name={SERVICE}",
            "--format", "{{.Image}}",
        ).split()
    )  # fmt: skip


class Update:
    """An update of the producers, started now; ``ended()`` polls its state."""

    def __init__(self, env: dict[str, str], image: str) -> None:
        self.env = env
        start_update(env, image)
        self.state = ""

    def ended(self) -> bool:
        # The update resets the state (swarmkit clears UpdateStatus with the spec), so a
        # previous update's "completed" is never read as this one's.
        self.state = update_state(self.env)
        return self.state in UPDATE_ENDED


def remove_stack_and_images(env: dict[str, str], *images: str) -> None:
    """The stack (its containers use ``images``), then ``images`` (children of IMAGE, which the
    fixture removes after). Never raises: it runs after the test's own outcome."""
    docker(env, "stack", "rm", STACK, check=False)
    label = f"label=com.docker.swarm.service.name={SERVICE}"
    deadline = time.monotonic() + 90  # the grace period (30 s) and the engine's clean-up
    while docker(env, "ps", "-aq", "--filter", label, check=False).strip():
        if time.monotonic() > deadline:
            print(f"the stack's containers are still there after 90 s: {images} kept")
            return
        time.sleep(1)
    docker(env, "image", "rm", *images, check=False)


@pytest.mark.compose
@pytest.mark.xdist_group(
    "machine"
)  # one Docker engine per machine (as tests/deploy/test_compose.py)
@engine_timeout(1200 + SWARM_LOCK_TIMEOUT_S)
def test_a_rolling_update_from_the_previous_release_mid_epoch_is_exactly_once(
    swarm: dict[str, str], readable_data: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Two replicas of the previous release serve an epoch; ``docker service update --image``
    (deploy/swarm.yml's ``update_config``) replaces them by this release one at a time while
    the trainer reads: every sample once, no error, units handed back and none made again.
    In the next epoch an update to an image the trainer refuses rolls back by itself, and the
    epoch again arrives exactly once."""
    port = free_port()
    consumer_keys = keys(tmp_path)  # the stack's secrets read the producer's key files
    env = stack_env(swarm, readable_data, port, tmp_path, PREVIOUS_IMAGE)
    feed = swarm_feed(readable_data, port, consumer_keys, _CLIPS_PER_VIDEO, seed=15)
    previous = (PREVIOUS_PROTOCOL, PREVIOUS_PACKAGE)
    current = (PROTOCOL_VERSION, h5feed.__version__)
    try:
        into = package_dir(env)
        build_overlay(env, PREVIOUS_IMAGE, previous_release_package(), into, tmp_path / "previous")
        build_overlay(env, BAD_IMAGE, package_of_another_protocol(), into, tmp_path / "bad")
        docker(env, "stack", "deploy", "-c", str(STACK_FILE), "--resolve-image", "never", STACK)

        # Epoch 1: the previous release serves it; mid-epoch, a rolling update to this one.
        with feed.stream() as stream:
            epoch = Epoch(stream)
            epoch.take()
            epoch.hold_until("both replicas", lambda: len(epoch.look()["workers"]) == 2)
            assert epoch.versions == {previous}, epoch.versions
            old = containers(env)
            for _ in range(5):
                epoch.take()
            update = Update(env, IMAGE)
            began = time.monotonic()
            epoch.slowly_until(
                "the rolling update to end", update.ended, _UPDATE_PACE_S, _UPDATE_TIMEOUT_S
            )
            assert update.state == "completed", update.state
            update_s = time.monotonic() - began
            assert running_images(env) == [IMAGE, IMAGE]
            assert not set(old) & set(containers(env))  # every task replaced
            epoch.rest()
            stats = stream.stats()
        assert epoch.samples == collections.Counter(range(_SAMPLES)), epoch.samples
        assert epoch.versions == {previous, current}, epoch.versions  # both served it
        # Each old task was stopped (SIGTERM) after its successor joined: it handed back what
        # it had not started, and nothing had to be made again.
        assert stats["units_remade"] == 0, stats
        assert stats["reassigned_units"] == stats["units_handed_back"], stats
        print(
            f"update: {update_s:.0f} s; hosts {epoch.clips}; "
            f"units_handed_back {stats['units_handed_back']}, "
            f"units_remade {stats['units_remade']}, peers_lost {stats['peers_lost']}"
        )

        # Epoch 2: this release serves it; mid-epoch, an update to a release it refuses.
        with feed.stream() as stream:
            epoch = Epoch(stream)
            epoch.take()
            epoch.hold_until("both updated replicas", lambda: len(epoch.look()["workers"]) == 2)
            for _ in range(5):
                epoch.take()
            update = Update(env, BAD_IMAGE)
            began = time.monotonic()
            epoch.slowly_until(
                "the bad image's update to end", update.ended, _UPDATE_PACE_S, _UPDATE_TIMEOUT_S
            )
            assert update.state == "rollback_completed", update.state
            rollback_s = time.monotonic() - began
            image = docker(
                env, "service", "inspect", "--format",
                "{{.Spec.TaskTemplate.ContainerSpec.Image}}", SERVICE,
            ).strip()  # fmt: skip
            assert image == IMAGE
            assert running_images(env) == [IMAGE, IMAGE]
            epoch.rest()
            stats = stream.stats()
        assert epoch.samples == collections.Counter(range(_SAMPLES)), epoch.samples
        assert epoch.versions == {current}, epoch.versions  # the refused one never served
        print(
            f"rollback: {rollback_s:.0f} s; hosts {epoch.clips}; "
            f"units_handed_back {stats['units_handed_back']}, "
            f"units_remade {stats['units_remade']}"
        )
    finally:
        feed.close()
        tasks = docker(env, "service", "ps", "--no-trunc", SERVICE, check=False)
        logs = docker(env, "service", "logs", "--no-task-ids", SERVICE, timeout=60, check=False)
        print(tasks, logs[-3000:])
        remove_stack_and_images(env, PREVIOUS_IMAGE, BAD_IMAGE)
