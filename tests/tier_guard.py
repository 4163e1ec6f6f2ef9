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
            f" add that name to the {tier.upper()}_NAMES of tests/tiers.py so that every test"
            f" using it is tiered `{tier}` without a mark."
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
    """Refuses processes, sockets, ZeroMQ contexts and Docker until the block ends."""
    patches: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, replacement: Any) -> None:
        # A class's own attribute as stored (a classmethod stays one), else what it inherits
        # (deleted again afterwards).
        original = vars(owner).get(name, _INHERITED) if isinstance(owner, type) else None
        if original is None:
            original = getattr(owner, name, None)
        if original is not None:
            patches.append((owner, name, original))
            setattr(owner, name, replacement)

    def popen_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        tier = "containers" if _is_docker(args) else "processes"
        refusals.refuse(f"subprocess.Popen({_command_of(args)})", tier)

    def refusing(what: str) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            refusals.refuse(what)

        return refuse

    def process_start(self: multiprocessing.process.BaseProcess) -> None:
        refusals.refuse(f"multiprocessing Process.start() ({self.name})")

    def socket_init(self: socket.socket, *args: Any, **kwargs: Any) -> None:
        refusals.refuse(f"socket.socket{args!r}")

    def context_init(self: zmq.Context[Any], *args: Any, **kwargs: Any) -> None:
        refusals.refuse("zmq.Context()")

    def context_instance(cls: type[zmq.Context[Any]], *args: Any, **kwargs: Any) -> None:
        # Refused even where another test made the instance already: the same in any order.
        refusals.refuse("zmq.Context.instance()")

    patch(subprocess.Popen, "__init__", popen_init)
    patch(_posixsubprocess, "fork_exec", refusing("_posixsubprocess.fork_exec (a child process)"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        patch(os, name, refusing(f"os.{name}()"))
    patch(multiprocessing.process.BaseProcess, "start", process_start)
    patch(socket.socket, "__init__", socket_init)
    patch(zmq.Context, "__init__", context_init)
    patch(zmq.Context, "instance", classmethod(context_instance))
    try:
        yield
    finally:
        for owner, name, original in reversed(patches):
            if original is _INHERITED:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
