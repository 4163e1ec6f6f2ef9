"""A real worker process (``python -m h5feed.producer.worker``) driven message by message.

The test plays the consumer on a ROUTER socket and speaks typed messages: HDF5 jobs (JOB,
INDEX, UNIT, DATA), source jobs (SOURCE, SOURCE_INFO, ITEMS, PULL), the ERROR answers of a
bad layout or a unit of the wrong kind, and BYE. Every receive is bounded by a timeout.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest
import zmq
from paths import SUPPORT

from h5feed.common.config import ClipSpec
from h5feed.common.protocol import messages
from h5feed.common.protocol.messages import FileRef, Row
from h5feed.consumer.options import LayoutArgs

RECEIVE_TIMEOUT_MS = 20_000  # a worker imports numpy, h5py and OpenCV before its HELLO
EXIT_TIMEOUT_S = 10
TESTS = SUPPORT
SPEC = ClipSpec(clip_len=4, resize=(48, 64), crop=(40, 40))


class Peer:
    """The consumer's side: a ROUTER socket and the worker process connected to it."""

    def __init__(self, router: zmq.Socket[bytes], process: subprocess.Popen[bytes]) -> None:
        self.router = router
        self.process = process
        self.identity = b""

    def receive(self) -> messages.Message:
        assert self.router.poll(RECEIVE_TIMEOUT_MS, zmq.POLLIN), "no message within the timeout"
        routing, *frames = self.router.recv_multipart(copy=False)
        self.identity = routing.bytes
        return messages.decode(frames)

    def receive_not_hello(self) -> messages.Message:
        """The next message that is not a HELLO (a worker without a job repeats it)."""
        while isinstance(message := self.receive(), messages.Hello):
            pass
        return message

    def send(self, message: messages.Message) -> None:
        self.router.send_multipart([self.identity, *messages.encode(message)], copy=False)


@pytest.fixture
def peer(tmp_path: pathlib.Path) -> Iterator[Peer]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    address = f"ipc://{tmp_path}/worker.sock"
    router.bind(address)
    process = subprocess.Popen(
        [sys.executable, "-m", "h5feed.producer.worker", "--connect", address,
         "--worker-id", "w0", "--parent-pid", str(os.getpid()), "--trust-code"],
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        peer = Peer(router, process)
        hello = peer.receive()
        assert isinstance(hello, messages.Hello)
        assert (hello.worker, hello.pid) == ("w0", process.pid)
        yield peer
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=EXIT_TIMEOUT_S)
        router.close(linger=0)
        context.term()


def leave(peer: Peer) -> None:
    """A BYE ends a non-persistent worker, with exit code 0."""
    peer.send(messages.Bye("iteration over"))
    assert peer.process.wait(timeout=EXIT_TIMEOUT_S) == 0


def job(files: list[pathlib.Path], layout: Mapping[str, Any] | None = None) -> messages.Job:
    refs = tuple(FileRef(i, str(path)) for i, path in enumerate(files))
    wire_layout = LayoutArgs().resolve().to_wire() if layout is None else layout
    return messages.Job("job-1", refs, SPEC.to_wire(), wire_layout, None)


def row(sample: int, file: int, video: int, flip: bool = False) -> Row:
    return Row(sample, file, video, 0, 0.5, 0.5, flip, sample)


def test_an_hdf5_job_answers_index_then_data_and_errors(
    peer: Peer, small_dataset: list[pathlib.Path]
) -> None:
    files = small_dataset[:2]
    peer.send(job(files))
    index = peer.receive_not_hello()  # both files' videos in one INDEX_BATCH
    assert isinstance(index, messages.IndexBatch), index
    assert (index.files, index.counts) == ((0, 1), (6, 6))
    assert len(index.names) == 12 and index.frames.min() >= 1 and index.labels.shape == (12,)

    peer.send(messages.Unit("job-1", 5, 0, 0, (row(10, 0, 2), row(11, 1, 0, flip=True))))
    data = peer.receive_not_hello()
    assert isinstance(data, messages.Data), data
    assert (data.unit, data.batch, data.samples) == (5, 0, (10, 11))
    assert data.arrays["frames"].shape == (2, 4, 40, 40, 3)
    assert data.arrays["frames"].dtype == np.uint8

    peer.send(messages.Unit("job-1", 6, 1, 0, (row(12, 0, 99),)))  # no video 99 in file 0
    error = peer.receive_not_hello()
    assert isinstance(error, messages.Error) and error.unit == 6, error
    assert error.traceback

    peer.send(messages.Unit("job-0", 7, 2, 0, (row(13, 0, 0),)))  # a job that is over: dropped
    peer.send(messages.Unit("job-1", 8, 2, 0, (row(13, 0, 0),)))
    answer = peer.receive_not_hello()
    assert isinstance(answer, messages.Data) and answer.unit == 8
    leave(peer)


