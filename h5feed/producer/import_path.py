"""Loading the user's code by import path (``"package.module:attr.sub"``) inside a worker.

Only such paths travel to the workers, never pickled code. Both user hooks (``transform=``
and ``source=``) load through :func:`load_callable`, each wrapping its failures in its own
error type with its own prefix. The worker's :class:`~h5feed.producer.code_policy.CodePolicy`
is checked first: a refused path raises ``CodeRefused`` (not wrapped) and imports nothing.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

from h5feed.producer.code_policy import CodePolicy


class ImportPathError(Exception):
    """``path`` does not lead to a callable; the message says why (without the path)."""


def load_callable(path: str, policy: CodePolicy) -> Callable[..., Any]:
    """The callable at ``path``. Raises CodeRefused when ``policy`` refuses the path (before
    importing anything) or the object loaded (defined in another module); ImportPathError:
    not of the form ``module:attr``, the module fails to import (whatever it raises; the
    worker's ``sys.path`` is named), a missing attribute, or not callable."""
    policy.check(path)
    module_name, sep, attributes = path.partition(":")
    if not sep or not module_name or not attributes:
        raise ImportPathError("is not an import path of the form 'package.module:name'")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the user's module raises on import
        raise ImportPathError(
            f"cannot import module {module_name!r}: {type(exc).__name__}: {exc} "
            f"(the worker's sys.path: {sys.path})"
        ) from exc
    for attribute in attributes.split("."):
        try:
            obj = getattr(obj, attribute)
        except AttributeError as exc:
            raise ImportPathError(f"{module_name!r} has no attribute {attributes!r}") from exc
    policy.check_loaded(path, obj)
    if not callable(obj):
        raise ImportPathError(f"is a {type(obj).__name__}, not callable")
    return obj  # type: ignore[no-any-return]
