"""Where this h5feed is: its package directory, and the directory it is imported from.

Found from the package itself (``sys.modules["h5feed"]``), not from the asking module's own
path, so that moving a module to another folder cannot make the answer wrong (it once did:
``parents[2]`` of a module one folder deeper is the package, not its parent)."""

from __future__ import annotations

import os
import pathlib
import sys

_TOP = __name__.partition(".")[0]  # "h5feed"


def package_dir() -> pathlib.Path:
    """The directory of the ``h5feed`` package this process imported."""
    init = getattr(sys.modules[_TOP], "__file__", None)
    if init is None:  # a namespace package: never, h5feed has an __init__.py
        raise RuntimeError(f"{_TOP} has no __init__.py to locate it by")
    return pathlib.Path(os.path.abspath(init)).parent  # as code objects name their files


def package_parent() -> str:
    """The directory ``h5feed`` is imported from: on a worker's ``PYTHONPATH``, so that the
    workers import the same h5feed as the process that starts them."""
    return str(package_dir().parent)
