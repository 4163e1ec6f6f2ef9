"""The identities of the user's modules a job names, as the trainer finds them (the rules and
their limits: :mod:`h5feed.common.user_code.code_identity`).

Computed when an iteration starts, from the files as they are then: a worker started for the
iteration imports those same files, so it agrees; one that imported an earlier copy refuses.
"""

from __future__ import annotations

import importlib.util
import sys

from h5feed.common.protocol import messages
from h5feed.common.user_code import trainer_main
from h5feed.common.user_code.code_identity import digest_of
from h5feed.common.user_code.import_paths import ImportPath, ImportPathError


def identities_of(*paths: str | None) -> tuple[messages.CodeIdentity, ...]:
    """One identity per module that ``paths`` (import paths; None: none given) name and this
    process can find as a file, in the order named (a module named twice, once)."""
    found: dict[str, messages.CodeIdentity] = {}
    for path in paths:
        if path is None:
            continue
        try:
            module = ImportPath.parse(path).module
        except ImportPathError:
            continue  # refused where the option was given; nothing to name here
        if module in found:
            continue
        file = module_file(module)
        digest = None if file is None else digest_of(file)
        if file is not None and digest is not None:
            found[module] = messages.CodeIdentity(module, digest, file)
    return tuple(found.values())


def module_file(module: str) -> str | None:
    """The file ``module`` is loaded from in this process (``__main__``: the script a local
    worker runs); None when there is none (a built-in, a namespace package, not found)."""
    if module == trainer_main.MAIN:
        where = trainer_main.describe_main()
        if where is None:
            return None
        kind, _sep, name = where.partition(":")
        if kind == "path":
            return name
        module = name  # python -m NAME: the worker runs that module
    loaded = sys.modules.get(module)
    file = getattr(loaded, "__file__", None)
    if isinstance(file, str):
        return file
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent package missing or failing: no file known
        return None
    origin = None if spec is None else spec.origin
    return origin if isinstance(origin, str) and spec is not None and spec.has_location else None
