"""The guard that keeps the in-process tier honest: while it is on, starting a process, making a
socket or a ZeroMQ context, or calling Docker fails the test, saying which tier to mark it.

It patches the few calls every such thing goes through, in this process only, for the length
of one test (tests/conftest.py turns it on around each test of the ``inprocess`` tier, never
around collection or another tier's test: pytest, xdist, hypothesis and the imports of
TensorFlow or torch may make what they like before a test starts):

- processes: :class:`subprocess.Popen` (``run``, ``check_output``, Docker's command line),
  ``_posixsubprocess.fork_exec`` (what ``subprocess`` and ``multiprocessing`` fork with),
  ``os.fork``, ``os.forkpty``, ``os.posix_spawn``/``posix_spawnp``, ``os.system`` and
  ``multiprocessing``'s ``Process.start`` (pools and ``ProcessPoolExecutor`` included);
- sockets: every :class:`socket.socket` made (``create_connection``, ``socketpair``, HTTP
  servers and clients: all make one);
- ZeroMQ: every :class:`zmq.Context` (``zmq.asyncio.Context`` too) and ``Context.instance()``
  (refused even where the instance exists already, so a test fails in any order).

A call the guard refuses raises ``pytest.fail`` (a ``BaseException``: an ``except Exception``
in the code under test does not swallow it), and is also kept, so that a refusal in another
thread, or one caught by an ``except BaseException``, still fails the test when the guard
comes off. Threads, pipes and files stay allowed.
"""

from __future__ import annotations

import _posixsubprocess
import contextlib
import multiprocessing.process
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

#: Stands for an attribute a class inherits (patched on the class, deleted afterwards).
_INHERITED = object()


class Refusals:
    """What the guard refused during one test (first refusal first)."""

    def __init__(self, test: str, why_inprocess: str) -> None:
        self.test = test
        self.why_inprocess = why_inprocess
        self.refused: list[str] = []

    def message(self, what: str, tier: str) -> str:
        return (
            f"tier guard: {self.test} is in the `inprocess` tier ({self.why_inprocess}), where"
            f" nothing may start a process, make a socket or a ZeroMQ context, or call Docker;"
            f" it did: {what}. Mark the test `@pytest.mark.{tier}` (or its module:"
            f" `pytestmark = pytest.mark.{tier}`), or, if a fixture or helper of tests/ did it,"
            f" add that name to the {tier.upper()}_NAMES of tests/support/tiers.py so that every"
            f" test using it is tiered `{tier}` without a mark."
        )

    def refuse(self, what: str, tier: str = "processes") -> None:
        text = self.message(what, tier)
        self.refused.append(text)
        pytest.fail(text)


def _command_of(args: Any) -> str:
    if isinstance(args, (str, bytes)):
        return repr(args)[:200]
    try:
        return repr([os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else a for a in args])[
            :200
        ]
    except TypeError:
        return repr(args)[:200]


def _is_docker(args: Any) -> bool:
    first = args if isinstance(args, (str, bytes)) else next(iter(args), "")
    name = os.path.basename(os.fsdecode(first).split()[0]) if first else ""
    return name in ("docker", "dockerd", "docker-compose")


@contextlib.contextmanager
def guarded(refusals: Refusals) -> Iterator[None]:
    """Refuses processes, sockets, ZeroMQ contexts and Docker until the block ends, in the
    thread that enters it and in every thread started meanwhile. Threads older than the block
    (another test's leftovers in this pytest worker: a server's accept loop, a pool's
    restarter; TensorFlow's) go on as before: a test fails for what it does, not for what ran
    before it."""
    # Kept as the thread objects, not their idents: an ident is reused by a thread started
    # after an older one ended, and that new thread must be refused.
    older = set(threading.enumerate()) - {threading.current_thread()}
    patches: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, refused: Callable[..., tuple[str, str]]) -> None:
        """``owner.name`` refused (``refused(*args)`` says what and which tier) but in older
        threads, where it runs as it was."""
        stored = vars(owner).get(name, _INHERITED) if isinstance(owner, type) else None
        original = getattr(owner, name)  # bound to the class where a classmethod
        method = isinstance(stored, classmethod)

        def guard(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() in older:
                return stored.__func__(*args, **kwargs) if method else original(*args, **kwargs)
            refusals.refuse(*refused(*args, **kwargs))

        patches.append((owner, name, getattr(owner, name) if stored is None else stored))
        setattr(owner, name, classmethod(guard) if method else guard)

    def popen(self: Any, args: Any, *rest: Any, **kwargs: Any) -> tuple[str, str]:
        tier = "containers" if _is_docker(args) else "processes"
        return f"subprocess.Popen({_command_of(args)})", tier

    def called(what: str) -> Callable[..., tuple[str, str]]:
        return lambda *args, **kwargs: (what, "processes")

    patch(subprocess.Popen, "__init__", popen)
    patch(_posixsubprocess, "fork_exec", called("_posixsubprocess.fork_exec (a child process)"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            patch(os, name, called(f"os.{name}()"))
    patch(
        multiprocessing.process.BaseProcess,
        "start",
        lambda process: (f"multiprocessing Process.start() ({process.name})", "processes"),
    )
    patch(socket.socket, "__init__", lambda _, *args, **kw: (f"socket.socket{args!r}", "processes"))
    patch(zmq.Context, "__init__", called("zmq.Context()"))
    # Refused even where another test made the instance already: the same in any order.
    patch(zmq.Context, "instance", called("zmq.Context.instance()"))
    try:
        yield
    finally:
        for owner, name, original in reversed(patches):
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
