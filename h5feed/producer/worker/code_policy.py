"""Which user code a worker may import by name: ``--allow-code PATTERN`` of ``h5feed produce``.

A consumer names user code by import path (``transform="pkg.mod:fn"``, ``source=...``) and
a worker imports it. Whoever can reach the producer's ``--connect`` address (a rogue consumer
listening there) could otherwise name ``subprocess:run``; so a producer service imports only
what its operator allows. Local workers, started by the trainer itself, run what the trainer
names (same user, same trust): they get :data:`TRUSTED`.

Guarantees of a policy that is not :data:`TRUSTED`:

1. :meth:`CodePolicy.check` runs before anything is imported: a refused path imports nothing
   (no module is looked up, none of its top-level code runs).
2. A path is allowed only when it is an import path (the one rule of
   :mod:`h5feed.common.user_code.import_paths`), the whole ``module:name`` matches one of the
   patterns
   (``fnmatch.fnmatchcase``: ``*`` matches anything, dots and colon included), ``name`` is
   one identifier (no dots: ``mypkg.data:os.system`` would walk out of the module), and
   neither ``name`` nor any part of ``module`` starts with ``_``: whatever the pattern,
   ``mypkg.__main__``, ``mypkg._private`` and ``_secret.mod`` are never imported (a ``*``
   matches them, so the rule is not left to the pattern).
3. After the import, :meth:`CodePolicy.check_loaded` refuses an object whose ``__module__``
   is not the module named (``mypkg.data:system`` where ``mypkg.data`` did
   ``from os import system``): a module that re-exports a function does not extend the policy.
4. Every refusal raises :class:`CodeRefused`, naming the path, the rule and the patterns.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
from collections.abc import Iterable
from typing import Any

from h5feed.common.errors import H5FeedError
from h5feed.common.user_code.import_paths import ImportPath, ImportPathError

#: The environment variable of ``--allow-code`` (patterns separated by ``,``).
ALLOW_CODE_ENV = "H5FEED_ALLOW_CODE"


class CodeRefused(H5FeedError):
    """An import path that the worker's code policy does not allow; nothing was imported."""


@dataclasses.dataclass(frozen=True, slots=True)
class CodePolicy:
    """The import paths a worker accepts: ``patterns`` (fnmatch on ``module:name``), or every
    path when ``trusted`` (local workers of the trainer). See the module docstring."""

    patterns: tuple[str, ...] = ()
    trusted: bool = False

    def __post_init__(self) -> None:
        for pattern in self.patterns:
            if not isinstance(pattern, str) or not pattern.strip():
                raise ValueError(f"an --allow-code pattern must be a non-empty string: {pattern!r}")

    def describe(self) -> str:
        """How the policy reads in an error message."""
        if self.trusted:
            return "trusted (every path)"
        if not self.patterns:
            return "no --allow-code pattern (no code may be named)"
        return "--allow-code " + " ".join(repr(p) for p in self.patterns)

    def _refuse(self, path: str, rule: str) -> CodeRefused:
        return CodeRefused(
            f"import path {path!r} refused by the producer's code policy: {rule}; "
            f"policy: {self.describe()} (h5feed produce --allow-code, or {ALLOW_CODE_ENV})"
        )

    def check(self, path: str) -> None:
        """Raise CodeRefused unless ``path`` may be imported (before any import)."""
        if self.trusted:
            return
        try:
            parsed = ImportPath.parse(path)  # the rule every import path follows, first
        except ImportPathError as exc:
            raise self._refuse(path, str(exc)) from None
        name = parsed.attribute
        if len(parsed.attributes) != 1:
            raise self._refuse(path, f"{name!r} is not one name (no dots, no attribute walk)")
        if name.startswith("_"):
            raise self._refuse(path, f"{name!r} starts with '_' (private and dunder names)")
        parts = parsed.module.split(".")
        private = next((part for part in parts if part.startswith("_")), None)
        if private is not None:
            raise self._refuse(
                path, f"module part {private!r} starts with '_' (private modules, __main__)"
            )
        if not any(fnmatch.fnmatchcase(path, pattern) for pattern in self.patterns):
            raise self._refuse(path, "it matches no allowed pattern")

    def check_loaded(self, path: str, obj: Any) -> None:
        """Raise CodeRefused unless ``obj`` (loaded from ``path``) is defined in the module
        the path names (not re-exported from another one)."""
        if self.trusted:
            return
        module = path.partition(":")[0]
        defined_in = getattr(obj, "__module__", None)
        if defined_in != module:
            raise self._refuse(
                path, f"the object is defined in module {defined_in!r}, not in {module!r}"
            )


#: The policy of local workers: the trainer's own code, imported as the trainer names it.
TRUSTED = CodePolicy(trusted=True)
#: The default of a worker given no policy: nothing may be named.
NOTHING = CodePolicy()


def split_patterns(value: str | None) -> list[str]:
    """The patterns in ``H5FEED_ALLOW_CODE``: separated by ``,`` (and by ``os.pathsep`` where
    it is not ``:``, i.e. ``;`` on Windows: a pattern holds the ``:`` of ``module:name``, and
    splitting ``"mypkg.data:*"`` at it would allow ``"*"``, everything); blanks dropped."""
    if not value:
        return []
    if os.pathsep != ":":
        value = value.replace(os.pathsep, ",")
    return [p.strip() for p in value.split(",") if p.strip()]


def policy_of(patterns: Iterable[str], trusted: bool = False) -> CodePolicy:
    """The policy of a worker's ``--allow-code`` patterns (or ``--trust-code``)."""
    return TRUSTED if trusted else CodePolicy(tuple(patterns))
