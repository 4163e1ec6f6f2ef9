"""The test tiers (tests/support/tiers.py) and the in-process tier's guard
(tests/support/tier_guard.py): every
test gets one tier; under the guard, each way to start a process, make a socket or a ZeroMQ
context, or call Docker fails the test naming the tier to mark it; off it, all work again."""

from __future__ import annotations

import ast
import multiprocessing
import multiprocessing.process
import os
import pathlib
import socket
import subprocess
import sys
import threading
import types
from collections.abc import Callable

import pytest
import tiers
import zmq
from tier_guard import Refusals, guarded

# The tests marked `inprocess` name what the guard refuses, so their tier is declared:
# nothing here starts a process or makes a socket (each attempt is refused first).

ATTEMPTS: dict[str, tuple[Callable[[], object], str]] = {
    "subprocess.run": (lambda: subprocess.run([sys.executable, "-c", "pass"]), "processes"),
    "subprocess.Popen": (lambda: subprocess.Popen(["true"]), "processes"),
    "os.system": (lambda: os.system("true"), "processes"),
    "os.fork": (lambda: os.fork(), "processes"),  # looked up when called: the patched one
    "multiprocessing": (
        lambda: multiprocessing.get_context("spawn").Process().start(),
        "processes",
    ),
    "socket.socket": (lambda: socket.socket(), "processes"),
    "socket.socketpair": (lambda: socket.socketpair(), "processes"),
    "zmq.Context": (lambda: zmq.Context(), "processes"),
    "zmq.Context.instance": (lambda: zmq.Context.instance(), "processes"),
    "docker": (lambda: subprocess.run(["docker", "info"]), "containers"),
}


@pytest.mark.inprocess
@pytest.mark.parametrize("attempt", sorted(ATTEMPTS))
def test_under_the_guard_each_attempt_fails_naming_the_tier_to_mark(attempt: str) -> None:
    call, tier = ATTEMPTS[attempt]
    refusals = Refusals("tests/x.py::test_y", "no fixture or name of another tier")
    with guarded(refusals), pytest.raises(pytest.fail.Exception) as failed:
        call()
    assert not isinstance(failed.value, Exception)  # an `except Exception` cannot swallow it
    message = str(failed.value)
    assert message.startswith("tier guard: tests/x.py::test_y is in the `inprocess` tier")
    assert f"@pytest.mark.{tier}" in message and f"{tier.upper()}_NAMES" in message
    assert refusals.refused == [message]


@pytest.mark.inprocess
def test_a_refusal_in_another_thread_is_kept_for_the_test_to_fail_on() -> None:
    refusals = Refusals("tests/x.py::test_y", "why")
    errors: list[BaseException] = []

    def attempt() -> None:
        try:
            socket.socket()
        except BaseException as e:  # the thread's own: the test sees only what was kept
            errors.append(e)

    with guarded(refusals):
        thread = threading.Thread(target=attempt)
        thread.start()
        thread.join(timeout=30)
    assert len(errors) == 1 and len(refusals.refused) == 1
    assert "socket.socket" in refusals.refused[0]


@pytest.mark.inprocess
def test_a_new_thread_reusing_an_ended_older_threads_ident_is_refused() -> None:
    """A thread ident is reused once its thread ends: a thread older than the guard that ends
    inside it hands its ident to the next thread started, which is the test's own. (Other
    threads of the process may take the freed ident first: the case is tried again, with a
    new older thread, until a new thread has reused one.)"""
    reused = 0
    for _ in range(50):
        refusals = Refusals("tests/x.py::test_y", "why")
        errors: list[BaseException | None] = []
        ending = threading.Event()
        older = threading.Thread(target=ending.wait, args=(30,))
        older.start()
        with guarded(refusals):
            ending.set()
            older.join(timeout=30)
            for _ in range(5):
                thread = threading.Thread(target=_refusal_into, args=(errors,))
                thread.start()
                thread.join(timeout=30)
                reused += thread.ident == older.ident
        assert errors and all(e is not None for e in errors)  # each new thread was refused
        assert len(refusals.refused) == len(errors)
        if reused:
            break
    assert reused, "no new thread reused an ended thread's ident in 50 tries: case not exercised"


def _refusal_into(errors: list[BaseException | None]) -> None:
    errors.append(_refusal_of(socket.socket))


def _refusal_of(call: Callable[[], object]) -> BaseException | None:
    try:
        call()
    except BaseException as e:  # pytest.fail's exception is a BaseException
        return e
    return None


@pytest.mark.processes  # its older thread makes a real socket (the autouse guard would refuse)
def test_a_thread_older_than_the_guard_goes_on_as_before() -> None:
    """Another test's leftover thread (a server's accept loop) making a socket while this test
    runs does not fail this test: only this test's own threads are refused."""
    go, made = threading.Event(), []

    def older() -> None:
        go.wait(timeout=30)
        with socket.socket() as made_here:
            made.append(made_here.fileno() >= 0)

    thread = threading.Thread(target=older)
    thread.start()
    refusals = Refusals("t", "why")
    with guarded(refusals):
        go.set()
        thread.join(timeout=30)
    assert made == [True] and refusals.refused == []


