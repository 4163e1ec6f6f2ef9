"""A message's wire schema, derived from its dataclass: each field is written once.

The fields of a message's frozen dataclass (:mod:`h5feed.common.protocol.message_types`) are its
header
fields, in the same names (a trailing ``_`` dropped: ``pass_`` goes as ``pass``, a Python
keyword). Each field's annotation says what the header may hold there and how
:meth:`Schema.build` turns it into the typed value; ``wire`` checks the top-level types
(``wire.SCHEMAS``), ``build`` everything below them, before anything trusts it:

=========================  =====================  ==========================================
annotation                 header holds           built as
=========================  =====================  ==========================================
``str int bool bytes``     that type              itself (a bool is never an int; a float
                                                  field also takes an int)
``X | None``               X or nil               X's value, or None
``Mapping[str, Any]``      a map                  itself (its own codec checks it: ClipSpec,
                                                  LayoutSpec, ElementSpec)
``tuple[int, ...]``        a list of that scalar  a tuple (``int``, ``str`` or ``bytes``)
``tuple[Any, ...]``        a list                 a tuple, contents unchecked (DATA samples)
``R``, ``tuple[R, ...]``   a list (of lists)      R a ``NamedTuple``: each a list of exactly
                                                  R's fields, each checked the same way
``np.ndarray``             an array frame         the array of that name (required)
``Mapping[str, ndarray]``  the array frames       all of them (DATA)
=========================  =====================  ==========================================

Bounds ride on the annotation as ``Annotated`` metadata (:class:`Min`, :class:`Within`,
:class:`MaxLen`, :class:`OneOf`, :class:`EachLen`), checked before the value is built (a
list too long is refused unread); a rule that spans fields is the message's ``validate()``
method, which ``build`` calls last. Every string a peer sends has a bound of its own: a
``str`` or ``bytes`` field (in a record too) with neither ``MaxLen`` nor ``OneOf``, or a
list of them without ``EachLen``, raises ``TypeError`` when the schema is made, so no text
is kept or repeated at the size the wire's per-string limit (1 MiB) allows. A value over its
bound is refused (a ``ProtocolError``: a malformed message, counted), never cut.
A field marked :class:`Omissible` may be absent from a header (it then decodes to its default)
and is left out when it holds its default; every other field is required, and an unknown one
is refused (``wire``).
A nested value is named in errors by its kind and field, less a plural ``s`` (``UNIT row``),
or by a :class:`Label`. An annotation with no wire form raises ``TypeError`` when the schema
is made, at import: a new field cannot go unchecked.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, get_args, get_origin, get_type_hints

import numpy as np

from h5feed.common.errors import FeatureVersionError, ProtocolError


class _Fault(Exception):
    """What is wrong with one value, before the caller says where it was."""


@dataclasses.dataclass(frozen=True, slots=True)
class Min:
    """An int field's least value."""

    least: int

    def check(self, name: str, value: Any) -> None:
        if value < self.least:
            raise _Fault(f"has {value} {name}, below {self.least}")


@dataclasses.dataclass(frozen=True, slots=True)
class Within:
    """A float field's range, ends included; NaN and infinities are outside every range."""

    least: float
    most: float

    def check(self, name: str, value: Any) -> None:
        if not self.least <= value <= self.most:  # False for NaN
            raise _Fault(f"has {value} {name}, outside [{self.least:g}, {self.most:g}]")


@dataclasses.dataclass(frozen=True, slots=True)
class MaxLen:
    """The most elements (characters, bytes, entries) a field may hold."""

    most: int

    def check(self, name: str, value: Any) -> None:
        if len(value) > self.most:
            raise _Fault(f"{name} too long: {len(value)} {name}, at most {self.most}")


@dataclasses.dataclass(frozen=True, slots=True)
class EachLen:
    """The most characters (or bytes) each string of a list field may hold."""

    most: int

    def check(self, name: str, value: Any) -> None:
        try:
            longest = max(map(len, value), default=0)  # C speed: no Python object per entry
        except TypeError:
            return  # not all strings: the element check that follows names it
        if longest > self.most:
            raise _Fault(f"{name} holds an entry of {longest}, at most {self.most}")