def test_a_job_with_a_bad_layout_is_an_error_of_the_job(
    peer: Peer, small_dataset: list[pathlib.Path]
) -> None:
    peer.send(job(small_dataset[:1], layout={"kind": "no-such-layout"}))
    error = peer.receive_not_hello()
    assert isinstance(error, messages.Error), error
    assert error.unit is None and error.type == "ValueError"
    assert "no-such-layout" in error.message
    leave(peer)


def source(
    path: str, args: Mapping[str, Any], spec: Mapping[str, Any] | None = None
) -> messages.Source:
    """A SOURCE of shard 0 of 1 that finds the tests' user code on ``sys.path``."""
    return messages.Source("job-s", path, args, (str(TESTS),), 0, 1, 0, 0, spec)


def start_source(peer: Peer, path: str, args: Mapping[str, Any]) -> messages.SourceInfo:
    """SOURCE, SOURCE_INFO (the probed spec), then SOURCE again with that spec."""
    peer.send(source(path, args))
    info = peer.receive_not_hello()
    assert isinstance(info, messages.SourceInfo), info
    peer.send(source(path, args, info.spec))
    return info


def test_a_map_source_answers_items_and_refuses_other_unit_kinds(peer: Peer) -> None:
    info = start_source(peer, "user_sources:Squares", {"n": 10})
    assert (info.kind, info.length) == ("map", 10)

    peer.send(messages.Items("job-s", 1, 0, 0, (3, 1)))
    data = peer.receive_not_hello()
    assert isinstance(data, messages.Data), data
    assert (data.unit, data.samples) == (1, (3, 1))
    floats = [a for a in data.arrays.values() if a.dtype == np.float32]
    assert len(floats) == 1 and floats[0].tolist() == [[3.0] * 3, [1.0] * 3]

    peer.send(messages.Pull("job-s", 2, 1, 0, 4, 0))  # a generator's unit, to a map source
    error = peer.receive_not_hello()
    assert isinstance(error, messages.Error) and error.unit == 2, error
    assert "pull unit for a map source" in error.message

    rows = (row(0, 0, 0),)
    peer.send(messages.Unit("job-s", 3, 2, 0, rows))  # an HDF5 unit, to a source job
    error = peer.receive_not_hello()
    assert isinstance(error, messages.Error) and error.unit == 3, error
    assert error.type == "ProtocolError" and "unit message for a source job" in error.message

    peer.send(messages.Items("job-s", 4, 3, 0, (10,)))  # out of range
    error = peer.receive_not_hello()
    assert isinstance(error, messages.Error) and "out of range" in error.message
    leave(peer)


def test_a_source_answers_check_with_its_copys_digests_of_the_common_items(peer: Peer) -> None:
    info = start_source(peer, "user_sources:Augmented", {"n": 10})
    assert info.epoch == 0 and [c.item for c in info.checks] == [0, 5, 9]
    assert all(c.reproducible and len(c.digest) == 16 for c in info.checks)
    peer.send(messages.Check("job-s", 2))
    again = peer.receive_not_hello()
    assert isinstance(again, messages.SourceInfo) and again.epoch == 2, again
    assert [c.item for c in again.checks] == [0, 5, 9]
    # seeded per (seed, epoch, item): another epoch, another augmentation of each item
    assert all(a.digest != b.digest for a, b in zip(info.checks, again.checks, strict=True))
    leave(peer)


def test_a_generator_source_answers_pulls(peer: Peer) -> None:
    info = start_source(peer, "user_sources:count_up", {"n": 5})
    assert (info.kind, info.length) == ("generator", None)
    peer.send(messages.Pull("job-s", 1, 0, 0, 3, 0))
    first = peer.receive_not_hello()
    peer.send(messages.Pull("job-s", 2, 1, 0, 3, 0))  # only 2 left in this pass
    second = peer.receive_not_hello()
    assert isinstance(first, messages.Data) and isinstance(second, messages.Data)
    assert (first.samples, second.samples) == ((0, 1, 2), (3, 4))
    peer.send(messages.Items("job-s", 3, 2, 0, (0,)))  # a map source's unit, to a generator
    error = peer.receive_not_hello()
    assert isinstance(error, messages.Error) and "items unit for a generator" in error.message
    leave(peer)
