"""A shared fleet on Swarm, for real (deploy/swarm-fleet.yml): a single-node swarm on the CI
Docker engine, two replicas that listen, two trainers running as containers on the stack's
network attached by ``tasks.producer`` with CURVE keys both ways, and ``docker service scale``
to 3 mid-epoch: both trainers' epochs exactly once, and the third replica attached to both."""

from __future__ import annotations

import json
import pathlib
import shutil
import tempfile
import time

import pytest
from docker_helpers import IMAGE, ROOT, SWARM_LOCK_TIMEOUT_S, engine_timeout
from fleet_helpers import SPEC, exactly_once, fleet_dataset
from swarm_helpers import SERVICE, STACK, docker, wait_for

from h5feed.common.trust.curve import write_key_pair

STACK_FILE = ROOT / "deploy" / "swarm-fleet.yml"
TRAINER = ROOT / "tests" / "support" / "fleet_trainer.py"
_EPOCH_TIMEOUT_S = 240


def _keys(directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """The fleet's key pair and two trainers' in ``directory``; the trainers' public keys in
    ``directory``/trainers (the fleet's allow-list), the fleet's in ``directory``/authorized
    (each trainer admits the fleet's workers). Returns (trainers, fleet secret)."""
    directory.mkdir()
    for name in ("fleet", "trainer-a", "trainer-b"):
        write_key_pair(str(directory), name)
    trainers, authorized = directory / "trainers", directory / "authorized"
    trainers.mkdir()
    authorized.mkdir()
    for name in ("trainer-a", "trainer-b"):
        shutil.copy(directory / f"{name}.key", trainers)
    shutil.copy(directory / "fleet.key", authorized)
    return trainers, directory / "fleet.key_secret"


def _trainer(env: dict[str, str], name: str, seed: int, files: list[str], step_s: float,
             data: pathlib.Path, keys: pathlib.Path, out: pathlib.Path) -> str:  # fmt: skip
    """A trainer container on the stack's network, attached to ``tasks.producer``."""
    return docker(
        env, "run", "-d", "--name", f"{STACK}-{name}", "--network", f"{STACK}_fleet",
        "--user", "0:0", "--entrypoint", "python",
        "-v", f"{data}:/data:ro", "-v", f"{keys}:/keys:ro", "-v", f"{out}:/out",
        "-v", f"{TRAINER}:/fleet_trainer.py:ro", IMAGE, "/fleet_trainer.py",
        "--listen-host", "0.0.0.0", "--port", "5555", "--fleet", "tcp://tasks.producer:5556",
        "--fleet-key", "/keys/fleet.key", "--curve-key", f"/keys/{name}.key_secret",
        "--curve-authorized", "/keys/authorized", "--data-root", "/data", "--files", *files,
        "--seed", str(seed), "--batch-size", "1", "--step-s", str(step_s),
        "--start-timeout-s", "120", "--out", f"/out/{name}.jsonl",
    ).strip()  # fmt: skip


def _lines(path: pathlib.Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


@pytest.mark.compose
@pytest.mark.xdist_group(
    "machine"
)  # one Docker engine per machine (as tests/deploy/test_compose.py)
@engine_timeout(480 + SWARM_LOCK_TIMEOUT_S)
def test_two_trainer_containers_share_a_swarm_fleet_scaled_mid_epoch_exactly_once(
    swarm: dict[str, str], request: pytest.FixtureRequest
) -> None:
    # Bind mounts the containers' user (uid 10001) can read: not under pytest's 0700 tmp.
    base = pathlib.Path(tempfile.mkdtemp(prefix="h5feed-fleet-", dir="/var/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    base.chmod(0o755)
    data, out, keys = base / "data", base / "out", base / "keys"
    files = fleet_dataset(data)
    data.chmod(0o755)
    out.mkdir()
    trainers_dir, fleet_secret = _keys(keys)
    for directory in (keys, trainers_dir):
        directory.chmod(0o755)
    env = {
        **swarm,
        "H5FEED_IMAGE": IMAGE,
        "H5FEED_DATA": str(data),
        "H5FEED_TRAINER_KEYS": str(trainers_dir),
        "H5FEED_KEY_FILE": str(fleet_secret),
        "H5FEED_WORKERS": "1",
        "H5FEED_REPLICAS": "2",
        "H5FEED_CPUS": "0.1",
        "H5FEED_MEMORY": "128M",
    }
    docker(env, "stack", "deploy", "-c", str(STACK_FILE), "--resolve-image", "never", STACK)
    # (seed, files, step_s): epochs of about 24 s, which the scale-up lands in.
    names = {"trainer-a": (1, files, 1.0), "trainer-b": (2, files[:4], 2.0)}
    try:
        for name, (seed, subset, step_s) in names.items():
            _trainer(env, name, seed, subset, step_s, data, keys, out)
        wait_for(
            "both trainers' second batch",
            lambda: all(len(_lines(out / f"{n}.jsonl")) >= 2 for n in names),
            timeout_s=180,
            every_s=0.5,
        )
        docker(env, "service", "scale", "--detach", f"{SERVICE}=3")
        deadline = time.monotonic() + _EPOCH_TIMEOUT_S
        for name in names:
            wait_for(
                f"{name}'s epoch",
                lambda n=name: any("done" in x or "error" in x for x in _lines(out / f"{n}.jsonl")),
                timeout_s=max(deadline - time.monotonic(), 1),
                every_s=0.5,
            )
        for name, (_, subset, _) in names.items():
            last = _lines(out / f"{name}.jsonl")[-1]
            assert "done" in last, last
            exactly_once(out / f"{name}.jsonl", subset, SPEC.videos_per_file)
            stats = last["stats"]
            assert isinstance(stats, dict)
            shared = stats["producers"]["shared"]
            hosts = sorted({w["host"] for w in stats["workers"] if w["clips"]})
            print(f"{name}: replicas serving {shared['serving']}, hosts delivering {hosts}")
            assert shared["serving"] == 3, shared  # the replica added mid-epoch attached
    finally:
        for name in names:
            logs = docker(env, "logs", "--tail", "30", f"{STACK}-{name}", check=False)
            print(f"--- {name}:\n{logs}")
            docker(env, "rm", "-f", f"{STACK}-{name}", check=False)
        print(
            docker(env, "service", "logs", "--no-task-ids", SERVICE, timeout=60, check=False)[
                -3000:
            ]
        )
