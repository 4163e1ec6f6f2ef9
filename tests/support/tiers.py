"""Test tiers by what a test needs, found mechanically (tests/conftest.py marks every test).

Four tiers, one per test, each a marker (``pytest -m inprocess``):

- ``inprocess``: no process, socket, ZeroMQ context or Docker; runs under
  tests/support/tier_guard.py, which fails the test if it makes one (``make test-fast``);
- ``processes``: real workers and sockets (most of the suite);
- ``containers``: the Docker engine (the compose and Swarm tests);
- ``bench``: ``h5feed bench`` end to end (tests/bench/test_bench_smoke.py,
tests/bench/test_bench_socket.py).

A test's tier is, first found first:

1. declared: a tier marker on the test, its class or its module (``pytestmark``); the
   ``compose`` marker means ``containers``;
2. a fixture it uses (directly or through other fixtures) named in :data:`CONTAINERS_NAMES`
   or :data:`PROCESSES_NAMES`;
3. a name its code uses, in :data:`CONTAINERS_NAMES` or :data:`PROCESSES_NAMES`: the global
   and attribute names of the test function, of the fixtures it uses, and of every function and
   class of tests/ those reach by name (a helper that starts workers makes its callers
   ``processes``, however deep). The names are of modules (``subprocess``, ``zmq``), of the
   h5feed calls that start workers or open sockets (``batches``, ``Router``), and of tests/'
   own helpers that do (``start_replica``);
4. otherwise ``inprocess``.

What this gives up: the look is by name, not by what a call does at run time. A call of
h5feed that starts a process under a name not listed leaves its test ``inprocess``, where the
guard fails it, saying which tier to mark it or which name to add here; a name listed that a
test uses for something else moves the test to ``processes`` (slower to run, never wrong).
"""

from __future__ import annotations

import functools
import inspect
import pathlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

TIERS = ("inprocess", "processes", "containers", "bench")
TESTS = pathlib.Path(__file__).resolve().parents[1]

#: Names whose use means the Docker engine (fixtures of tests/conftest.py and
#: tests/support/swarm_helpers.py).
CONTAINERS_NAMES = frozenset({"docker_env", "swarm", "producer_image"})

#: Names whose use means real processes or sockets: a test uses one if a name its code reads
#: (or an attribute chain: ``zmq.Context.instance``) contains it, whole names from dot to dot.
PROCESSES_NAMES = frozenset(
    {
        # what the standard library and pyzmq start processes and open sockets with
        "subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
        "subprocess.check_output", "subprocess.getoutput", "subprocess.getstatusoutput",
        "os.fork", "os.forkpty", "os.system", "os.popen", "os.posix_spawn", "os.posix_spawnp",
        "pty", "multiprocessing", "ProcessPoolExecutor", "asyncio",
        "socket.socket", "socket.create_connection", "socket.create_server", "socket.socketpair",
        "socket.fromfd", "socketserver", "http.server", "http.client", "urllib.request",
        "zmq.Context", "zmq.sugar.context.Context", "zmq.asyncio",
        # h5feed's calls that start workers or open sockets (the command line too: ``main``
        # runs ``h5feed bench`` and ``h5feed produce`` in the test's process)
        "batches", "dataset", "keras_batches", "torch_batches", "distribute",
        "h5feed.consumer.core.router.Router", "h5feed.consumer.core.waker.Waker",
        "h5feed.consumer.processes", "h5feed.cli.main", "h5feed.demo.run_demo",
        "h5feed.bench.child.ContenderProcess", "h5feed.bench.runner.run_row",
        "h5feed.bench.percore.ParallelPerCore", "h5feed.bench.gpu.train.run_child",
        "h5feed.producer.worker.loop.Worker",
        # the rogue worker of tests/support/rogue_workers.py (a fixture: a real worker process)
        "rogue",
        # tools/ (tools/docs/diagrams.py runs ``dot``)
        "render_all",
    }
)  # fmt: skip


def declared(item: pytest.Item) -> str | None:
    """The tier a marker on ``item`` (or its class or module) names; the closest wins."""
    for mark in item.iter_markers():
        if mark.name in TIERS:
            return mark.name
        if mark.name == "compose":
            return "containers"
    return None


