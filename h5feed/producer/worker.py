"""A worker process: owns some HDF5 files, produces the units of work the consumer sends it.

Run as ``python -m h5feed.producer.worker --connect ADDR --worker-id ID`` (the consumer starts
local workers this way, so the trainer's ``__main__`` is never re-imported). The worker:

1. connects a DEALER socket to the consumer's ROUTER and says HELLO;
2. on JOB, opens each of its files once and keeps them open, and answers one INDEX per file
   (from the on-disk index cache when valid);
3. on UNIT, reads only the frames of each planned clip, decodes and preprocesses them into one
   preallocated array and sends it as DATA (zero-copy); any failure is sent back as ERROR with
   the file, video, frame and traceback, and the worker carries on (the consumer decides);
4. on BYE, or when its parent process is gone (``--parent-pid``), or on SIGTERM, it exits 0.

It never decides what to produce: it only answers the consumer's units, in the order received.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np
import zmq

from h5feed import __version__
from h5feed.common import layouts, wire
from h5feed.common.config import ClipSpec
from h5feed.common.curve import (
    CURVE_ENV_PUBLIC,
    CURVE_ENV_SECRET,
    CURVE_ENV_SERVER,
    KeyPair,
    load_public,
    make_client,
)
from h5feed.common.errors import DataError, ProtocolError, VersionMismatchError
from h5feed.producer.clips import ClipMaker
from h5feed.producer.shm import SlotError, SlotMaps, parse_slot
from h5feed.producer.sources import SourceJob
from h5feed.producer.worker_stats import WorkerCounters

_POLL_MS = 200
# A DEALER blocks a send while it has no connected peer (the consumer is gone or restarting).
# Sends time out this often to re-check whether the worker should leave instead of waiting.
_SEND_RETRY_MS = 500
# A persistent worker without a job says hello this often, so a consumer that starts (or
# restarts) after it finds it within a second.
_HELLO_EVERY_S = 1.0
_CLOSE_LINGER_MS = 2000
_log = logging.getLogger("h5feed.worker")


class _Job:
    """The files and clip spec of one job, opened in this process (see :class:`ClipMaker`)."""

    def __init__(self, job_id: str, spec: ClipSpec, layout: layouts.LayoutSpec) -> None:
        self.id = job_id
        self.spec = spec
        self.maker = ClipMaker(spec, layout)  # imports the transform: a bad path fails here
        self.slots = SlotMaps()

    def close(self) -> None:
        self.maker.close()
        self.slots.close()


class _Leave(Exception):
    """Raised inside the event loop when the worker must stop (BYE, SIGTERM, parent gone)."""


class Worker:
    """The worker's event loop over one DEALER socket.

    Guarantees: it never blocks longer than ``_SEND_RETRY_MS`` or ``_POLL_MS`` without checking
    whether it must leave, so it exits within about a second of its parent dying or a SIGTERM,
    even when the consumer's socket is gone and a send could wait forever.
    """

    def __init__(
        self,
        connect: str,
        worker_id: str,
        parent_pid: int | None,
        data_root: str | None = None,
        persistent: bool = False,
        cache_dir: str | None = None,
        curve: tuple[KeyPair, bytes] | None = None,
        stats_file: str | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.counters = WorkerCounters(stats_file, worker_id)  # read by `h5feed produce`
        self.parent_pid = parent_pid
        self.data_root = data_root
        self.persistent = persistent
        self.cache_dir = cache_dir  # a service worker's own; else the consumer's (same host)
        self.exit_code = 0
        self._last_hello = 0.0
        self._last_heard = 0.0
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDTIMEO, _SEND_RETRY_MS)
        self.socket.setsockopt(zmq.ROUTING_ID, worker_id.encode())
        if curve is not None:  # a CURVE client that also checks the consumer's key
            make_client(self.socket, *curve)
        self.socket.connect(connect)
        self.job: _Job | SourceJob | None = None
        self.stopping = False
        self.slots_failed = False  # a slot could not be mapped: stop trying

    def send(
        self, kind: str, fields: dict[str, Any], arrays: Sequence[tuple[str, np.ndarray]] = ()
    ) -> None:
        frames = wire.encode(kind, fields, arrays)
        while True:
            try:
                # A multipart send is all or nothing: EAGAIN can only come before the first part.
                self.socket.send_multipart(frames, copy=False)
                return
            except zmq.Again:
                self.check_leave()

    def check_leave(self) -> None:
        """Raise _Leave when the worker must stop: asked to, or its parent process is gone."""
        if self.stopping:
            raise _Leave
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            _log.info("worker %s: parent %d is gone, exiting", self.worker_id, self.parent_pid)
            raise _Leave

    def should_say_hello(self, now: float) -> bool:
        """Without a job, hello every second until a consumer answers. A persistent worker
        also says hello after a second of silence while it holds a job: if its consumer was
        killed (no BYE), a restarted one finds it; a live one ignores a known worker's hello."""
        quiet = now - max(self._last_hello, self._last_heard) > _HELLO_EVERY_S
        if self.job is None:
            return now - self._last_hello > _HELLO_EVERY_S
        return self.persistent and quiet

    def hello(self) -> None:
        self._last_hello = time.monotonic()
        self.send(
            wire.HELLO,
            {
                "worker": self.worker_id,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "package": __version__,
            },
        )

    def run(self) -> int:
        """The event loop; returns the exit code (0, or 2 when refused by the consumer)."""
        try:
            self.hello()
            while True:
                self.check_leave()
                self.counters.maybe_write()
                if self.should_say_hello(time.monotonic()):
                    self.hello()
                if not self.socket.poll(_POLL_MS):
                    continue
                frames = self.socket.recv_multipart(copy=False)
                self._last_heard = time.monotonic()
                try:
                    message = wire.decode(frames)
                except VersionMismatchError as exc:
                    _log.error("worker %s: refused by the consumer: %s", self.worker_id, exc)
                    self.exit_code = 2
                    raise _Leave from exc
                except ProtocolError as exc:
                    _log.warning("worker %s: dropped malformed message: %s", self.worker_id, exc)
                    continue
                self.handle(message)
        except _Leave:
            _log.debug("worker %s: leaving", self.worker_id)
            self.say_bye()
        finally:
            if self.job is not None:
                self.job.close()
            self.counters.write()
            self.socket.close(linger=_CLOSE_LINGER_MS)  # flush the last DATA and the BYE
            self.context.term()
        return self.exit_code

    def say_bye(self) -> None:
        """Tell the consumer this worker leaves: what it still held is given to others."""
        if self.job is None or self.exit_code != 0:
            return
        with contextlib.suppress(zmq.ZMQError):  # nobody listening: nothing to hand over
            self.socket.send_multipart(
                wire.encode(wire.BYE, {"reason": "stopping (SIGTERM)"}), zmq.NOBLOCK
            )

    def handle(self, message: wire.Message) -> None:
        fields = message.fields
        if message.kind == wire.BYE:
            reason = message.fields["reason"]
            if not self.persistent or reason.startswith(wire.REFUSED):
                if reason.startswith(wire.REFUSED):
                    _log.error("worker %s: %s", self.worker_id, reason)
                    self.exit_code = 2
                self.stopping = True
            elif self.job is not None:  # the iteration is over: wait for the next job
                self.job.close()
                self.job = None
        elif message.kind == wire.JOB:
            self.start_job(fields)
        elif message.kind == wire.SOURCE:
            self.start_source(fields)
        elif message.kind == wire.UNIT:
            if self.job is None or fields["job"] != self.job.id:
                return  # a unit of a job that is over: nobody waits for it
            if isinstance(self.job, SourceJob):
                self.run_source_unit(self.job, fields)
            else:
                self.run_unit(self.job, fields)
        else:
            _log.warning("worker %s: unexpected %s message", self.worker_id, message.kind)

    def start_job(self, fields: dict[str, Any]) -> None:
        """Open the job's files; a JOB of the job in hand adds files (taken over from a worker
        that left)."""
        job_id = fields["job"]
        if not isinstance(self.job, _Job) or self.job.id != job_id:
            if self.job is not None:
                self.job.close()
            self.counters.add("jobs")
            try:
                clip, layout = fields["clip"], layouts.from_wire(fields["layout"])
                self.job = _Job(job_id, ClipSpec.from_wire(clip), layout)
            except Exception as exc:  # a bad spec or transform import path: tell the trainer
                self.send_error(job_id, None, exc)
                return
        for file_index, path in fields["files"]:
            if self.data_root is not None and not os.path.isabs(path):
                path = os.path.join(self.data_root, path)
            try:
                cache = fields["cache_dir"] and (self.cache_dir or fields["cache_dir"])
                videos = self.job.maker.open_and_index(file_index, path, cache)
            except Exception as exc:  # any failure must reach the trainer, with the file named
                self.send_error(job_id, None, exc, file=path)
                continue
            self.send(
                wire.INDEX, {"job": job_id, "file": file_index, "videos": [list(v) for v in videos]}
            )

    def run_unit(self, job: _Job, fields: dict[str, Any]) -> None:
        """Produce a unit into its shared-memory slot when it names one this worker can map
        (then DATA carries no array), else into a new array sent with DATA."""
        rows = fields["rows"]
        began = time.monotonic()
        try:
            target = self.slot_target(job, fields["slot"])
            if target is not None:
                job.maker.produce(rows, *target)
                clips = []
                nbytes = len(rows) * target[0][0].nbytes  # one row of the batch per clip
            else:
                clips = [("frames", job.maker.produce(rows))]
                nbytes = clips[0][1].nbytes
        except Exception as exc:  # any failure must reach the trainer, with its traceback
            self.send_error(job.id, fields["unit"], exc)
            return
        self.counters.unit(len(rows), nbytes, time.monotonic() - began)
        self.send(
            wire.DATA,
            {
                "job": job.id,
                "unit": fields["unit"],
                "batch": fields["batch"],
                "samples": [row[0] for row in rows],
            },
            clips,
        )

    def slot_target(self, job: _Job, slot: Any) -> tuple[np.ndarray, list[int]] | None:
        """The batch array and row positions of a unit's slot, or None: no slot, or one this
        worker cannot map (logged once; its rows then travel over the socket)."""
        height, width = job.spec.frame_shape
        if slot is None or height is None or width is None or self.slots_failed:
            return None
        try:
            pid, fd, batch_rows, positions = parse_slot(slot)
            shape = (batch_rows, job.spec.clip_len, height, width, 3)
            return job.slots.batch_array(pid, fd, shape, job.id), positions
        except SlotError as exc:
            _log.warning("worker %s: %s; sending rows over the socket", self.worker_id, exc)
            self.slots_failed = True
            return None

    def start_source(self, fields: dict[str, Any]) -> None:
        """A source job (the user's code, ``h5feed.producer.sources``): the first SOURCE loads
        it and answers SOURCE_INFO; the second gives the element spec."""
        job_id = fields["job"]
        try:
            if isinstance(self.job, SourceJob) and self.job.id == job_id:
                self.job.set_spec(fields["spec"])
                return
            if self.job is not None:
                self.job.close()
                self.job = None
            self.counters.add("jobs")
            self.job = SourceJob(job_id, fields, local=not self.persistent)
            if fields["spec"] is not None:  # known already: no probe needed
                self.job.set_spec(fields["spec"])
            info = self.job.info()
        except Exception as exc:  # the user's code: any failure must reach the trainer
            self.send_error(job_id, None, exc)
            return
        self.send(wire.SOURCE_INFO, info)

    def run_source_unit(self, job: SourceJob, fields: dict[str, Any]) -> None:
        began = time.monotonic()
        try:
            data, arrays = job.produce(fields)
        except Exception as exc:  # any failure must reach the trainer, with its traceback
            self.send_error(job.id, fields["unit"], exc)
            return
        nbytes = sum(array.nbytes for _name, array in arrays)
        self.counters.unit(len(data["samples"]), nbytes, time.monotonic() - began)
        self.send(wire.DATA, data, arrays)

    def send_error(
        self, job_id: str, unit: int | None, exc: BaseException, file: str | None = None
    ) -> None:
        data_error = exc if isinstance(exc, DataError) else None
        self.counters.add("errors")
        self.send(
            wire.ERROR,
            {
                "job": job_id,
                "unit": unit,
                "type": type(exc).__name__,
                "message": str(exc),
                "traceback": "".join(traceback.format_exception(exc)),
                "file": data_error.file if data_error else file,
                "video": data_error.video if data_error else None,
                "frame": data_error.frame if data_error else None,
            },
        )


