"""The worker's event loop: one DEALER socket, typed messages in, typed messages out.

:class:`Worker` says HELLO, then answers what the consumer sends, in the order received: a
job's start message (JOB: an :class:`~h5feed.producer.worker.hdf5_job.Hdf5Job`, answered with
INDEX_BATCHes of its files' videos; SOURCE: a :class:`~h5feed.producer.sources.SourceJob`,
answered with SOURCE_INFO), its units (UNIT; ITEMS and PULL) as DATA, CHECK, PING, BYE. It is
the socket and the send policy only: every job is driven through one protocol
(:mod:`h5feed.producer.worker.job`; the kinds in :mod:`h5feed.producer.worker.kinds`), never
asked which kind it is. Any failure of a job or unit is sent back as ERROR and the worker
carries on: the consumer decides. The command line is in :mod:`h5feed.producer.worker.process`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import socket
import time
from collections.abc import Sequence
from typing import Any

import zmq

from h5feed.common.errors import ProtocolError, VersionMismatchError
from h5feed.common.protocol import messages
from h5feed.common.protocol.handshake import first_hello
from h5feed.common.protocol.versions import SPOKEN
from h5feed.common.trust.curve import KeyPair
from h5feed.common.version import __version__
from h5feed.common.worker_settings import WorkerSettings
from h5feed.producer.files.index_cache import MemoryIndex
from h5feed.producer.files.open_files import OpenFiles
from h5feed.producer.worker.connection import Connection, encode_within
from h5feed.producer.worker.job import Job, JobContext
from h5feed.producer.worker.kinds import KINDS
from h5feed.producer.worker.leaving import Leave, Leaving
from h5feed.producer.worker.stats import WorkerCounters
from h5feed.producer.worker.waiting import Waiting

_POLL_MS = 200
# A persistent worker without a job says hello this often, so a consumer that starts (or
# restarts) after it finds it within a second.
_HELLO_EVERY_S = 1.0
_CLOSE_LINGER_MS = 2000
#: How long a stopping worker retries its BYE while the consumer takes nothing.
_BYE_RETRY_S = 1.0
_log = logging.getLogger("h5feed.worker")
#: ERROR types that are refusals of the worker's policies (code by name, data root): counted
#: in ``refused`` and logged, besides ``errors``.
_REFUSALS = ("CodeRefused", "CodeVersionRefused", "PathRefused", "LimitRefused")


class Worker:
    """The worker's event loop over one DEALER socket.

    Guarantees:

    1. It never blocks longer than ``connection.SEND_RETRY_MS`` or ``_POLL_MS`` without
       checking whether it must leave, so it exits within about a second of its parent
       dying or a SIGTERM, even when the consumer's socket is gone and a send could wait
       forever — except that, asked to stop, it tries to deliver a unit it made for up to
       ``stop_wait_s`` (guarantee 5).
    2. Every unit of the job in hand is answered, with DATA or ERROR, in the order received;
       a unit of another job (one that is over) is dropped: nobody waits for it. A job that
       reads ahead is shown the units already waiting in the socket before it makes one (at
       most ``waiting.MAX_WAITING`` messages taken early); they are answered after it, in order.
    3. A malformed message is logged and dropped; a peer of a protocol version it does not
       speak ends the worker with exit code 2 (so does a BYE that refuses it). It says HELLO
       in the oldest version it speaks, naming its range, and then speaks the version the
       consumer last spoke to it (h5feed.common.protocol.versions).
    4. Single-threaded: a SIGTERM handler may only call :meth:`request_stop`.
    5. Asked to stop (:meth:`request_stop`, SIGTERM), it takes no new message: the unit in
       hand is finished and its answer sent, then BYE, which hands every unit it was sent
       and has not started back to the consumer (the consumer sends them again to others;
       they were never made here). A unit's DATA the consumer cannot take yet is retried
       until ``stop_wait_s`` after the request (any other message is not waited for: so a
       worker that never reached a consumer leaves at once); past it the worker leaves
       without a BYE, so the consumer counts what it held as lost (made again), never as
       handed back. Exit code 0.
    6. User code is imported by name only if ``settings.code`` allows it (default: nothing);
       files are confined to ``data_root`` when it is set. A refusal is sent as ERROR,
       logged (WARNING) and counted in ``refused``.
    7. A broken connection (:mod:`h5feed.producer.worker.connection`) is seen between two
       messages: the worker starts over (:meth:`start_over`) and never answers a message
       of the old session, so the consumer waits for nothing that was lost on the way.
    """

    def __init__(
        self,
        settings: WorkerSettings,
        curve: tuple[KeyPair, bytes] | None = None,
        kinds: Sequence[type[Job[Any, Any]]] = KINDS,
    ) -> None:
        """``settings``: the worker's command line (:mod:`h5feed.common.worker_settings`);
        ``curve``: its CURVE key pair and the consumer's public key, loaded from
        ``settings.network``'s files or the environment by the caller (None: no CURVE);
        ``kinds``: the kinds of job it runs, by the start message each answers."""
        self.settings = settings
        process, data = settings.process, settings.data
        self.worker_id = worker_id = process.worker_id  # in every log line
        self.host = socket.gethostname()  # said in every HELLO
        self.counters = WorkerCounters(process.stats_file, worker_id)  # read by `h5feed produce`
        self.exit_code = 0
        self.protocol = SPOKEN.lowest  # the version to send in: the consumer's last
        self._last_hello = 0.0
        self.nonce = secrets.token_hex(16)  # this process's, for every HELLO it says
        self._last_heard = 0.0
        self.context = zmq.Context()
        self.max_message_bytes = settings.network.max_message_bytes
        self.connection = Connection(  # a DEALER that tells when its connection broke
            self.context,
            settings.network.connect,
            worker_id.encode(),
            self.max_message_bytes,
            curve,
        )
        self.socket = self.connection.socket
        #: The kind of job each start message opens, and every unit message a kind answers.
        self.kinds = {kind.STARTS: kind for kind in kinds}
        self.units = frozenset(unit for kind in kinds for unit in kind.UNITS)
        self.job: Job[Any, Any] | None = None
        self.waiting = Waiting()  # messages taken early, for a job that reads ahead
        # A persistent worker keeps the indexes it read across jobs (the next iteration of the
        # same dataset is answered from memory: index_cache.MemoryIndex), and its open files.
        persistent = process.persistent
        self.jobs_share = JobContext(
            settings,
            self.counters,
            MemoryIndex() if persistent else None,
            OpenFiles(data.max_open_files, data.data_root) if persistent else None,
        )
        self.leaving = Leaving(process)  # when it leaves (h5feed.producer.worker.leaving)

    @property
    def persistent(self) -> bool:
        """A service worker's (``--persistent``): it outlives an iteration's end."""
        return self.settings.process.persistent

    @property
    def parent_pid(self) -> int | None:
        return self.settings.process.parent_pid

    @property
    def memory(self) -> MemoryIndex | None:
        """A persistent worker's indexes, kept across its jobs (None: not persistent)."""
        return self.jobs_share.memory

    @property
    def files(self) -> OpenFiles | None:
        """A persistent worker's open files, kept across its jobs (None: not persistent)."""
        return self.jobs_share.files

    # -- sending -----------------------------------------------------------------------------

    def send(self, message: messages.Message, version: int = 0) -> None:
        """Send ``message`` (arrays without a copy), re-checking whether to leave while the
        consumer cannot take it. Counts every ERROR sent."""
        version = version or self.protocol
        message, frames = encode_within(message, version, self.max_message_bytes)
        if isinstance(message, messages.Error):
            self.counters.add("errors")
            if message.type in _REFUSALS:
                self.counters.add("refused")
                _log.warning("worker %s: refused: %s", self.worker_id, message.message)
        while True:  # `frames` are those of `message` (encoded once: this is the hot path)
            try:
                # A multipart send is all or nothing: EAGAIN can only come before the first part.
                self.socket.send_multipart(frames, copy=False)
                return
            except zmq.Again:
                self.leaving.check_send(isinstance(message, messages.Data))

    def send_error(self, job_id: str, unit: int | None, exc: BaseException) -> None:
        self.send(messages.Error.of(job_id, unit, exc))

    def hello(self) -> None:
        """Say HELLO in the oldest version spoken, naming the range (the consumer chooses)."""
        self._last_hello = time.monotonic()
        # In the oldest version, whoever listens; what is sent after it stays in the version
        # the consumer chose (a periodic hello changes nothing of that).
        hello, version = first_hello(
            self.worker_id, os.getpid(), self.host, __version__, self.nonce
        )
        self.send(hello, version)

    def say_bye(self) -> None:
        """Tell the consumer this worker leaves: the units it was sent and did not start are
        handed back (guarantee 5). Asked to stop, it retries for up to ``_BYE_RETRY_S`` within
        the stop wait (a consumer gone meanwhile sees the connection close instead); else
        (its parent is gone) it tries once."""
        leaving = self.leaving
        if self.job is None or self.exit_code != 0 or leaving.undelivered:
            return
        frames = messages.encode(messages.Bye("stopping (SIGTERM)"), self.protocol)
        stop = leaving.deadline
        deadline = 0.0 if stop is None else min(stop, time.monotonic() + _BYE_RETRY_S)
        while True:
            try:
                self.socket.send_multipart(frames, zmq.NOBLOCK if not deadline else 0)
                if stop is not None:
                    _log.info(
                        "worker %s: asked to stop: sent the %d unit(s) it had started, then "
                        "BYE (the units it did not start go back to the consumer)",
                        self.worker_id, leaving.sent_after_stop,
                    )  # fmt: skip
                return
            except zmq.Again:
                if not deadline or leaving.parent_gone():
                    return  # nobody to tell (its parent, and so its consumer, is gone)
                if time.monotonic() >= deadline:
                    _log.warning("worker %s: no BYE sent: the consumer took none", self.worker_id)
                    return
            except zmq.ZMQError:  # the socket cannot send at all: nothing to hand over
                return

    # -- the loop ----------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop after the unit in hand (guarantee 5; :meth:`Leaving.request`). Safe in a
        signal handler: it only sets attributes."""
        self.leaving.request()

    @property
    def stopping(self) -> bool:
        """Whether it takes no new message (asked to stop, or told by a BYE)."""
        return self.leaving.stopping

    def should_say_hello(self, now: float) -> bool:
        """Without a job, hello every second until a consumer answers. A persistent worker
        also says hello after a second of silence while it holds a job: if its consumer was
        killed (no BYE), a restarted one finds it; a live one ignores a known worker's hello."""
        quiet = now - max(self._last_hello, self._last_heard) > _HELLO_EVERY_S
        if self.job is None:
            return now - self._last_hello > _HELLO_EVERY_S
        return self.persistent and quiet

    def run(self) -> int:
        """The event loop; returns the exit code (0, or 2 when refused by the consumer)."""
        try:
            self.hello()
            while True:
                self.leaving.check()
                self.counters.maybe_write()
                if self.should_say_hello(time.monotonic()):
                    self.hello()
                if self.connection.broke():  # what was on the way is lost: start over
                    self.start_over()
                if self.waiting:  # taken early for a job that reads ahead: in order
                    frames, said = self.waiting.next()
                elif not self.socket.poll(_POLL_MS):
                    continue
                else:
                    frames, said = self.socket.recv_multipart(copy=False), None
                    self._last_heard = time.monotonic()
                    self.connection.heard = True
                try:
                    message, self.protocol = said or messages.decode_said(frames)
                except VersionMismatchError as exc:
                    _log.error("worker %s: refused by the consumer: %s", self.worker_id, exc)
                    self.exit_code = 2
                    raise Leave from exc
                except ProtocolError as exc:
                    _log.warning("worker %s: dropped malformed message: %s", self.worker_id, exc)
                    continue
                self.handle(message)
        except Leave:
            _log.debug("worker %s: leaving", self.worker_id)
            self.say_bye()
        finally:
            self.end_job()
            if self.files is not None:
                self.files.close()
            self.counters.write()
            self.connection.close(_CLOSE_LINGER_MS)  # flush the last DATA and the BYE
            self.context.term()
        return self.exit_code

    def handle(self, message: messages.Message) -> None:
        kind = type(message)
        if kind in self.units:  # the hot path first: one lookup per unit
            self.on_unit(message)  # type: ignore[arg-type]  # a kind's UNITS: units
        elif kind in self.kinds:
            self.start(message)
        else:
            match message:
                case messages.Bye():
                    self.on_bye(message)
                case messages.Check():
                    self.on_check(message)
                case messages.Ping():
                    pass  # the consumer checks the connection; hearing it is all (_last_heard)
                case _:
                    _log.warning("worker %s: unexpected %s message", self.worker_id, kind.KIND)

    def on_bye(self, bye: messages.Bye) -> None:
        """Leave, unless persistent: then drop the job and wait for the next one. A BYE that
        refuses this worker (another protocol version) always ends it, with exit code 2."""
        if bye.refused:
            _log.error("worker %s: %s", self.worker_id, bye.reason)
            self.exit_code = 2
        if bye.refused or not self.persistent:
            self.leaving.stopping = True
        else:  # the iteration is over (or this worker was declared lost): wait for the next
            self.end_job()  # job, and say so at once (a consumer that keeps its workers
            # across iterations starts the next one) as a new process would: a consumer that
            # declared this one lost (and gave its work to others) takes its hello only with
            # a new nonce.
            self.nonce = secrets.token_hex(16)
            self.hello()

    def start_over(self) -> None:
        """Its connection to the consumer broke (:mod:`h5feed.producer.worker.connection`):
        a new socket, without the old one's messages or the units taken early, and a HELLO
        with a new nonce, so the consumer hands the units of the old session to others. The
        job and its open files are kept: the consumer's JOB for the new session adds to it."""
        _log.warning(
            "worker %s: its connection to the consumer broke (a long pause, a network cut): "
            "it starts over as a new session; the units it held go to others", self.worker_id
        )  # fmt: skip
        self.counters.add("reconnects")
        self.socket = self.connection.renew()
        self.waiting = Waiting()
        self.nonce = secrets.token_hex(16)
        self.hello()

    def end_job(self) -> None:
        if self.job is not None:
            self.job.close()
            self.job = None

    # -- jobs (h5feed.producer.worker.job: the loop never asks which kind it holds) ----------

    def start(self, start: Any) -> None:
        """A start message (JOB, SOURCE): of the job in hand, it adds to it; else the job in
        hand is closed and the message's kind opens a new one. Its answers are sent as they
        come; a failure is sent as ERROR (unit None): opening, no job is held."""
        job, job_id = self.job, start.job
        if job is None or job.id != job_id or job.STARTS is not type(start):
            self.end_job()
            self.counters.add("jobs")
            try:
                job = self.job = self.kinds[type(start)].open(start, self.jobs_share)
            except Exception as exc:  # a bad spec, the user's code: tell the trainer
                self.send_error(job_id, None, exc)
                return
        answers = job.take(start)
        while True:
            try:  # the answers are made one at a time (a job of many files: many batches)
                answer = next(answers, None)
            except Exception as exc:  # the user's code: any failure must reach the trainer
                self.send_error(job_id, None, exc)
                return
            if answer is None:
                return
            self.send(answer)

    def on_unit(self, unit: messages.Unit | messages.Items | messages.Pull) -> None:
        """Answer a unit of the job in hand with DATA (or ERROR); a unit of a job that is
        over is dropped (guarantee 2)."""
        job = self.job
        if job is None or unit.job != job.id:
            return  # a unit of a job that is over: nobody waits for it
        if type(unit) not in job.UNITS:  # the consumer waits for it: a clear error, no timeout
            error = ProtocolError(f"a {unit.KIND} message for {job.DESCRIBED} job")
            self.send_error(job.id, unit.unit, error)
            return
        if job.reads_ahead:
            held = len(self.waiting)
            job.expect(self.waiting.take(self.socket, self.units, job.id))
            if len(self.waiting) > held:
                self._last_heard = time.monotonic()
        began = time.monotonic()
        try:
            data, nbytes = job.produce(unit)
        except Exception as exc:  # any failure must reach the trainer, with its traceback
            self.send_error(job.id, unit.unit, exc)
            return
        busy = time.monotonic() - began
        self.counters.unit(len(data.samples), nbytes, busy)
        self.counters.storage(data.storage)
        self.send(dataclasses.replace(data, busy_s=busy))
        self.leaving.sent_after_stop += self.leaving.deadline is not None

    def on_check(self, check: messages.Check) -> None:
        """A CHECK (a source job's digests at an epoch's start), answered by the job in hand;
        one of a job it does not hold, or of a kind without checks, is logged and dropped."""
        job = self.job
        if job is not None and job.id == check.job:
            try:
                answer = job.check(check)
            except Exception as exc:  # the user's code: any failure must reach the trainer
                self.send_error(check.job, None, exc)
                return
            if answer is not None:
                self.send(answer)
                return
        _log.warning("worker %s: a CHECK of job %s it does not hold", self.worker_id, check.job)
