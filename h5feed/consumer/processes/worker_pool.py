"""Local workers kept across the iterations of one dataset, with the socket they connect to.

Every iteration runs on a :class:`WorkerPool` through a :class:`Lease`: its feed's kept one,
or one of its own (``persistent=False``: a BYE ends its workers; closed with the iteration,
when the feed keeps no workers, ``listen``, or lent its pool to another iteration).

Why: every ``model.fit`` epoch of an ``epochs=1`` dataset and every validation pass is a new
iteration; starting workers for each one costs their start-up and their index (seconds at
10,000 files). A :class:`WorkerPool` belongs to one :class:`~h5feed.consumer.feed.Feed`; each
iteration borrows it (:meth:`PoolSlot.take`), runs its own job on it (a new JOB, a new session,
plan and loop), and gives it back (:meth:`PoolSlot.give_back`). The workers run with
``--persistent``: a BYE ends their job, not their process, and they keep their files' indexes
in memory (``h5feed.producer.files.index_cache.MemoryIndex``), so the next JOB is answered without a
disk read.

Guarantees:

1. One iteration at a time uses a pool (the ROUTER socket is used by one thread at a time);
   an iteration that starts while another holds it gets its own workers, as before.
2. A pool is reused only after an iteration that ended cleanly (exhausted, or closed without
   an error) and whose loop thread has ended; after a failure its workers are stopped and the
   next iteration starts fresh ones.
3. A worker that exited between iterations is replaced when the next iteration takes the
   pool, under the rule of every local worker (``LocalWorkers.replace``): a process that
   returned a DATA part in an earlier iteration is replaced, never raised; only a crash loop
   (past ``max_restarts`` deaths a minute of processes that returned nothing) raises
   :class:`WorkerDiedError` naming it, and the pool is closed. One that exits just after is
   replaced by that iteration's recovery, like any local worker (docs/guarantees.md).
4. The workers keep every guarantee of :mod:`h5feed.consumer.processes.local_workers` (they
   die with the trainer, ignore Ctrl-C); :meth:`WorkerPool.close` stops them within about 2 s.
   It runs when the feed is closed or garbage collected, and at interpreter exit.
5. An ended iteration's shared-memory slots stay open while a kept worker may still make one
   of its units: an iteration left early (``break``) leaves units queued at the workers, each
   naming a slot (``/proc/<trainer>/fd/<n>``). Closed at once, such a unit would find its slot
   gone (``No such file or directory``) or its descriptor number taken by another file, and
   send its rows over the socket. So the iteration's scheduler is retired here
   (:meth:`WorkerPool.retire`) and closed once the workers took a later job (they answer a
   JOB after every unit queued before it: :meth:`WorkerPool.settle`, at the next iteration's
   first batch), or after they are stopped (:meth:`WorkerPool.close`).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import threading
import uuid
import weakref
from typing import Protocol

from h5feed.common.errors import WorkerDiedError
from h5feed.common.system.cpus import available_cpus
from h5feed.common.system.logs import with_ids
from h5feed.common.trust.curve import KeyPair, load_public
from h5feed.common.trust.exposure import is_local_address
from h5feed.consumer.config.endpoints import parse_endpoint
from h5feed.consumer.config.groups import FeedOptions
from h5feed.consumer.core.router import Router
from h5feed.consumer.core.session import describe_exit
from h5feed.consumer.core.waker import Waker
from h5feed.consumer.processes.fleet_announcer import Announcer
from h5feed.consumer.processes.local_workers import LocalWorkers, local_worker

_log = with_ids(logging.getLogger("h5feed.consumer"), "consumer")
#: How long an iteration's own workers get to leave after the loop's BYE before SIGTERM.
_BYE_GRACE_S = 2.0


class Closable(Protocol):
    """What the pool keeps of an ended iteration: its scheduler (its slots)."""

    def close(self) -> None: ...


class WorkerPool:
    """A bound ROUTER socket, its waker, and local workers started with ``--persistent``
    (``persistent=False``: one iteration's own workers, which a BYE ends: the pool of an
    iteration that could not take its feed's, closed when that iteration ends)."""

    def __init__(
        self,
        options: FeedOptions,
        data_root: str | None,
        persistent: bool = True,
        prefix: str = "p",
    ) -> None:
        self.tmpdir = tempfile.mkdtemp(prefix="h5feed-")
        self.address = f"ipc://{self.tmpdir}/feed.sock"
        with contextlib.ExitStack() as undo:  # what is made so far goes if a step fails
            undo.callback(shutil.rmtree, self.tmpdir, ignore_errors=True)
            self.waker = Waker()
            undo.callback(self.waker.close)
            listen = [options.network.listen] if options.network.listen else []
            if listen and options.network.curve_key is None and not is_local_address(listen[0]):
                # Only insecure=True gets here (FeedOptions refuses the rest); the feed
                # already warned (InsecureWarning), and this line puts it in the logs.
                _log.warning(
                    "h5feed listens on %s without CURVE keys (insecure=True): any host that "
                    "reaches it can join as a producer",
                    listen[0],
                )
            self.router = Router(options, [self.address, *listen], self.waker.fileno)
            undo.callback(self.router.close)
            #: ``fleet=``: says ATTACH to the shared fleet while this pool listens.
            self.announcer = announce(options, self.router.last_endpoint) if listen else None
            if self.announcer is not None:
                undo.callback(self.announcer.close)
            settings = local_worker(
                self.address,
                f"{prefix}{uuid.uuid4().hex[:6]}",
                data_root=data_root,
                max_message_bytes=options.network.max_message_bytes,
                max_open_files=options.processes.max_open_files,
                persistent=persistent,
            )
            self.workers = LocalWorkers(
                options.processes.start_workers,
                settings,
                keys=self.router.local_keys,
                server_public=self.router.server_public,
                max_restarts=options.processes.max_restarts,
                # "auto": names for every worker it may grow to (the session knows its
                # local workers by name)
                reserve=available_cpus() if options.processes.auto else 0,
            )
            undo.pop_all()
        self._persistent = persistent
        self._closed = False
        self._retired: list[Closable] = []  # schedulers of ended iterations, slots open
        self._retired_lock = threading.Lock()  # retire (the trainer) vs settle (tf.data)

    def retire(self, scheduler: Closable) -> None:
        """An ended iteration's scheduler: closed by :meth:`settle` or :meth:`close`."""
        with self._retired_lock:
            self._retired.append(scheduler)
        if self._closed:  # nothing will settle it any more
            self._close_retired()

    def settle(self) -> None:
        """The workers took a new job (the first batch of an iteration arrived): every unit
        of the jobs before is behind them, so their schedulers close now."""
        self._close_retired()

    def _close_retired(self) -> None:
        with self._retired_lock:
            retired, self._retired = self._retired, []
        for scheduler in retired:
            scheduler.close()  # batches already handed out keep their memory

    def check_alive(self) -> None:
        """Replace each worker that exited since the last iteration (WorkerDiedError past
        ``max_restarts`` crash-loop deaths)."""
        for name, pid, code in self.workers.exited():
            new = self.workers.replace(name)
            _log.warning(
                "kept worker %s (pid %d) %s between iterations: replaced by pid %d",
                name, pid, describe_exit(code), new,
            )  # fmt: skip

    def close(self, socket_in_use: bool = False) -> None:
        """Stop the workers, close the socket and remove the socket's directory; idempotent.
        ``socket_in_use``: a loop thread that did not stop may still use the socket: it is
        left to the garbage collector rather than closed under that thread."""
        if self._closed:
            return
        self._closed = True
        if self.announcer is not None:  # the fleet stops this trainer's workers
            self.announcer.close()
        # Persistent workers leave on SIGTERM, not on BYE; one iteration's own leave on BYE.
        self.workers.stop(grace_s=0 if self._persistent else _BYE_GRACE_S)
        self._close_retired()  # no worker left to make a unit naming their slots
        if not socket_in_use:
            self.router.close()
            self.waker.close()
        shutil.rmtree(self.tmpdir, ignore_errors=True)


def announce(options: FeedOptions, bound: str) -> Announcer | None:
    """The announcer of a trainer with ``fleet=``, for the port ``listen`` bound to."""
    network = options.network
    if not network.fleet_endpoints:
        return None
    keys = None
    if network.fleet_key is not None and network.curve_key is not None:
        keys = (KeyPair.load(network.curve_key), load_public(network.fleet_key))
    _, port = parse_endpoint(bound)
    return Announcer(network.fleet_endpoints, port, keys, peer_timeout_s=network.peer_timeout_s)


class Lease:
    """One iteration's hold on a pool: its feed's kept one (``slot``: given back at the end)
    or one of its own (:meth:`own`: closed at the end). Every iteration runs on one."""

    def __init__(self, pool: WorkerPool, slot: PoolSlot | None = None) -> None:
        self.pool = pool
        self.slot = slot

    @classmethod
    def own(cls, options: FeedOptions, data_root: str | None) -> Lease:
        """A pool of one iteration's own workers (its feed keeps none, or lent them to
        another iteration): a BYE ends them."""
        return cls(WorkerPool(options, data_root, persistent=False, prefix="w"))

    @property
    def kept(self) -> bool:
        """Whether the pool outlives the iteration (its socket too)."""
        return self.slot is not None

    def abandon(self) -> None:
        """The iteration could not start: its own pool is closed, a kept one given back to
        be closed (its workers may hold a half-begun job)."""
        if self.slot is not None:
            self.slot.give_back(self.pool, reusable=False)
        else:
            self.pool.close()

    def end(self, scheduler: Closable, stopped: bool, clean: bool) -> None:
        """The iteration ended (its loop told to stop: ``stopped`` when its thread ended,
        ``clean`` when without an error). Its scheduler is retired to the pool (see
        :meth:`WorkerPool.retire`). An own pool is closed, its socket left to the loop's
        thread, which closes it as it ends; a kept pool goes back to its slot, reusable when
        the loop stopped cleanly and every worker still runs (guarantee 2)."""
        self.pool.retire(scheduler)
        if self.slot is None:
            self.pool.close(socket_in_use=True)
            return
        reusable = stopped and clean and not self.pool.workers.exited()
        self.slot.give_back(self.pool, reusable, socket_in_use=not stopped)


class PoolSlot:
    """The one pool of a feed, lent to one iteration at a time (thread-safe)."""

    def __init__(self, options: FeedOptions, data_root: str | None) -> None:
        self._options, self._data_root = options, data_root
        self._lock = threading.Lock()
        self._pool: WorkerPool | None = None
        self._lent = False
        self._closed = False
        _live_slots.add(self)

    def take(self) -> Lease | None:
        """The pool for a new iteration (started now if there is none); None when another
        iteration holds it or the slot is closed. WorkerDiedError when a worker of the pool
        exited since the last iteration (the pool is closed then)."""
        with self._lock:
            if self._lent or self._closed:
                return None
            pool = self._pool
            if pool is not None:
                try:
                    pool.check_alive()
                except WorkerDiedError:
                    self._pool = None
                    pool.close()
                    raise
            else:
                pool = self._pool = WorkerPool(self._options, self._data_root)
            self._lent = True
            return Lease(pool, self)

    def give_back(self, pool: WorkerPool, reusable: bool, socket_in_use: bool = False) -> None:
        """The iteration that took ``pool`` is over: keep it for the next one if
        ``reusable``, else close it."""
        with self._lock:
            keep = reusable and not self._closed and pool is self._pool
            if pool is self._pool:
                self._lent = False
                if not keep:
                    self._pool = None
        if not keep:
            pool.close(socket_in_use)

    def close(self) -> None:
        """Close the pool, unless an iteration holds it (that one closes it when it ends)."""
        with self._lock:
            self._closed = True
            pool, lent = self._pool, self._lent
            if not lent:
                self._pool = None
        if pool is not None and not lent:
            pool.close()


# Every slot still open, so the exit hook closes their pools (see h5feed.consumer.stream).
_live_slots: weakref.WeakSet[PoolSlot] = weakref.WeakSet()


def close_all_slots() -> None:
    """At interpreter exit: stop every kept worker."""
    for slot in list(_live_slots):
        with contextlib.suppress(Exception):  # exit must go on whatever one pool does
            slot.close()