def tier_of(item: pytest.Item) -> tuple[str, str]:
    """``item``'s tier and why (for the guard's message and ``--tiers``)."""
    mark = declared(item)
    if mark is not None:
        return mark, "declared"
    fixtures = set(getattr(item, "fixturenames", ()))
    for tier, listed in (("containers", CONTAINERS_NAMES), ("processes", PROCESSES_NAMES)):
        if found := fixtures & listed:
            return tier, f"fixture {sorted(found)[0]}"
    roots, names = _uses(item)
    for tier, listed in (("containers", CONTAINERS_NAMES), ("processes", PROCESSES_NAMES)):
        if found := matching(roots, names, listed):
            return tier, f"uses {found}"
    return "inprocess", "no fixture or name of another tier"


def matching(roots: set[str], names: set[str], listed: frozenset[str]) -> str | None:
    """A listed name that code reading ``roots`` and ``names`` uses, else None.

    ``roots``: where the globals it reads come from, spelled in full (``subprocess``,
    ``h5feed.consumer.api.batches`` for ``from h5feed.consumer.api import batches``), and the
    modules it imports; ``names``: every name it reads (globals, attributes, imports). A listed
    name is used where it is a part of a root, whole names from dot to dot
    (``h5feed.consumer.processes`` of ``h5feed.consumer.processes.autoscale.Autoscaler``), or
    where a root ends with its first names and the code reads the rest (``zmq.Context``: the
    module ``zmq`` and the name ``Context``; ``h5feed.batches``: ``h5feed`` and ``batches``).
    Which attribute is read of what is not checked: more tests in ``processes``, never fewer."""
    parts: set[str] = set()
    ends: set[str] = set()
    for root in roots:
        parts |= _parts(root)
        ends |= _ends(root)
    if found := parts & listed:
        return sorted(found)[0]
    for head, rest, name in _SPLIT[listed]:
        if (head in ends or not head) and all(r in names for r in rest):
            return name
    return None


@functools.cache
def _parts(dotted: str) -> frozenset[str]:
    """Every run of whole names of ``dotted``: ``a.b.c`` -> a, b, c, a.b, b.c, a.b.c."""
    names = dotted.split(".")
    return frozenset(
        ".".join(names[i:j]) for i in range(len(names)) for j in range(i + 1, len(names) + 1)
    )


@functools.cache
def _ends(dotted: str) -> frozenset[str]:
    """The runs of whole names ``dotted`` ends with: ``a.b.c`` -> c, b.c, a.b.c."""
    names = dotted.split(".")
    return frozenset(".".join(names[i:]) for i in range(len(names)))


class _Splits(dict[frozenset[str], list[tuple[str, tuple[str, ...], str]]]):
    """Each listed name as (head, rest, name) for every way to cut it: ``zmq.Context`` as
    ("", ("zmq", "Context")) and ("zmq", ("Context",)); computed once per list."""

    def __missing__(self, listed: frozenset[str]) -> list[tuple[str, tuple[str, ...], str]]:
        cuts = []
        for name in sorted(listed):
            names = name.split(".")
            cuts += [(".".join(names[:k]), tuple(names[k:]), name) for k in range(1, len(names))]
            if len(names) == 1:
                cuts.append(("", (name,), name))
        self[listed] = cuts
        return cuts


_SPLIT = _Splits()


def _uses(item: pytest.Item) -> tuple[set[str], set[str]]:
    """The roots and names (see :func:`matching`) of ``item``'s function, its fixtures'
    functions, and every function or class of tests/ they reach by name, however deep."""
    pending: list[Any] = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for definitions in getattr(info, "name2fixturedefs", {}).values():
        pending += [definition.func for definition in definitions]
    key = tuple(id(thing) for thing in pending)
    if key in _used:
        return _used[key][1]
    roots: set[str] = set()
    names: set[str] = set()
    seen: set[int] = set()
    keep = list(pending)
    while pending:
        thing = pending.pop()
        if thing is None or id(thing) in seen:
            continue
        seen.add(id(thing))
        own_roots, own_names, reached = _look_into(thing)
        roots |= own_roots
        names |= own_names
        pending += reached
    _used[key] = (keep, (roots, names))  # the things kept: their ids stay theirs
    return roots, names