@pytest.mark.inprocess
def test_off_the_guard_everything_is_as_it_was() -> None:
    def now() -> tuple[object, ...]:
        context = vars(zmq.Context)
        return (subprocess.Popen.__init__, socket.socket.__init__, os.fork, context["__init__"],
                context["instance"], multiprocessing.process.BaseProcess.start)  # fmt: skip

    before = now()
    with guarded(Refusals("t", "why")):
        assert all(a is not b for a, b in zip(now(), before, strict=True))
    assert now() == before


def test_every_collected_test_has_exactly_one_tier(request: pytest.FixtureRequest) -> None:
    items = request.session.items
    assert items
    for item in items:
        marks = {m.name for m in item.iter_markers() if m.name in tiers.TIERS}
        assert len(marks) == 1, (item.nodeid, marks)


def test_a_listed_name_is_used_whole_from_dot_to_dot() -> None:
    listed = tiers.PROCESSES_NAMES
    assert tiers.matching({"zmq"}, {"zmq", "Context", "instance"}, listed) == "zmq.Context"
    assert tiers.matching({"zmq"}, {"zmq", "ZMQError"}, listed) is None
    assert tiers.matching({"subprocess.run"}, {"run"}, listed) == "subprocess.run"
    assert tiers.matching({"subprocess"}, {"subprocess", "TimeoutExpired"}, listed) is None
    assert tiers.matching({"h5feed"}, {"h5feed", "batches"}, listed) == "batches"
    autoscaler = "h5feed.consumer.processes.autoscale.Autoscaler"
    assert tiers.matching({autoscaler}, {"Autoscaler"}, listed) == "h5feed.consumer.processes"
    assert tiers.matching({"h5feed.consumer.plan.epoch_plan.Cursor"}, {"Cursor"}, listed) is None
    assert tiers.matching({"os"}, {"os", "forkserver"}, listed) is None  # not os.fork


class _Item:
    """What tiers.tier_of reads of a collected test: its function, marks and fixtures."""

    def __init__(self, function: Callable[..., object], **fixtures: Callable[..., object]):
        self.function = function
        self.fixturenames = ["tier_guard", *fixtures]
        definitions = {name: [types.SimpleNamespace(func=f)] for name, f in fixtures.items()}
        self._fixtureinfo = types.SimpleNamespace(name2fixturedefs=definitions)

    def iter_markers(self) -> list[pytest.Mark]:
        return list(getattr(self.function, "pytestmark", []))


def _deep() -> None:
    subprocess.run(["true"], check=False)


def _shallow() -> None:
    _deep()


def _a_context_fixture() -> object:
    return zmq.Context.instance()


def _calls_a_helper_two_deep() -> None:
    _shallow()


def _reads_a_fixture(a_context: object) -> None:
    assert a_context


def _feeds() -> None:
    import h5feed

    list(h5feed.batches(["x.h5"]))


def _adds() -> None:
    assert 1 + 1 == 2


@pytest.mark.processes
def _declared() -> None:
    assert True


@pytest.mark.inprocess
def test_the_tiers_follow_what_a_test_uses() -> None:
    """By a helper of tests/ two calls deep, a fixture's code, a fixture's name, an h5feed
    call, a mark, and nothing of another tier."""
    cases = [
        (_Item(_calls_a_helper_two_deep), ("processes", "uses subprocess.run")),
        (_Item(_reads_a_fixture, a_context=_a_context_fixture), ("processes", "uses zmq.Context")),
        (_Item(_adds, docker_env=_adds), ("containers", "fixture docker_env")),
        (_Item(_feeds), ("processes", "uses batches")),
        (_Item(_declared), ("processes", "declared")),
        (_Item(_adds), ("inprocess", "no fixture or name of another tier")),
    ]
    for item, expected in cases:
        assert tiers.tier_of(item) == expected, item.function  # type: ignore[arg-type]


@pytest.mark.inprocess
def test_no_test_module_imports_another() -> None:
    """What several test modules share lives in a support module (remote_producers.py,
    scheduler_data.py, swarm_helpers.py, ...), never in a test module another imports: a
    test module's own tests would otherwise run again, or be collected twice, wherever it is
    imported, and moving one would break the others."""
    tests = pathlib.Path(__file__).resolve().parent
    modules = {path.stem for path in tests.rglob("test_*.py")}
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            named = (
                [alias.name for alias in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )  # fmt: skip
            for name in named:
                assert name.split(".")[-1] not in modules, f"{path.name} imports {name}"
