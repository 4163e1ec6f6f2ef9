"""The one rule for import paths (``"package.module:attribute"``), for every option that
takes one: ``transform=``, ``source=``, and what a worker is asked to load.

An import path is a ``str`` of a dotted module name, one ``:``, and a dotted attribute path,
each part a Python identifier (``str.isidentifier``: what ``import`` and ``getattr`` syntax
accept; ``__main__`` is one, the trainer's script). Nothing else: no spaces, no empty part,
no second colon, no trailing newline. The trainer checks an option with
:func:`check_option` when it is given (ValueError naming the option); a worker parses what it
is sent with :meth:`ImportPath.parse` before it imports anything, and its code policy
(``producer/worker/code_policy.py``) narrows the rule further for producers other hosts may reach.
"""

from __future__ import annotations

import dataclasses

#: How the form reads in error messages.
FORM = "'package.module:name'"


class ImportPathError(ValueError):
    """Not an import path; the message says why (without the path itself)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ImportPath:
    """A parsed import path: ``module`` (dotted) and the ``attributes`` walked from it."""

    module: str
    attributes: tuple[str, ...]

    @classmethod
    def parse(cls, path: object) -> ImportPath:
        """The import path ``path``; ImportPathError saying which part breaks the rule."""
        if not isinstance(path, str):
            raise ImportPathError(f"is a {type(path).__name__}, not a str of the form {FORM}")
        module, sep, attribute = path.partition(":")
        if not sep or not module or not attribute:
            raise ImportPathError(f"is not an import path of the form {FORM}")
        if not all(part.isidentifier() for part in module.split(".")):
            raise ImportPathError(f"{module!r} is not a dotted module name")
        attributes = tuple(attribute.split("."))
        if not all(part.isidentifier() for part in attributes):
            raise ImportPathError(f"{attribute!r} is not a dotted attribute name")
        return cls(module, attributes)

    @property
    def attribute(self) -> str:
        """The attribute path as written (``"Class.method"``)."""
        return ".".join(self.attributes)


def check_option(option: str, value: object, what: str) -> ImportPath:
    """``value`` of the option ``option`` parsed; ValueError naming the option, the form
    (``'package.module:<what>'``), the value and why it is not one."""
    try:
        return ImportPath.parse(value)
    except ImportPathError as exc:
        raise ValueError(
            f"{option} must be an import path 'package.module:{what}', got {value!r} ({exc})"
        ) from None
