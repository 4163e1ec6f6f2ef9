"""The worker's job protocol (``h5feed/producer/worker/job.py``): the event loop drives any job.

A kind of job is a class: a worker given another kind for JOB answers that kind's way, with
the loop unchanged (its sends, counters and errors the same); the loop names no kind.
"""

from __future__ import annotations

import ast
import pathlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import ClassVar

import numpy as np
import pytest
import zmq

from h5feed.common.errors import ProtocolError
from h5feed.common.protocol import messages
from h5feed.common.worker_settings import Network, Process, WorkerSettings
from h5feed.producer.sources import SourceJob
from h5feed.producer.worker import loop
from h5feed.producer.worker.hdf5_job import Hdf5Job
from h5feed.producer.worker.job import Job, JobContext, Produced
from h5feed.producer.worker.kinds import KINDS
from h5feed.producer.worker.loop import Worker

pytestmark = pytest.mark.processes  # sockets
RECEIVE_TIMEOUT_MS = 10_000


class Counting:
    """A kind of job that reads nothing: a JOB is answered by one INDEX_BATCH of no file, a
    UNIT by one byte per row; a unit of row sample 13 fails."""

    STARTS: ClassVar[type[messages.Message]] = messages.Job
    UNITS: ClassVar[tuple[type[messages.Message], ...]] = (messages.Unit,)
    DESCRIBED: ClassVar[str] = "a counting"
    closed: ClassVar[list[str]] = []

    reads_ahead = False

    def __init__(self, job_id: str) -> None:
        self.id = job_id
        self.starts = 0

    def expect(self, units: Sequence[messages.Unit]) -> None:
        raise AssertionError("a job that does not read ahead is never told what waits")

    @classmethod
    def open(cls, start: messages.Job, context: JobContext) -> Counting:
        return cls(start.job)

    def take(self, start: messages.Job) -> Iterator[messages.Message]:
        self.starts += 1
        yield messages.IndexBatch.of_columns(self.id, [])

    def produce(self, unit: messages.Unit) -> Produced:
        if any(row.sample == 13 for row in unit.rows):
            raise ValueError("unlucky row")
        samples = tuple(row.sample for row in unit.rows)
        arrays = {"ones": np.ones(len(samples), np.uint8)}
        return messages.Data(self.id, unit.unit, unit.batch, samples, arrays), len(samples)

    def check(self, check: messages.Check) -> None:
        return None

    def close(self) -> None:
        self.closed.append(self.id)


def _row(sample: int) -> messages.Row:
    return messages.Row(sample, 0, 0, 0, 0.5, 0.5, False, sample)


