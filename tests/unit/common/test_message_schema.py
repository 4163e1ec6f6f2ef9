"""Each message field is written once: its dataclass field, whose annotation is its schema.

``wire.SCHEMAS`` and ``messages.parse`` are derived from the classes of
``h5feed.common.protocol.message_types`` (``h5feed.common.protocol.message_schema``); the golden
bytes and the
malformed cases of every kind are in tests/unit/common/test_wire.py and
tests/unit/common/test_messages.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, NamedTuple

import numpy as np
import pytest

from h5feed.common.errors import ProtocolError
from h5feed.common.protocol import message_types, messages, wire
from h5feed.common.protocol.message_schema import EachLen, Label, MaxLen, Min, OneOf, Schema


def test_every_field_of_every_class_is_on_the_wire_and_nothing_else() -> None:
    for cls in message_types.CLASSES:
        schema = message_types.SCHEMAS[cls.KIND]
        header = {name.removesuffix("_") for name in _names(cls)} - set(schema.arrays)
        header -= {schema.any_arrays} if schema.any_arrays else set()
        assert set(wire.SCHEMAS[cls.KIND]) == header, cls.__name__
    assert set(wire.SCHEMAS) == {cls.KIND for cls in message_types.CLASSES} == wire.KINDS


def _names(cls: type) -> list[str]:
    return [field.name for field in dataclasses.fields(cls)]


class _Point(NamedTuple):
    x: Annotated[int, Min(0)]
    tag: Annotated[str, MaxLen(3)]


@dataclasses.dataclass(frozen=True, slots=True)
class _Probe:
    """A kind made up here: one dataclass is all a new kind needs to have a schema."""

    KIND: ClassVar[str] = "probe"
    job: Annotated[str, MaxLen(8)]
    mode: Annotated[str, OneOf(("a", "b"))]
    points: Annotated[tuple[_Point, ...], Label("point"), MaxLen(2)]
    corner: _Point | None
    ids: tuple[int, ...]
    weights: np.ndarray
    pass_: int = 0

    def validate(self) -> None:
        if len(self.ids) != len(self.points):
            raise ProtocolError("PROBE needs one id per point")


PROBE = Schema.of(_Probe)
GOOD = {"job": "j", "mode": "a", "points": [[1, "ab"]], "corner": None, "ids": [5], "pass": 2}
WEIGHTS = {"weights": np.zeros(2, np.float32)}


def test_a_made_up_kind_gets_its_schema_from_its_annotations() -> None:
    assert PROBE.header_types == {
        "job": (str,),
        "mode": (str,),
        "points": (list,),
        "corner": (list, type(None)),
        "ids": (list,),
        "pass": (int,),
    }
    assert PROBE.arrays == ("weights",)
    built = PROBE.build({**GOOD, "corner": [0, ""]}, WEIGHTS)
    assert built.points == (_Point(1, "ab"),) and built.corner == _Point(0, "")
    assert built.ids == (5,) and built.pass_ == 2
    assert PROBE.header(built) == {**GOOD, "corner": [0, ""], "points": [_Point(1, "ab")]}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"mode": "c"}, r"PROBE mode 'c' is not one of \('a', 'b'\)"),
        ({"points": [[1, "ab"]] * 3}, "PROBE points too long: 3 points, at most 2"),
        ({"points": [[-1, "ab"]]}, r"bad PROBE point \[-1, 'ab'\]: has -1 x, below 0"),
        ({"points": [[1, "abcd"]]}, "bad PROBE point .*: tag too long: 4 tag, at most 3"),
        ({"points": [[True, "ab"]]}, r"bad PROBE point \[True, 'ab'\]"),
        ({"points": [[1]]}, "PROBE point must be a list of 2 values"),
        ({"corner": [1]}, "PROBE corner must be a list of 2 values"),
        ({"ids": [True]}, "PROBE ids must be a list of ints"),
        ({"ids": [1, 2]}, "PROBE needs one id per point"),
    ],
)
def test_a_made_up_kind_is_checked_by_its_annotations(change: dict[str, Any], match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        PROBE.build({**GOOD, **change}, WEIGHTS)


def test_a_made_up_kind_needs_exactly_its_arrays() -> None:
    with pytest.raises(ProtocolError, match=r"PROBE arrays must be weights, got \[\]"):
        PROBE.build(GOOD, {})
    with pytest.raises(ProtocolError, match="got"):
        PROBE.build(GOOD, {**WEIGHTS, "more": np.zeros(1)})


@pytest.mark.parametrize("hint", [set[int], float | str, dict[str, int], tuple[int, str]])
def test_a_field_with_no_wire_form_is_refused_when_the_class_is_made(hint: Any) -> None:
    cls = dataclasses.make_dataclass("Odd", [("odd", hint)], frozen=True)
    cls.KIND = "odd"  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="field 'odd': no wire form"):
        Schema.of(cls)


def test_messages_reexports_every_class() -> None:
    for cls in message_types.CLASSES:
        assert getattr(messages, cls.__name__) is cls
    assert isinstance(messages.parse(wire.decode(wire.encode(wire.PING, {}))), messages.Ping)
    assert isinstance(wire.SCHEMAS, Mapping)


@pytest.mark.parametrize(
    ("hint", "match"),
    [
        (str, "field 'odd': a str needs a bound"),
        (str | None, "field 'odd': a str needs a bound"),
        (bytes, "field 'odd': a bytes needs a bound"),
        (Annotated[str, Min(0)], "field 'odd': a str needs a bound"),
        (tuple[str, ...], "field 'odd': a list of str needs EachLen"),
        (Annotated[tuple[bytes, ...], MaxLen(3)], "field 'odd': a list of bytes needs EachLen"),
    ],
)
def test_a_string_field_without_a_bound_is_refused_when_the_class_is_made(
    hint: Any, match: str
) -> None:
    """Every string a peer sends has a bound of its own: one cannot be added without."""
    cls = dataclasses.make_dataclass("Odd", [("odd", hint)], frozen=True)
    cls.KIND = "odd"  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=match):
        Schema.of(cls)


@dataclasses.dataclass(frozen=True, slots=True)
class _Texts:
    KIND: ClassVar[str] = "texts"
    note: Annotated[str | None, MaxLen(4)]
    names: Annotated[tuple[str, ...], MaxLen(3), EachLen(2)]


def test_bounds_of_optional_strings_and_of_each_listed_string() -> None:
    texts = Schema.of(_Texts)
    assert texts.build({"note": None, "names": ["ab", ""]}, {}).names == ("ab", "")
    assert texts.build({"note": "abcd", "names": []}, {}).note == "abcd"
    with pytest.raises(ProtocolError, match="TEXTS note too long: 5 note, at most 4"):
        texts.build({"note": "abcde", "names": []}, {})
    with pytest.raises(ProtocolError, match="TEXTS names holds an entry of 3, at most 2"):
        texts.build({"note": None, "names": ["abc"]}, {})
    with pytest.raises(ProtocolError, match="TEXTS names must be a list of str"):
        texts.build({"note": None, "names": [1]}, {})  # a non-string reaches the type check


def test_every_string_of_every_kind_has_a_bound_under_the_wire_limit() -> None:
    """The bounds are each field's own, and each is under what the wire lets a string hold
    (so they, not msgpack's 1 MiB, decide what a peer's text may cost)."""
    for schema in message_types.SCHEMAS.values():
        for _attribute, part in schema.parts:
            for bound in part.bounds:
                if isinstance(bound, MaxLen | EachLen) and str in part.types:
                    assert bound.most < wire.DEFAULT_LIMITS.max_str_len, (schema.kind, part.name)
