"""Loading the user's code by import path (``"package.module:attr.sub"``) inside a worker.

Only such paths travel to the workers, never pickled code. Both user hooks (``transform=``
and ``source=``) load through :func:`load_callable`, each wrapping its failures in its own
error type with its own prefix. The worker's :class:`~h5feed.producer.worker.code_policy.CodePolicy`
is checked first: a refused path raises ``CodeRefused`` (not wrapped) and imports nothing. The
module loaded is recorded (:mod:`~h5feed.producer.worker.loaded_code`) so that a job naming another
copy of it is refused.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys
import types
from collections.abc import Callable
from typing import Any

from h5feed.common.user_code import trainer_main
from h5feed.common.user_code.import_paths import ImportPath, ImportPathError
from h5feed.producer.worker import loaded_code
from h5feed.producer.worker.code_policy import CodePolicy


def load_callable(path: str, policy: CodePolicy) -> Callable[..., Any]:
    """The callable at ``path``. Raises CodeRefused when ``policy`` refuses the path (before
    importing anything) or the object loaded (defined in another module); ImportPathError:
    not an import path (the one rule, :class:`~h5feed.common.user_code.import_paths.ImportPath`),
    the
    module fails to import (whatever it raises; the worker's ``sys.path`` is named), a
    missing attribute, or not callable."""
    policy.check(path)
    parsed = ImportPath.parse(path)
    module_name, attributes = parsed.module, parsed.attribute
    try:
        if module_name == trainer_main.MAIN:
            obj: Any = _trainer_main()
        else:
            obj = importlib.import_module(module_name)
    except ImportPathError:
        raise
    except Exception as exc:  # ImportError, or whatever the user's module raises on import
        raise ImportPathError(
            f"cannot import module {module_name!r}: {type(exc).__name__}: {exc} "
            f"(the worker's sys.path: {sys.path})"
        ) from exc
    loaded_code.record(module_name, obj)  # the copy this process runs from now on
    for attribute in parsed.attributes:
        try:
            obj = getattr(obj, attribute)
        except AttributeError as exc:
            raise ImportPathError(f"{module_name!r} has no attribute {attributes!r}") from exc
    single_threaded_torch()
    policy.check_loaded(path, obj)
    if not callable(obj):
        raise ImportPathError(f"is a {type(obj).__name__}, not callable")
    return obj  # type: ignore[no-any-return]


def _trainer_main() -> types.ModuleType:
    """The trainer's script, run once in this worker as ``__mp_main__`` (see
    :mod:`h5feed.common.user_code.trainer_main`: its guarded block does not run); ImportPathError
    when
    this worker is not one of the trainer's local workers."""
    loaded = sys.modules.get(trainer_main.WORKER_MAIN)
    if loaded is not None:
        return loaded
    where = os.environ.get(trainer_main.MAIN_ENV, "")
    kind, _sep, name = where.partition(":")
    if kind not in ("module", "path") or not name:
        raise ImportPathError(
            "names the trainer's script ('__main__'), which only the trainer's own local "
            "workers can load, not a producer on another host: move it into a module that "
            "this host can import and name it 'module:name'"
        )
    if kind == "module":
        content = runpy.run_module(name, run_name=trainer_main.WORKER_MAIN, alter_sys=True)
    else:
        content = runpy.run_path(name, run_name=trainer_main.WORKER_MAIN)
    module = types.ModuleType(trainer_main.WORKER_MAIN)
    module.__dict__.update(content)
    sys.modules[trainer_main.WORKER_MAIN] = module
    return module


def single_threaded_torch() -> None:
    """``torch.set_num_threads(1)`` if the user's code imported torch, as a PyTorch
    DataLoader worker does: each worker is one process of many, and torch's own pool of one
    thread per core in each would oversubscribe the cores. Never imports torch itself."""
    torch = sys.modules.get("torch")
    set_num_threads = getattr(torch, "set_num_threads", None)
    if callable(set_num_threads):
        set_num_threads(1)
