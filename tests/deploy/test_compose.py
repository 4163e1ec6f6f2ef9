"""The compose deployment, for real: a Docker engine, the image, two producer containers
serving a consumer in this test, over the host gateway."""

from __future__ import annotations

import collections
import pathlib
import subprocess

import pytest
from docker_helpers import IMAGE, ROOT, RUN_ID, engine_timeout
from ports import free_port

import h5feed

PROJECT = f"h5feedtest-{RUN_ID}"  # another run's project on the shared engine is not ours

# One Docker engine per machine: never two of these at once (pytest-xdist).
pytestmark = [pytest.mark.compose, pytest.mark.xdist_group("machine"), engine_timeout(300)]


def compose(env: dict[str, str], *args: str, timeout: float = 600) -> str:
    result = subprocess.run(
        ["docker", "compose", "-p", PROJECT, *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert result.returncode == 0, f"docker compose {' '.join(args)}:\n{result.stderr[-4000:]}"
    return result.stdout


def test_compose_scaled_producers_deliver_one_epoch_exactly_once(
    producer_image: dict[str, str], readable_data: pathlib.Path
) -> None:
    """The image (built once per run by the ``producer_image`` fixture, from this tree, as
    ``compose build`` builds it) has no TensorFlow; two producer containers of it, scaled by
    compose, deliver one epoch exactly once, each a part of it."""
    port = free_port()
    env = {
        **producer_image,
        "H5FEED_IMAGE": IMAGE,
        "H5FEED_DATA": str(readable_data),
        "H5FEED_CONNECT": f"tcp://host.docker.internal:{port}",
        "H5FEED_WORKERS": "1",
        # No CURVE keys: safe here, the producers reach this test's consumer over the host's
        # Docker bridge of this test's compose project, for one epoch of test data.
        "H5FEED_INSECURE": "1",
    }
    try:
        image = subprocess.run(
            ["docker", "run", "--rm", "--entrypoint", "python3", IMAGE, "-c",
             "import tensorflow"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert image.returncode != 0 and "No module named 'tensorflow'" in image.stderr
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
        compose(env, "down", "--timeout", "15")  # the image is the session's (conftest.py)
        print(logs.stdout[-3000:])
