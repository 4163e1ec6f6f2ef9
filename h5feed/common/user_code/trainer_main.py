"""The trainer's script and its local workers: what a worker may load of ``__main__``, and how
a worker tells that it is one.

A factory or transform defined in the training script itself (``source="__main__:factory"``)
is loaded by the trainer's *local* workers the way ``multiprocessing``'s spawn loads it: the
script runs again in the worker under the name ``__mp_main__`` (``python -m pkg.mod`` as the
module ``pkg.mod``, found through ``__main__.__spec__``; ``python train.py`` from its file), so
its ``if __name__ == "__main__":`` block, the training, does not run there. Rules, checked in
the trainer before any worker starts (:func:`main_refusal`):

1. The script must have that guard at its top level (read with :mod:`ast`, never run): without
   it, every worker would run the whole training again.
2. The script must be a file: a notebook, ``python -c`` or an interactive session has none.
3. Local workers only: a remote producer (``listen=``) runs on another host, without the
   script.

Each refusal says what to do instead: move the factory into a module (a ``.py`` file the
workers import by name, ``"mymodule:factory"``).

A worker marks itself (:func:`mark_worker`) before it loads any user code, so that code that
builds an h5feed dataset at import time (a script without the guard, a module imported by the
factory) raises in the worker (the consumer checks :func:`in_worker`) instead of starting
workers of its own, recursively.

The trainer tells its workers where its ``__main__`` is in the environment variable
:data:`MAIN_ENV` (``module:NAME`` or ``path:FILE``); nothing else of the script travels.
"""

from __future__ import annotations

import ast
import sys
from typing import Final

#: Environment variable of a local worker: how to load the trainer's ``__main__``.
MAIN_ENV: Final = "H5FEED_TRAINER_MAIN"
#: The module a factory in the training script is named by.
MAIN: Final = "__main__"
#: The name the script runs under in a worker (as under multiprocessing's spawn).
WORKER_MAIN: Final = "__mp_main__"

_in_worker = False


def mark_worker() -> None:
    """This process is an h5feed worker (see the module docstring)."""
    global _in_worker
    _in_worker = True


def in_worker() -> bool:
    """Whether this process marked itself as an h5feed worker."""
    return _in_worker


def describe_main() -> str | None:
    """How a local worker loads this process's ``__main__``: ``module:NAME`` (run with
    ``python -m NAME``), ``path:FILE`` (a script file), or None (no file: a notebook,
    ``python -c``, an interactive session)."""
    main = sys.modules.get(MAIN)
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if isinstance(name, str) and name and name != MAIN:
        return f"module:{name}"
    path = getattr(main, "__file__", None)
    if isinstance(path, str) and path.endswith(".py"):
        return f"path:{path}"
    return None


def has_main_guard(source: str) -> bool:
    """Whether the module text has ``if __name__ == "__main__":`` at its top level."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return any(isinstance(node, ast.If) and _is_main_test(node.test) for node in body)


def _is_main_test(test: ast.expr) -> bool:
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and len(test.comparators) == 1
    ):
        return False
    sides = (test.left, test.comparators[0])
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    mains = [s for s in sides if isinstance(s, ast.Constant) and s.value == MAIN]
    return len(names) == 1 and len(mains) == 1


def main_refusal(what: str, remote: bool) -> str | None:
    """Why ``what`` (e.g. ``"source '__main__:factory'"``) cannot be loaded by the workers
    (see the module docstring), or None when local workers can load it. ``remote``: remote
    producers may serve it (``listen=``)."""
    fix = (
        "move it into a module file next to your script (e.g. mydata.py) and name it 'mydata:name'"
    )
    if remote:
        return (
            f"{what} is defined in your training script, which remote producers (listen=) "
            f"do not have: {fix}, installed or copied on every producer host"
        )
    where = describe_main()
    if where is None:
        return (
            f"{what} is defined in a notebook, `python -c` or an interactive session, which "
            f"h5feed's worker processes cannot import: {fix}"
        )
    path = getattr(sys.modules.get(MAIN), "__file__", None)
    try:
        with open(str(path), encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        return f"{what}: your training script {path!r} cannot be read ({exc}): {fix}"
    if not has_main_guard(text):
        return (
            f"{what} is defined in {path}, which has no top-level "
            '`if __name__ == "__main__":` guard: each worker runs the script to find it, and '
            "would run your training again. Put the training under that guard (as "
            f"multiprocessing requires), or {fix}"
        )
    return None