_used: dict[tuple[int, ...], tuple[list[Any], tuple[set[str], set[str]]]] = {}
_looked: dict[int, tuple[Any, frozenset[str], frozenset[str], list[Any]]] = {}


def _look_into(thing: Any) -> tuple[frozenset[str], frozenset[str], list[Any]]:
    """The roots and names (see :func:`matching`) of ``thing``'s code (a function's, or a
    class's methods'), and the functions and classes of tests/ it names."""
    if id(thing) in _looked:
        return _looked[id(thing)][1:]
    roots: set[str] = set()
    names: set[str] = set()
    reached: list[Any] = []
    for function in _functions_of(thing):
        namespace = function.__globals__
        modules = _test_modules_in(namespace)
        for code in _codes(function.__code__):
            for name in code.co_names:
                if name in names:
                    continue
                names.add(name)
                value = namespace.get(name)
                roots.add(name if name not in namespace else _spelled(name, value))
                for candidate in (value, *(getattr(m, name, None) for m in modules)):
                    candidate = _plain(candidate)
                    if isinstance(candidate, (type, types.FunctionType)) and _in_tests(candidate):
                        reached.append(candidate)
    looked = (thing, frozenset(roots), frozenset(names), reached)
    _looked[id(thing)] = looked  # ``thing`` kept: its id stays its own
    return looked[1:]


def _test_modules_in(namespace: dict[str, Any]) -> list[types.ModuleType]:
    """The modules of tests/ that ``namespace`` (a module's globals) imported."""
    key = id(namespace)
    if key not in _modules_in:
        modules = [v for v in namespace.values() if isinstance(v, types.ModuleType)]
        _modules_in[key] = (namespace, [m for m in modules if _in_tests(m)])
    return _modules_in[key][1]


_modules_in: dict[int, tuple[dict[str, Any], list[types.ModuleType]]] = {}


def _spelled(name: str, value: Any) -> str:
    """A global's name as where it comes from: a module's own name, a function's or class's
    module and qualified name (else the name itself)."""
    if isinstance(value, types.ModuleType):
        return value.__name__
    module, qualified = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualified, str) and "<" not in qualified:
        return f"{module}.{qualified}"
    return name


def _plain(thing: Any) -> Any:
    """``thing`` itself where it is decorated: what ``functools.wraps`` wrapped
    (``contextlib.contextmanager``), a hypothesis test's own function."""
    inner = getattr(getattr(thing, "hypothesis", None), "inner_test", None)
    thing = thing if inner is None else inner
    try:
        return inspect.unwrap(thing) if callable(thing) else thing
    except ValueError:  # a cycle of __wrapped__
        return thing


def _functions_of(thing: Any) -> Iterator[types.FunctionType]:
    """The plain functions of ``thing``: itself, or a class's methods and properties."""
    thing = _plain(thing)
    if isinstance(thing, types.FunctionType):
        yield thing
    elif isinstance(thing, type):
        for cls in thing.__mro__:
            if _in_tests(cls):
                for member in vars(cls).values():
                    member = getattr(member, "__func__", member)  # static and class methods
                    if isinstance(member, property):
                        member = member.fget
                    if isinstance(member, types.FunctionType):
                        yield member


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code of the functions, lambdas and comprehensions inside it."""
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _codes(constant)


#: The tiers' own machinery (the guard patches what it refuses), not looked into.
_MACHINERY = frozenset({TESTS / "support" / "tiers.py", TESTS / "support" / "tier_guard.py"})


@functools.cache
def _file_in_tests(filename: str | None) -> bool:
    if filename is None:
        return False
    path = pathlib.Path(filename).resolve()
    return path.is_relative_to(TESTS) and path not in _MACHINERY


def _in_tests(thing: Any) -> bool:
    """Whether ``thing`` (a module, function or class) was defined in a file under tests/."""
    if isinstance(thing, types.ModuleType):
        return _file_in_tests(getattr(thing, "__file__", None))
    if isinstance(thing, types.FunctionType):
        return _file_in_tests(thing.__code__.co_filename)
    module = sys.modules.get(getattr(thing, "__module__", "") or "")
    return module is not None and _in_tests(module)