@dataclasses.dataclass(frozen=True, slots=True)
class OneOf:
    """The values a str field may take."""

    choices: tuple[str, ...]

    def check(self, name: str, value: Any) -> None:
        if value not in self.choices:
            raise _Fault(f"{name} {value!r:.50} is not one of {self.choices}")


@dataclasses.dataclass(frozen=True, slots=True)
class Since:
    """The protocol version a field (or, as a class's ``SINCE``, a kind) was added in.

    A schema of an older version leaves the field out: a message decoded in that version gets
    the field's default; one encoded for it must hold the default there, or
    :class:`~h5feed.common.errors.FeatureVersionError` names the field (the peer could not
    honour it: a job needing a newer feature refuses that peer, nothing is dropped) — unless
    ``advisory``: a check only a peer of that version can make (a JOB's code identities), left
    out for an older peer, which goes on without it, rather than refused."""

    version: int
    advisory: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Omissible:
    """A field that may be absent from a header: a header without it decodes to its default,
    and a message holding the default leaves it out (so its bytes are those of a version
    without the field). What a peer of an earlier release, which knows no such field, still
    sends and still decodes, as long as the value is the default when it talks to one: the
    field's comment says why it is, for each such field."""


@dataclasses.dataclass(frozen=True, slots=True)
class Label:
    """What one record of a field is called in errors, where its name less ``s`` is wrong."""

    text: str


Bound = Min | Within | MaxLen | OneOf | EachLen
_SCALARS: Mapping[Any, tuple[type, ...]] = {
    str: (str,), int: (int,), bool: (bool,), bytes: (bytes,), float: (float, int),
}  # fmt: skip
_ELEMENTS: Mapping[Any, str] = {
    int: "a list of ints", str: "a list of str", bytes: "{} byte strings",
}  # fmt: skip
_NONE = type(None)


@dataclasses.dataclass(frozen=True, slots=True)
class _Part:
    """One field: the header types it takes, how it is built, and its bounds."""

    name: str
    types: tuple[type, ...]
    build: Callable[[Any], Any] | None  # None: the value as it is
    bounds: tuple[Bound, ...] = ()


def _part(name: str, hint: Any, kind: str) -> _Part:
    """The part of the field ``name`` annotated ``hint``, in a message of ``kind``."""
    bounds: tuple[Bound, ...] = ()
    label = name.removesuffix("s")
    meta: list[Any] = []
    if get_origin(hint) is Annotated:
        hint, *meta = get_args(hint)
        bounds = tuple(m for m in meta if isinstance(m, Bound))
        label = next((m.text for m in meta if isinstance(m, Label)), label)
    what = f"{kind} {label}"
    origin, args = get_origin(hint), get_args(hint)
    if origin in (types.UnionType, typing.Union) and _NONE in args:
        (inner,) = (a for a in args if a is not _NONE)
        part = _part(name, Annotated[(inner, *meta)] if meta else inner, kind)
        build = part.build
        optional = None if build is None else (lambda v: None if v is None else build(v))
        return _Part(name, (*part.types, _NONE), optional, bounds)
    if hint in _SCALARS:
        if hint in (str, bytes) and not any(isinstance(b, MaxLen | OneOf) for b in bounds):
            raise TypeError(f"field {name!r}: a {hint.__name__} needs a bound (MaxLen or OneOf)")
        return _Part(name, _SCALARS[hint], None, bounds)
    if origin is Mapping:
        return _Part(name, (dict,), None, bounds)
    if _is_record(hint):
        return _Part(name, (list,), _record_reader(hint, what), bounds)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        element = args[0]
        if element is Any:
            return _Part(name, (list,), tuple, bounds)
        if _is_record(element):
            read = _record_reader(element, what)
            return _Part(name, (list,), lambda v: tuple(map(read, v)), bounds)
        if element in _ELEMENTS:
            if element in (str, bytes) and not any(isinstance(b, EachLen) for b in bounds):
                raise TypeError(f"field {name!r}: a list of {element.__name__} needs EachLen")
            return _Part(name, (list,), _scalars_reader(name, element), bounds)
    raise TypeError(f"field {name!r}: no wire form for {hint!r}")


