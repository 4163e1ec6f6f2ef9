"""A benchmark-only h5feed worker that answers every UNIT with zeros: no reading, no decoding.

``python -m h5feed.bench.synthetic_worker --connect ADDR --worker-id ID [--cpus 1,2]``. It is
the real worker (:class:`h5feed.producer.worker.process.Worker`: same socket, same wire protocol,
same JOB and INDEX handling, so the consumer plans real epochs of the real files) with one
kind of job replaced (:class:`SyntheticWorker` runs :class:`SyntheticJob`, an HDF5 job whose
units are made of nothing: :mod:`h5feed.producer.worker.job`): a UNIT of n rows is answered at
once with a preallocated zero array of the clip's shape [n, clip_len, H, W, 3] uint8, sent
without a copy — or, when the unit names a shared-memory slot this process can map (it runs on
the trainer's host), with the slot's rows as they are (nothing to write: the batch is
"ready-made") and a DATA header alone. What is left is the cost of moving batches: the consumer
ceiling of :mod:`h5feed.bench.ceiling`.

``--host NAME`` makes it say it runs on host NAME (a producer in a network namespace is
another host to the trainer: it is offered no shared-memory slot, every batch crosses the
socket: :mod:`h5feed.bench.socket_ceiling`); ``--key``/``--server-key`` make it a CURVE
client, as ``h5feed produce`` is.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from h5feed.common.protocol import messages
from h5feed.common.protocol.wire import DEFAULT_MAX_MESSAGE_BYTES
from h5feed.common.trust.curve import KeyPair, client_key_files
from h5feed.common.worker_settings import Network, Process, WorkerSettings
from h5feed.producer.sources.job import SourceJob
from h5feed.producer.worker.hdf5_job import Hdf5Job
from h5feed.producer.worker.job import Job, Produced
from h5feed.producer.worker.process import Worker, run_until_stopped


class SyntheticJob(Hdf5Job):
    """See the module docstring. The arrays are never written after creation, so sending
    the same one again while ZeroMQ still holds it is safe (one cache for the process)."""

    _zeros: ClassVar[dict[tuple[int, ...], np.ndarray]] = {}

    def produce(self, unit: messages.Unit) -> Produced:
        height, width = self.spec.frame_shape
        shape = (len(unit.rows), self.spec.clip_len, height or 0, width or 0, 3)
        in_slot = self.target(unit.slot) is not None
        zeros = self._zeros.setdefault(shape, np.zeros(shape, np.uint8))
        samples = tuple(row.sample for row in unit.rows)
        arrays = {} if in_slot else {"frames": zeros}
        return messages.Data(self.id, unit.unit, unit.batch, samples, arrays), zeros.nbytes


#: The kinds of job a synthetic worker runs: its own HDF5 jobs, the real source jobs.
KINDS: tuple[type[Job[Any, Any]], ...] = (SyntheticJob, SourceJob)


class SyntheticWorker(Worker):
    """The real worker with :class:`SyntheticJob` for its HDF5 jobs; ``host``: the host name
    it says in HELLO instead of this host's."""

    def __init__(
        self,
        settings: WorkerSettings,
        curve: tuple[KeyPair, bytes] | None = None,
        host: str | None = None,
    ) -> None:
        super().__init__(settings, curve, KINDS)
        if host is not None:
            self.host = host


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m h5feed.bench.synthetic_worker")
    parser.add_argument("--connect", required=True)
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--cpus", default="", help="run on these CPUs only, e.g. 1,2")
    parser.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES)
    parser.add_argument("--host", default=None, help="the host name said in HELLO")
    parser.add_argument("--key", default=None, help="CURVE: this worker's .key_secret file")
    parser.add_argument("--server-key", default=None, help="CURVE: the consumer's .key file")
    args = parser.parse_args(argv)
    try:
        curve = client_key_files(args.key, args.server_key)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=os.environ.get("H5FEED_LOG_LEVEL", "WARNING"))
    if args.cpus:
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    settings = WorkerSettings(
        Network(args.connect, max_message_bytes=args.max_message_bytes),
        Process(args.worker_id, args.parent_pid),
    )
    worker = SyntheticWorker(settings, curve, host=args.host)
    return run_until_stopped(worker)


if __name__ == "__main__":
    sys.exit(main())
