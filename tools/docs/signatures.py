"""Signatures as a user writes the call, for the API page (tools/docs/reference.py): the
annotations as written in the source, internal h5feed paths shown by their public ones. A
sibling of the hook, imported by it."""

from __future__ import annotations

import inspect
import re
from typing import Any, Protocol

#: A signature longer than this is written one parameter a line.
_SIGNATURE_WIDTH = 88


class PublicPaths(Protocol):
    """What maps an h5feed path to its public one (the hook's ``_Face``)."""

    def public_path(self, dotted: str) -> str: ...


def _bare_name(dotted: str) -> str:
    return dotted.rsplit(".", 1)[-1]


class _Text:
    """An annotation shown as written (inspect would quote a string annotation)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


_DOTTED_H5FEED = re.compile(r"\bh5feed(?:\.\w+)+")
_NOISE_PREFIXES = re.compile(r"\b(?:collections\.abc|typing|typing_extensions)\.")


def shown_annotation(annotation: Any, face: PublicPaths | None) -> _Text:
    """An annotation as written, internal paths shown by their public ones (the hook's
    guarantee 4); without ``face``, an h5feed path as its bare name."""
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    text = _NOISE_PREFIXES.sub("", text)
    public = face.public_path if face is not None else _bare_name
    return _Text(_DOTTED_H5FEED.sub(lambda m: public(m.group(0)), text))


def signature_text(
    path: str, obj: Any, face: PublicPaths | None = None, *, bound: bool = False
) -> str:
    """``path(...)``: the call a user writes, with annotations as written in the source; one
    parameter a line when the line would be long. An exception class that keeps
    ``Exception``'s constructor shows ``(*args)``. ``bound``: a method's, whose first
    parameter (``self``, ``cls``) the call does not write."""
    try:
        sig = inspect.signature(obj)
    except ValueError:  # a builtin's constructor: Exception(*args)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            return f"{path}(*args)"
        raise
    if bound:
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])

    def shown(annotation: Any) -> _Text:
        return shown_annotation(annotation, face)

    parts: list[str] = []
    pending_slash = False
    star_needed = True
    for param in sig.parameters.values():
        if param.kind is param.POSITIONAL_ONLY:
            pending_slash = True
        elif pending_slash:
            parts.append("/")
            pending_slash = False
        if param.kind is param.VAR_POSITIONAL:
            star_needed = False
        elif param.kind is param.KEYWORD_ONLY and star_needed:
            parts.append("*")
            star_needed = False
        if param.annotation is not param.empty:
            param = param.replace(annotation=shown(param.annotation))
        parts.append(str(param))
    if pending_slash:
        parts.append("/")
    returns = ""
    if sig.return_annotation is not sig.empty and not isinstance(obj, type):
        returns = f" -> {shown(sig.return_annotation)!r}"
    one_line = f"{path}({', '.join(parts)}){returns}"
    if len(one_line) <= _SIGNATURE_WIDTH:
        return one_line
    return f"{path}(\n" + "".join(f"    {part},\n" for part in parts) + f"){returns}"
