"""A worker process: owns some HDF5 files, produces the units of work the consumer sends it.

Run as ``python -m h5feed.producer.worker --connect ADDR --worker-id ID`` (the consumer
starts
local workers this way, so the trainer's ``__main__`` is never re-imported). The worker:

1. connects a DEALER socket to the consumer's ROUTER and says HELLO;
2. on JOB, indexes each of its files and answers their videos in INDEX_BATCH messages (from
   memory when persistent, else from the on-disk index cache without opening the file, else
   from the file's pack index or a walk); it opens a file when a unit first needs it and
   keeps at most ``--max-open-files`` open (the least recently used is closed, and reopened
   when a unit needs it again); a persistent worker keeps its indexes and open files across
   jobs;
3. on UNIT, reads only the frames of each planned clip, decodes and preprocesses them into one
   preallocated array and sends it as DATA (zero-copy); on SOURCE, ITEMS and PULL it runs the
   user's source instead; any failure is sent back as ERROR with the file, video, frame and
   traceback, and the worker carries on (the consumer decides);
4. on BYE, or when its parent process is gone (``--parent-pid``), or on SIGTERM, it exits 0
   (SIGTERM: after the unit in hand is sent, within ``--stop-wait-s``, then BYE hands back the
   units it did not start; a trainer's local worker, only a SIGTERM the trainer sent: one
   sent to the whole job by a cluster's preemption is ignored, so the trainer's last steps
   get their batches, see ``h5feed/producer/worker/lifetime.py``);
   with ``--parent-pid`` the kernel also kills it when that parent dies, even mid-call
   (``h5feed/producer/worker/lifetime.py``); at start it raises its soft open-files limit to the
   hard
   one.

User code named by the consumer is imported only if ``--allow-code PATTERN`` allows it
(``h5feed produce``) or with ``--trust-code`` (the trainer's local workers); without either,
none is. With ``--data-root`` every file stays under it (:mod:`h5feed.producer.files.confine`).

It never decides what to produce: it only answers the consumer's units, in the order received.
This module is the command line; the event loop is :mod:`h5feed.producer.worker.loop`, which
drives every job through one protocol (:mod:`h5feed.producer.worker.job`): an HDF5 job
:mod:`h5feed.producer.worker.hdf5_job`, a source job :mod:`h5feed.producer.sources`.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence

from h5feed.common.trust.curve import (
    CURVE_ENV_PUBLIC,
    CURVE_ENV_SECRET,
    CURVE_ENV_SERVER,
    KeyPair,
    client_key_files,
)
from h5feed.common.user_code import trainer_main
from h5feed.common.worker_settings import WorkerSettings
from h5feed.producer.worker.lifetime import (
    die_with_parent,
    drop_working_directory,
    raise_open_files_limit,
    sigterm_from_parent_only,
)
from h5feed.producer.worker.loop import Worker

__all__ = ["Worker", "main", "run_until_stopped"]


def _curve_keys(key: str | None, server_key: str | None) -> tuple[KeyPair, bytes] | None:
    """CURVE keys from files (a producer service) or from the environment (local workers of
    a consumer that uses CURVE); None without keys."""
    try:
        from_files = client_key_files(key, server_key)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    if from_files is not None:
        return from_files
    public, secret = os.environ.get(CURVE_ENV_PUBLIC), os.environ.get(CURVE_ENV_SECRET)
    server = os.environ.get(CURVE_ENV_SERVER)
    if public and secret and server:
        return KeyPair(public.encode(), secret.encode()), server.encode()
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = WorkerSettings.parser(
        prog="python -m h5feed.producer.worker",
        description="One h5feed worker process (started by the consumer for local workers).",
    )
    try:
        settings = WorkerSettings.from_args(parser.parse_args(argv))
    except ValueError as exc:
        parser.error(str(exc))
    trainer_main.mark_worker()  # before any user code: h5feed.dataset() in it must raise
    process, code = settings.process, settings.code
    # First of all: a trainer that dies from here on takes this worker with it, and one
    # that died already is seen now.
    if process.parent_pid is not None and not die_with_parent(process.parent_pid):
        return 0
    if not code.trust_code:  # a producer's worker: user code only from installed places
        drop_working_directory()
    soft, hard = raise_open_files_limit()
    host = socket.gethostname()
    logging.basicConfig(
        level=os.environ.get("H5FEED_LOG_LEVEL", "WARNING"),
        format=f"%(asctime)s %(levelname)s [worker {process.worker_id} host {host} "
        "pid %(process)d] %(message)s",
    )
    # Ctrl-C in a terminal goes to the whole process group; the trainer handles it and stops
    # its workers, so a worker must not die mid-unit with a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker = Worker(settings, _curve_keys(settings.network.key, settings.network.server_key))
    logging.getLogger("h5feed.worker").debug(
        "open files limit %d (hard %d), at most %d HDF5 files open",
        soft, hard, settings.data.max_open_files,
    )  # fmt: skip
    return run_until_stopped(worker)


def run_until_stopped(worker: Worker) -> int:
    """Run ``worker``'s event loop; SIGTERM makes it leave after the message in hand (it
    sends that unit, then BYE, so the units it did not start go to others: see
    :class:`~h5feed.producer.worker.loop.Worker`, guarantee 5). Returns its exit code."""

    def on_sigterm(signum: int, frame: object) -> None:
        worker.request_stop()

    signal.signal(signal.SIGTERM, on_sigterm)
    # A trainer's local worker (born with SIGTERM blocked) takes it from the trainer only: a
    # preemption's SIGTERM to the whole job must not stop it before the trainer's last step.
    sigterm_from_parent_only(worker.parent_pid)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
