"""Starting `h5feed produce` for a test, and a feed of its producers: shared by the
tests that need real remote producers."""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator, Sequence

import pytest
from ports import free_port

import h5feed

CLIP = {"clip_len": 4, "resize": (48, 64), "crop": (40, 40)}


@pytest.fixture()
def port() -> int:
    return free_port()


def start_producer(
    port: int, data_root: pathlib.Path, name: str, extra: Sequence[str] = ()
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "h5feed", "produce", "--data-root", str(data_root),
         "--workers", "1", "--name", name, *extra],
        env={**os.environ, "H5FEED_CONNECT": f"tcp://127.0.0.1:{port}"},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@contextlib.contextmanager
def two_producers(port: int, data_root: pathlib.Path) -> Iterator[list[subprocess.Popen[str]]]:
    """Producers ``p0`` and ``p1`` (one worker each) dialling ``port``; killed, if still
    running, and reaped on the way out."""
    started = [start_producer(port, data_root, f"p{i}") for i in range(2)]
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
        for process in started:
            process.communicate(timeout=10)


def remote_feed(
    port: int, dataset: list[pathlib.Path], **kwargs: object
) -> h5feed.consumer.api.Feed:
    return h5feed.batches(
        [p.name for p in dataset],  # relative to the data root
        data_root=str(dataset[0].parent),
        workers=0,
        listen=f"tcp://127.0.0.1:{port}",
        **CLIP,
        **kwargs,  # type: ignore[arg-type]
    )


def make_keys(directory: pathlib.Path, name: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "h5feed", "keys", str(directory), "--name", name],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip


def curve_setup(tmp_path: pathlib.Path, listed: str) -> tuple[pathlib.Path, pathlib.Path]:
    """Key pairs for the trainer, ``listed`` and a stranger; only ``listed`` is authorized."""
    keys, authorized = tmp_path / "keys", tmp_path / "authorized"
    for name in ("trainer", listed, "stranger"):
        make_keys(keys, name)
    authorized.mkdir()
    (authorized / f"{listed}.key").write_bytes((keys / f"{listed}.key").read_bytes())
    return keys, authorized


def curve_args(keys: pathlib.Path, name: str) -> list[str]:
    return ["--key", str(keys / f"{name}.key_secret"), "--server-key", str(keys / "trainer.key")]
