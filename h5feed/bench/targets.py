"""Targets to judge ``h5feed bench``'s figures against, read from a file the user names.

The installed package holds no target: what an issue asked a figure to reach belongs to the
issue and to the checkout's ``docs/bench/targets.json``, which ``h5feed bench`` reads when run
from the checkout (see :func:`default_path`). Without targets the report gives the same
figures and judges none.

The file is a JSON object with up to three keys, each optional:

* ``"comparison"``: ``{figure: goal}`` for the summary at 2 workers, figures among
  :data:`COMPARISON`;
* ``"scaling_efficiency"``: the goal of clips/s over N x the per-core limit;
* ``"socket"``: ``{figure: goal}`` for the socket ceiling, figures among :data:`SOCKET`;

and any key starting with ``_`` (a comment). A figure in CPU time per clip is met at or below
its goal, every other at or above it (:func:`met`).
"""

from __future__ import annotations

import json
import math
import pathlib
from dataclasses import dataclass, field
from typing import Any

#: The summary's figures that can have a target.
COMPARISON = (
    "h5feed_vs_twice_limit",
    "h5feed_vs_best_alternative",
    "trainer_cpu_ms_per_clip",
    "ceiling_gb_per_s",
)
#: The socket ceiling's figures that can have a target.
SOCKET = ("dataset_vs_raw", "trainer_cpu_ms_per_clip")
_KEYS = ("comparison", "scaling_efficiency", "socket")
_DEFAULT = pathlib.Path("docs") / "bench" / "targets.json"


@dataclass(frozen=True)
class Targets:
    """Goals per figure (empty: judge nothing)."""

    comparison: dict[str, float] = field(default_factory=dict)
    scaling_efficiency: float | None = None
    socket: dict[str, float] = field(default_factory=dict)


NONE = Targets()


def lower_is_better(name: str) -> bool:
    """Whether figure ``name``'s goal is a ceiling (``<=``: CPU per clip) or a floor."""
    return name.endswith("_ms_per_clip")


def met(name: str, value: float, goal: float) -> bool:
    """Whether ``value`` of figure ``name`` reaches ``goal``."""
    return value <= goal if lower_is_better(name) else value >= goal


def default_path() -> pathlib.Path | None:
    """``docs/bench/targets.json`` under the working directory when it is there (a checkout,
    where ``--out``'s default ``docs/bench/`` also lies), else None."""
    return _DEFAULT if _DEFAULT.is_file() else None


def _goal(path: pathlib.Path, where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{path}: {where} must be a finite number, got {value!r}")
    return float(value)


def _goals(path: pathlib.Path, key: str, raw: Any, known: tuple[str, ...]) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: {key!r} must be an object of figure: goal")
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ValueError(f"{path}: {key!r} has unknown figures {unknown}; known: {list(known)}")
    return {name: _goal(path, f"{key}.{name}", raw[name]) for name in known if name in raw}


def load(path: pathlib.Path) -> Targets:
    """The targets in ``path``; ``ValueError`` naming the file and the key for anything else
    than the format above (``OSError`` when it cannot be read)."""
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object")
    unknown = sorted(k for k in raw if not k.startswith("_") and k not in _KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown keys {unknown}; known: {list(_KEYS)}")
    scaling = raw.get("scaling_efficiency")
    return Targets(
        comparison=_goals(path, "comparison", raw.get("comparison", {}), COMPARISON),
        scaling_efficiency=None if scaling is None else _goal(path, "scaling_efficiency", scaling),
        socket=_goals(path, "socket", raw.get("socket", {}), SOCKET),
    )