def _curve_keys(key: str | None, server_key: str | None) -> tuple[KeyPair, bytes] | None:
    """CURVE keys from files (a producer service) or from the environment (local workers of
    a consumer that uses CURVE); None without keys."""
    if key is not None or server_key is not None:
        if key is None or server_key is None:
            raise SystemExit("CURVE needs both --key and --server-key")
        return KeyPair.load(key), load_public(server_key)
    public, secret = os.environ.get(CURVE_ENV_PUBLIC), os.environ.get(CURVE_ENV_SECRET)
    server = os.environ.get(CURVE_ENV_SERVER)
    if public and secret and server:
        return KeyPair(public.encode(), secret.encode()), server.encode()
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m h5feed.producer.worker",
        description="One h5feed worker process (started by the consumer for local workers).",
    )
    parser.add_argument(
        "--connect", required=True, help="the consumer's address, e.g. ipc:///tmp/x"
    )
    parser.add_argument(
        "--worker-id", required=True, help="this worker's name, unique per consumer"
    )
    parser.add_argument(
        "--parent-pid", type=int, default=None, help="exit when this process is gone"
    )
    parser.add_argument(
        "--data-root", default=None, help="relative file paths of a job resolve under this"
    )
    parser.add_argument(
        "--cache-dir",
        default=None,
        help="index cache of this host (default: the directory the consumer names)",
    )
    parser.add_argument("--key", default=None, help="CURVE: this worker's .key_secret file")
    parser.add_argument("--server-key", default=None, help="CURVE: the consumer's public .key file")
    parser.add_argument(
        "--persistent",
        action="store_true",
        help="outlive an iteration's end (BYE) and wait for the next job (producer service)",
    )
    parser.add_argument(
        "--stats-file", default=None, help="keep writing this worker's counters here (JSON)"
    )
    args = parser.parse_args(argv)
    host = socket.gethostname()
    logging.basicConfig(
        level=os.environ.get("H5FEED_LOG_LEVEL", "WARNING"),
        format=f"%(asctime)s %(levelname)s [worker {args.worker_id} host {host} pid %(process)d] "
        "%(message)s",
    )
    # Ctrl-C in a terminal goes to the whole process group; the trainer handles it and stops
    # its workers, so a worker must not die mid-unit with a KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker = Worker(
        args.connect,
        args.worker_id,
        args.parent_pid,
        args.data_root,
        args.persistent,
        args.cache_dir,
        _curve_keys(args.key, args.server_key),
        args.stats_file,
    )
    return run_until_stopped(worker)


def run_until_stopped(worker: Worker) -> int:
    """Run ``worker``'s event loop; SIGTERM makes it leave after the message in hand (it
    says BYE, so its units go to others). Returns its exit code."""

    def on_sigterm(signum: int, frame: object) -> None:
        worker.stopping = True

    signal.signal(signal.SIGTERM, on_sigterm)
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