def _since(hint: Any) -> Since:
    """When a field annotated ``hint`` came in (version 0: in every version)."""
    if get_origin(hint) is Annotated:
        marks = [m for m in get_args(hint)[1:] if isinstance(m, Since)]
        return max(marks, key=lambda m: m.version, default=Since(0))
    return Since(0)


def _is_record(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields")


def _scalars_reader(name: str, element: type) -> Callable[[list[Any]], tuple[Any, ...]]:
    """A list's elements, each exactly of type ``element`` (so no bool is an int)."""
    what = _ELEMENTS[element]

    def read(values: list[Any]) -> tuple[Any, ...]:
        if values and set(map(type, values)) != {element}:  # C speed: no bool is an int
            raise _Fault(f"{name} must be {what.format(len(values))}: {values!r:.200}")
        return tuple(values)

    return read


def _record_reader(record: type, what: str) -> Callable[[Any], Any]:
    """Reads one record: a list of exactly its fields, of their types, within their bounds.
    Errors say ``what`` it is (e.g. ``UNIT row``)."""
    hints = get_type_hints(record, include_extras=True)
    fields: Sequence[str] = record._fields  # type: ignore[attr-defined]
    parts = [_part(field, hints[field], what) for field in fields]
    # One type where there is one (isinstance is faster so); "is not bool": no bool is an int.
    expected = tuple(part.types[0] if len(part.types) == 1 else part.types for part in parts)
    count, plain = len(parts), all(p.build is None and not p.bounds for p in parts)

    def read(entry: Any) -> Any:
        if not isinstance(entry, list) or len(entry) != count:
            raise ProtocolError(f"{what} must be a list of {count} values: {entry!r:.200}")
        for value, accepted in zip(entry, expected, strict=True):
            if not isinstance(value, accepted) or (
                isinstance(value, bool) and accepted is not bool
            ):
                raise ProtocolError(f"bad {what} {entry!r:.200}")
        if plain:  # a UNIT row: the hot path
            return record(*entry)
        try:
            return record(*(_read(part, value) for part, value in zip(parts, entry, strict=True)))
        except _Fault as fault:
            raise ProtocolError(f"bad {what} {entry!r:.200}: {fault}") from None

    return read


def _read(part: _Part, value: Any) -> Any:
    """``value`` built, its bounds checked first (a list too long costs nothing to refuse)."""
    if value is not None:
        for bound in part.bounds:
            bound.check(part.name, value)
    return value if part.build is None else part.build(value)


@dataclasses.dataclass(frozen=True, slots=True)
class Schema:
    """The wire form of one message class, derived from its fields' annotations."""

    kind: str
    cls: type
    parts: tuple[tuple[str, _Part], ...]  # (attribute, part) of each header field
    arrays: tuple[str, ...]  # the named array fields (an np.ndarray annotation)
    any_arrays: str | None  # the field holding all arrays (Mapping[str, np.ndarray]), if any
    version: int = 0  # the protocol version of this schema (0: every field)
    #: (attribute, when it came in, default) of the fields this version leaves out
    later: tuple[tuple[str, Since, Any], ...] = ()
    #: (attribute, default) of the :class:`Omissible` fields: left out when the default
    omissible: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, message: type, version: int = 0) -> Schema:
        """The schema of ``message`` in protocol ``version`` (0: with every field)."""
        hints = get_type_hints(message, include_extras=True)
        kind: str = message.KIND  # type: ignore[attr-defined]
        parts, arrays, any_arrays, later, omissible = [], [], None, [], []
        for field in dataclasses.fields(message):
            hint = hints[field.name]
            since = _since(hint)
            if get_origin(hint) is Annotated and any(
                isinstance(m, Omissible) for m in get_args(hint)[1:]
            ):
                if field.default is dataclasses.MISSING:
                    raise TypeError(f"{kind} field {field.name!r} may be omitted: no default")
                if not (version and since.version > version):
                    omissible.append((field.name, field.default))
            if version and since.version > version:
                if field.default is dataclasses.MISSING:
                    raise TypeError(f"{kind} field {field.name!r} of version {since}: no default")
                later.append((field.name, since, field.default))
            elif hint is np.ndarray:
                arrays.append(field.name)
            elif get_origin(hint) is Mapping and get_args(hint)[1] is np.ndarray:
                any_arrays = field.name
            else:
                wire_name = field.name.removesuffix("_")
                parts.append((field.name, _part(wire_name, hint, kind.upper())))
        return cls(
            kind, message, tuple(parts), tuple(arrays), any_arrays, version, tuple(later),
            tuple(omissible),
        )  # fmt: skip

    @property
    def header_types(self) -> dict[str, tuple[type, ...]]:
        """Each header field's accepted types, as ``wire`` checks them."""
        return {part.name: part.types for _attribute, part in self.parts}

    @property
    def optional_fields(self) -> frozenset[str]:
        """The header fields that may be absent (:class:`Omissible`), as ``wire`` names them."""
        names = {attribute for attribute, _default in self.omissible}
        return frozenset(part.name for attribute, part in self.parts if attribute in names)

    def header(self, message: Any) -> dict[str, Any]:
        """The header fields of ``message`` (tuples as lists, mappings as dicts);
        FeatureVersionError when it holds a field this version cannot carry (an advisory
        one is left out: :class:`Since`)."""
        for attribute, since, default in self.later:
            value = getattr(message, attribute)
            if value != default and not since.advisory:
                raise FeatureVersionError(
                    f"{self.kind.upper()} {attribute}={value!r} needs protocol version "
                    f"{since.version}; the peer speaks {self.version}"
                )
        fields: dict[str, Any] = {}
        defaults = dict(self.omissible)
        for attribute, part in self.parts:
            value = getattr(message, attribute)
            if attribute in defaults and value == defaults[attribute]:
                continue  # left out: the header of a version without it (Omissible)
            if isinstance(value, tuple):
                value = list(value)  # the schemas say list; tuples inside pack as arrays anyway
            elif isinstance(value, Mapping):
                value = dict(value)
            fields[part.name] = value
        return fields

    def array_frames(self, message: Any) -> list[tuple[str, np.ndarray]]:
        """The arrays of ``message``, in the order they go on the wire."""
        arrays = list(getattr(message, self.any_arrays).items()) if self.any_arrays else []
        return arrays + [(name, getattr(message, name)) for name in self.arrays]

    def build(self, fields: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Any:
        """The message of header ``fields`` (types checked by ``wire``) and ``arrays``, every
        nested value and bound checked, then the message's own ``validate()``."""
        values: dict[str, Any] = {}
        defaults = dict(self.omissible)
        for attribute, part in self.parts:
            if part.name not in fields and attribute in defaults:
                values[attribute] = defaults[attribute]  # absent: its default (Omissible)
                continue
            try:
                values[attribute] = _read(part, fields[part.name])
            except _Fault as fault:
                raise ProtocolError(f"{self.kind.upper()} {fault}") from None
        if self.arrays:
            if set(arrays) != set(self.arrays):
                raise ProtocolError(
                    f"{self.kind.upper()} arrays must be {' and '.join(self.arrays)}, "
                    f"got {sorted(arrays)}"
                )
            values.update((name, arrays[name]) for name in self.arrays)
        if self.any_arrays:
            values[self.any_arrays] = arrays
        message = self.cls(**values)
        validate = getattr(message, "validate", None)
        if validate is not None:
            validate()
        return message
