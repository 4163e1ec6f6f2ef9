"""How a settings field crosses a command line: its flag as field metadata (:class:`Flag`),
and how ``h5feed produce`` offers it to an operator (:class:`Offered`). The fields of
:mod:`h5feed.common.worker_settings` are made with :func:`option`, :func:`switch` and
:func:`repeated`; a parser, a command line and a round trip follow from the metadata.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["FLAG", "Flag", "Offered", "option", "repeated", "switch"]

FLAG = "h5feed.flag"  # a field's metadata key: its Flag


@dataclasses.dataclass(frozen=True, slots=True)
class Offered:
    """How ``h5feed produce`` offers a worker field to its operator: the flag's metavar and
    help (``{default}`` in it is the service's default, ``{env}`` its environment variable,
    which is otherwise said at the end), the service's own default when it is not the
    worker's (``...``: the worker's), and its own parser when it takes less (None: the
    field's)."""

    metavar: str
    help: str
    default: Any = ...
    parse: Callable[[str], Any] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Flag:
    """How one field crosses the command line (and, ``offered``, ``h5feed produce``'s)."""

    flag: str
    kind: str  # "value", "switch" (store_true) or "repeated" (append)
    parse: Callable[[str], Any]
    help: str
    offered: Offered | None = None


def option(
    flag: str,
    help: str,
    default: Any = dataclasses.MISSING,
    parse: Callable[[str], Any] = str,
    offered: Offered | None = None,
) -> Any:
    """A field given as ``FLAG VALUE`` (required without ``default``)."""
    spec = Flag(flag, "value", parse, help, offered)
    return dataclasses.field(default=default, metadata={FLAG: spec})


def switch(flag: str, help: str) -> Any:
    """A bool field, true when ``FLAG`` is given."""
    return dataclasses.field(default=False, metadata={FLAG: Flag(flag, "switch", str, help)})


def repeated(flag: str, help: str, offered: Offered | None = None) -> Any:
    """A tuple-of-strings field, one ``FLAG VALUE`` per item."""
    spec = Flag(flag, "repeated", str, help, offered)
    return dataclasses.field(default=(), metadata={FLAG: spec})
