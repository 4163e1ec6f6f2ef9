"""A real S3 protocol server on loopback for the object-storage tests: moto's
``ThreadedMotoServer`` (what s3fs's own tests run), two sample files uploaded to it, and the
environment a trainer and its local workers read the bucket with (fixtures by name: a plugin
of tests/conftest.py)."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from h5feed.common import storage_config
from h5feed.producer.files import node_cache
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

BUCKET = "h5feed-tests"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def start_server() -> tuple[Any, str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def filesystem(endpoint: str) -> Any:
    return storage_config.filesystem(
        "s3", {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
    )


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """The S3 server's endpoint, for the whole session."""
    server, endpoint = start_server()
    try:
        yield endpoint
    finally:
        server.stop()


@pytest.fixture(scope="session")
def uploaded(s3_server: str, tmp_path_factory: pytest.TempPathFactory) -> list[pathlib.Path]:
    """Two sample files written locally, and uploaded under ``s3://BUCKET/data/``."""
    spec = SampleSpec(
        files=2, videos_per_file=5, min_frames=4, max_frames=8, height=24, width=32, seed=5
    )
    paths = sorted(make_sample_dataset(tmp_path_factory.mktemp("s3data"), spec))
    fs = filesystem(s3_server)
    fs.mkdir(BUCKET)
    for path in paths:
        fs.put(str(path), f"{BUCKET}/data/{path.name}")
    return paths


@pytest.fixture()
def s3(s3_server: str, uploaded: list[pathlib.Path], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The environment a trainer and its local workers read the bucket with (credentials and
    endpoint from the environment, as a producer's), and a filesystem for the test itself."""
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", node_cache.DIR_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(storage_config.STORAGE_ENV, json.dumps({"endpoint_url": s3_server}))
    return filesystem(s3_server)