@pytest.fixture
def router(tmp_path: pathlib.Path) -> Iterator[tuple[zmq.Socket[bytes], str]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    address = f"ipc://{tmp_path}/consumer.sock"
    sock.bind(address)
    try:
        yield sock, address
    finally:
        sock.close(linger=0)
        context.term()


def _receive(sock: zmq.Socket[bytes]) -> messages.Message:
    """The next message the worker sent that is not a HELLO."""
    while True:
        assert sock.poll(RECEIVE_TIMEOUT_MS, zmq.POLLIN), "no message within the timeout"
        _identity, *frames = sock.recv_multipart(copy=False)
        message = messages.decode(frames)
        if not isinstance(message, messages.Hello):
            return message


def test_a_kind_of_job_is_a_class_the_loop_drives_unchanged(
    router: tuple[zmq.Socket[bytes], str],
) -> None:
    sock, address = router
    kinds = (Counting, SourceJob)  # Counting in place of HDF5 jobs
    worker = Worker(WorkerSettings(Network(address), Process("w0")), kinds=kinds)
    Counting.closed.clear()
    try:
        worker.hello()
        worker.handle(messages.Job("j1", (), {}, {}, None))
        assert isinstance(_receive(sock), messages.IndexBatch)
        held = worker.job
        assert isinstance(held, Counting) and held.starts == 1
        worker.handle(messages.Job("j1", (), {}, {}, None))  # the same job: taken, not opened
        assert isinstance(_receive(sock), messages.IndexBatch)
        assert worker.job is held and held.starts == 2

        worker.handle(messages.Unit("j1", 1, 0, 0, (_row(1), _row(2))))
        data = _receive(sock)
        assert isinstance(data, messages.Data) and data.samples == (1, 2)
        worker.handle(messages.Unit("j1", 2, 0, 0, (_row(13),)))
        error = _receive(sock)
        assert isinstance(error, messages.Error) and (error.unit, error.type) == (2, "ValueError")
        worker.handle(messages.Items("j1", 3, 0, 0, (0,)))  # a source's unit, not its own
        error = _receive(sock)
        assert isinstance(error, messages.Error) and error.type == ProtocolError.__name__
        assert error.message == "a items message for a counting job"
        worker.handle(messages.Unit("j0", 4, 0, 0, (_row(5),)))  # another job's: dropped
        worker.handle(messages.Check("j1", 0))  # no checks: dropped
        counted = worker.counters.values
        assert (counted["jobs"], counted["units"], counted["clips"]) == (1, 1, 2)
        assert (counted["bytes"], counted["errors"]) == (2, 2)

        worker.handle(messages.Job("j2", (), {}, {}, None))  # the next job: the last closed
        assert isinstance(_receive(sock), messages.IndexBatch)
        assert Counting.closed == ["j1"] and worker.counters.values["jobs"] == 2
    finally:
        worker.end_job()
        worker.connection.close(0)
        worker.context.term()
    assert Counting.closed == ["j1", "j2"]


class Ahead(Counting):
    """A counting job that reads ahead: it notes, before each unit, the units it was told
    wait behind it. Its JOB waits until the test has sent every unit, so that they are all
    waiting in the socket when the first is made."""

    reads_ahead = True  # type: ignore[assignment]  # a constant of the subclass
    told: ClassVar[list[tuple[int, tuple[int, ...]]]] = []
    sent: ClassVar[threading.Event] = threading.Event()  # the test has sent every message

    def take(self, start: messages.Job) -> Iterator[messages.Message]:
        assert self.sent.wait(30)
        time.sleep(0.3)  # delivered by ZeroMQ's IO thread
        yield from super().take(start)

    def expect(self, units: Sequence[messages.Unit]) -> None:
        self.told.append((-1, tuple(u.unit for u in units)))

    def produce(self, unit: messages.Unit) -> Produced:
        self.told.append((unit.unit, ()))
        return super().produce(unit)


def test_a_job_that_reads_ahead_is_told_the_units_waiting_and_they_are_answered_in_order(
    router: tuple[zmq.Socket[bytes], str],
) -> None:
    """Units already in the socket when one is made are handed to a job that reads ahead
    (its own only, in order), then answered in the order sent, each once, by the loop as it
    runs; a message that is not a unit of the job (another job's, a malformed one) keeps its
    fate (dropped)."""
    sock, address = router
    worker = Worker(WorkerSettings(Network(address), Process("w0")), kinds=(Ahead, SourceJob))
    Ahead.told.clear()
    Ahead.sent.clear()
    running = threading.Thread(target=worker.run, daemon=True)
    running.start()
    try:
        assert sock.poll(RECEIVE_TIMEOUT_MS, zmq.POLLIN), "no HELLO"
        identity = sock.recv_multipart()[0]
        sent = [
            messages.Job("j1", (), {}, {}, None),
            messages.Unit("j1", 1, 0, 0, (_row(1),)),
            messages.Unit("j1", 2, 0, 0, (_row(2),)),
            messages.Unit("j0", 3, 0, 0, (_row(3),)),  # another job's: dropped, not told
            messages.Unit("j1", 4, 0, 0, (_row(4),)),
        ]
        for message in sent:
            sock.send_multipart([identity, *messages.encode(message)])
        sock.send_multipart([identity, b"not msgpack"])  # malformed: dropped in its turn
        sock.send_multipart([identity, *messages.encode(messages.Unit("j1", 5, 0, 0, (_row(5),)))])
        Ahead.sent.set()
        assert isinstance(_receive(sock), messages.IndexBatch)
        answered = [_receive(sock) for _unit in range(4)]
        assert [a.unit for a in answered if isinstance(a, messages.Data)] == [1, 2, 4, 5]
        assert Ahead.told[:2] == [(-1, (2, 4, 5)), (1, ())]  # its own units, in order
        assert [unit for unit, _waiting in Ahead.told if unit >= 0] == [1, 2, 4, 5]
        assert not sock.poll(300, zmq.POLLIN)  # nothing answered twice
    finally:
        worker.request_stop()
        running.join(timeout=30)
    assert not running.is_alive()


def test_every_kind_follows_the_protocol_and_answers_its_own_start_message() -> None:
    kinds: tuple[type[Job[object, object]], ...] = KINDS
    assert kinds == (Hdf5Job, SourceJob)
    starts = [kind.STARTS for kind in kinds]
    assert len(set(starts)) == len(starts)  # the loop opens a kind by its start message
    for kind in kinds:
        for name in ("open", "take", "expect", "produce", "check", "close"):
            assert callable(getattr(kind, name)), (kind, name)


def test_the_event_loop_names_no_kind_of_job() -> None:
    """loop.py imports neither kind and asks no message or job which kind it is
    (``isinstance`` only on what it sends: an ERROR counted, DATA waited for)."""
    tree = ast.parse(pathlib.Path(loop.__file__).read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not {"h5feed.producer.worker.hdf5_job", "h5feed.producer.sources"} & imported
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert not {"Hdf5Job", "SourceJob"} & names
    checked = [
        ast.unparse(node.args[1])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance"
    ]
    assert sorted(checked) == ["messages.Data", "messages.Error"], checked
