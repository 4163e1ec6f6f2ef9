"""Tests of h5feed.common.protocol.messages: every kind round-trips, nested values are checked on
decode (ProtocolError), golden headers of the new kinds, and random input never crashes."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from upgrade_pins import PREVIOUS_PACKAGE
from wire_golden import GOLDEN_UNIT  # the one golden UNIT: its rows as the parser takes them

from h5feed.common.errors import DataError, FileReadError, ProtocolError, VersionMismatchError
from h5feed.common.protocol import messages, wire
from h5feed.common.protocol.message_records import (
    MAX_HOST,
    MAX_MESSAGE,
    MAX_NONCE,
    MAX_PACKAGE,
    MAX_WORKER_NAME,
)
from h5feed.common.protocol.message_types import MAX_PORT, TRAINER_NAME
from h5feed.common.protocol.messages import FileRef, Row, SkippedRow, SlotRef, VideoEntry
from h5feed.common.protocol.versions import VersionRange, legacy_package

PROPERTY = settings(max_examples=200, deadline=None)

# One message of each kind (test_samples_cover_every_kind keeps it complete).
SAMPLES: list[messages.Message] = [
    messages.Hello("worker-0", 4242, "node-a", "0.1.0", "5f0c2a"),
    messages.Job(
        "job-1",
        (FileRef(0, "a.h5"), FileRef(3, "/data/b.h5")),
        {"clip_len": 8, "resize": [112, 112], "flip": True},
        {"kind": "flat", "jpeg": "jpeg", "offsets": "video_offsets", "labels": None},
        "/tmp/cache",
        "skip",
    ),
    messages.Index("job-1", 3, (VideoEntry("v0", 120, 3), VideoEntry("v1", 1, -1))),
    messages.Unit(
        "job-1",
        7,
        2,
        1,
        (Row(0, 3, 1, 16, 0.5, 0.0, True, 99), Row(1, 3, 0, 0, 0.25, 1.0, False, -5)),
        SlotRef(4242, 9, 8, (5, 0)),
    ),
    messages.Items("job-1", 8, 2, 1, (4, 0, 9)),
    messages.Pull("job-1", 9, 3, 1, 16, 1),
    messages.Data(
        "job-1",
        7,
        2,
        (0, 1),
        {"frames": np.arange(6, dtype=np.uint8).reshape(2, 3)},
        (SkippedRow(1, 4, "frame fails its CRC32 check"),),
        0.0125,
    ),
    messages.Error("job-1", 7, "DataError", "cannot decode", "Traceback...", "a.h5", "v0", 3),
    messages.Bye("iteration over"),
    messages.Source(
        "job-1",
        "pkg.data:make",
        {"n": 3, "files": ["a", "b"]},
        ("/home/me/project",),
        0,
        2,
        5,
        0,
        None,
        True,
    ),
    messages.SourceInfo(
        "job-1",
        "map",
        100,
        {"tree": "leaf", "leaves": [["", "<f4", [3]]]},
        2,
        (messages.ItemCheck(0, b"\x07" * 16, True), messages.ItemCheck(99, b"", False)),
    ),
    messages.Check("job-1", 2),
    messages.Ping(),
    messages.Attach(5555, "trainer-host-1234"),
    messages.Attached("fleet-replica-1", 4, 3),
    messages.IndexBatch(
        "job-1",
        (3, 0),
        (2, 1),
        (b"v0", b"v1", b"w0"),
        np.array([120, 1, 7], np.int64),
        np.array([3, -1, 0], np.int64),
    ),
]


def frame_bytes(frame: Any) -> bytes:
    """The bytes of one frame from ``encode`` (as a copying receive would give them)."""
    return frame if isinstance(frame, bytes) else np.asarray(frame).tobytes(order="C")


def round_trip(message: messages.Message) -> messages.Message:
    return messages.decode([frame_bytes(f) for f in messages.encode(message)])


def assert_same(got: messages.Message, want: messages.Message) -> None:
    """Equal messages; a DATA's arrays compared by dtype, shape and bytes."""
    assert type(got) is type(want)
    if isinstance(got, messages.Data) and isinstance(want, messages.Data):
        assert (got.job, got.unit, got.batch, got.samples) == (
            want.job,
            want.unit,
            want.batch,
            want.samples,
        )
        assert list(got.arrays) == list(want.arrays)
        for name, array in want.arrays.items():
            assert got.arrays[name].dtype == array.dtype
            assert got.arrays[name].shape == array.shape
            assert got.arrays[name].tobytes() == array.tobytes()
    elif isinstance(got, messages.IndexBatch) and isinstance(want, messages.IndexBatch):
        assert (got.job, got.files, got.counts, got.names) == (
            want.job, want.files, want.counts, want.names,
        )  # fmt: skip
        for name in ("frames", "labels"):
            assert getattr(got, name).dtype == np.int64
            assert getattr(got, name).tolist() == getattr(want, name).tolist()
    else:
        assert got == want


def test_samples_cover_every_kind() -> None:
    assert {message.KIND for message in SAMPLES} == set(wire.KINDS)


@pytest.mark.parametrize("message", SAMPLES, ids=[m.KIND for m in SAMPLES])
def test_every_kind_round_trips(message: messages.Message) -> None:
    got = round_trip(message)
    assert_same(got, message)
    # Records come back as their NamedTuples, so fields read by name on the receiving side.
    if isinstance(got, messages.Unit):
        assert all(type(row) is Row for row in got.rows)
        assert type(got.slot) is SlotRef and type(got.rows[0].flip) is bool
    if isinstance(got, messages.Index):
        assert all(type(video) is VideoEntry for video in got.videos)


def test_a_unit_without_a_slot_round_trips() -> None:
    unit = messages.Unit("j", 1, 0, 0, (Row(0, 0, 0, 0, 0.0, 0.0, False, 0),))
    assert round_trip(unit) == unit


def test_error_of_names_the_file_video_and_frame_of_a_data_error() -> None:
    try:
        raise DataError("bad JPEG", file="a.h5", video="v0", frame=4)
    except DataError as exc:
        error = messages.Error.of("j", 3, exc, file="ignored.h5")
    assert error.type == "DataError" and error.message.startswith("bad JPEG")
    assert (error.file, error.video, error.frame) == ("a.h5", "v0", 4)
    assert "Traceback" in error.traceback and "bad JPEG" in error.traceback
    other = messages.Error.of("j", None, ValueError("x"), file="b.h5")
    assert (other.file, other.video, other.frame, other.unit) == ("b.h5", None, None, None)
    assert round_trip(error) == error and error.file_number is None


def test_error_of_a_file_read_error_carries_the_file_number() -> None:
    exc = FileReadError("cannot stat the file", file="/data/b.h5", host="node-a", number=5)
    error = messages.Error.of("j", None, exc, file="b.h5")
    assert (error.type, error.file, error.file_number) == ("FileReadError", "/data/b.h5", 5)
    assert "on host 'node-a'" in error.message
    assert round_trip(error) == error


def test_a_refusing_bye_says_so() -> None:
    assert messages.Bye.refusing("version 9").refused
    decoded = round_trip(messages.Bye.refusing("version 9"))
    assert isinstance(decoded, messages.Bye) and decoded.reason.startswith(wire.REFUSED)
    assert decoded.refused
    assert not messages.Bye("iteration over").refused


# --------------------------------------------------------------------------------------------
# Property: anything built from valid values decodes to itself
# --------------------------------------------------------------------------------------------

ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
naturals = st.integers(min_value=0, max_value=2**64 - 1)
texts = st.text(max_size=8)
# Plain msgpack values inside maps (no NaN: it is not equal to itself; lists, not tuples:
# msgpack gives lists back).
plain = st.recursive(
    st.none() | st.booleans() | ints | st.floats(allow_nan=False) | texts | st.binary(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=8,
)
maps = st.dictionaries(texts, plain, max_size=4)
rows = st.builds(
    Row, ints, ints, ints, ints, st.floats(allow_nan=False), st.floats(0, 1), st.booleans(), ints
)


@st.composite
def units(draw: st.DrawFn) -> messages.Unit:
    unit_rows = tuple(draw(st.lists(rows, max_size=4)))
    slot = None
    if draw(st.booleans()):
        batch_rows = draw(st.integers(len(unit_rows), 12))
        positions = draw(st.permutations(range(batch_rows)))[: len(unit_rows)]
        slot = SlotRef(draw(naturals), draw(naturals), batch_rows, tuple(positions))
    return messages.Unit(draw(texts), draw(ints), draw(ints), draw(ints), unit_rows, slot)


head = (texts, ints, ints, ints)  # job, unit, batch, epoch
any_message = st.one_of(
    st.builds(messages.Hello, texts, ints, texts, texts),
    st.builds(
        messages.Job,
        texts,
        st.lists(st.builds(FileRef, ints, texts), max_size=3).map(tuple),
        maps,
        maps,
        st.none() | texts,
        st.sampled_from(messages.ON_ERROR_CHOICES),
    ),
    st.builds(
        messages.Index,
        texts,
        ints,
        st.lists(st.builds(VideoEntry, texts, st.integers(1, 2**64 - 1), ints), max_size=3).map(
            tuple
        ),
    ),
    units(),
    st.builds(messages.Items, *head, st.lists(ints, max_size=5).map(tuple)),
    st.builds(messages.Pull, *head, st.integers(1, 2**64 - 1), naturals),
    st.builds(messages.Data, texts, ints, ints, st.lists(ints | texts, max_size=4).map(tuple)),
    st.builds(
        messages.Data,
        texts,
        ints,
        ints,
        st.just((5, 6, 7)),
        st.just({}),
        st.permutations(range(3)).map(
            lambda order: tuple(SkippedRow(p, 2 * p, f"r{p}") for p in order[:2])
        ),
    ),
    st.builds(
        messages.Error,
        texts,
        st.none() | ints,
        texts,
        texts,
        texts,
        st.none() | texts,
        st.none() | texts,
        st.none() | ints,
        st.none() | ints,
    ),
    st.builds(messages.Bye, texts),
    st.builds(
        messages.Source,
        texts,
        texts,
        maps,
        st.lists(texts, max_size=3).map(tuple),
        ints,
        ints,
        ints,
        ints,
        st.none() | maps,
        st.booleans(),
    ),
    st.builds(
        messages.SourceInfo,
        texts,
        texts,
        st.none() | ints,
        maps,
        ints,
        st.lists(
            st.builds(messages.ItemCheck, ints, st.binary(max_size=64), st.booleans()),
            max_size=messages.MAX_CHECKS,
        ).map(tuple),
    ),
    st.builds(messages.Check, texts, ints),
    st.just(messages.Ping()),
    st.builds(
        messages.Attach,
        st.integers(1, MAX_PORT),
        st.from_regex(TRAINER_NAME, fullmatch=True),
    ),
    st.builds(
        messages.Attached, st.text(max_size=256), st.integers(0, 1 << 20), st.integers(1, 1 << 20)
    ),
)


@PROPERTY
@given(message=any_message)
def test_property_every_message_round_trips(message: messages.Message) -> None:
    assert_same(round_trip(message), message)


# --------------------------------------------------------------------------------------------
# Malformed nested values: ProtocolError on decode, whatever wire's field check let through
# --------------------------------------------------------------------------------------------

ROW = [0, 3, 1, 16, 0.5, 0.0, True, 99]
UNIT = {"job": "j", "unit": 7, "batch": 2, "epoch": 1, "rows": [ROW, ROW], "slot": None}


def fields_of(message: messages.Message) -> dict[str, Any]:
    """The header fields ``encode`` writes for ``message`` (as the peer decodes them)."""
    header = msgpack.unpackb(messages.encode(message)[0], raw=False)
    fields: dict[str, Any] = header[3]
    return fields


MALFORMED: dict[str, tuple[str, dict[str, Any], str]] = {
    "unit-row-of-7": (wire.UNIT, {**UNIT, "rows": [ROW[:7]]}, "list of 8 values"),
    "unit-row-of-9": (wire.UNIT, {**UNIT, "rows": [[*ROW, 0]]}, "list of 8 values"),
    "unit-row-not-a-list": (wire.UNIT, {**UNIT, "rows": [5]}, "list of 8 values"),
    "unit-row-bool-for-int": (wire.UNIT, {**UNIT, "rows": [[True, *ROW[1:]]]}, "bad UNIT row"),
    "unit-row-int-for-bool": (wire.UNIT, {**UNIT, "rows": [[*ROW[:6], 1, 99]]}, "bad UNIT row"),
    "unit-row-str-for-int": (wire.UNIT, {**UNIT, "rows": [["0", *ROW[1:]]]}, "bad UNIT row"),
    "unit-row-float-for-int": (wire.UNIT, {**UNIT, "rows": [[*ROW[:3], 1.0, *ROW[4:]]]}, "bad"),
    "slot-of-3": (wire.UNIT, {**UNIT, "slot": [1, 2, 4]}, "list of 4 values"),
    "slot-position-out-of-range": (
        wire.UNIT,
        {**UNIT, "slot": [1, 2, 4, [0, 4]]},
        "do not fit 4 rows",
    ),
    "slot-position-negative": (wire.UNIT, {**UNIT, "slot": [1, 2, 4, [0, -1]]}, "do not fit"),
    "slot-position-repeated": (wire.UNIT, {**UNIT, "slot": [1, 2, 4, [1, 1]]}, "bad UNIT slot"),
    "slot-positions-fewer-than-rows": (wire.UNIT, {**UNIT, "slot": [1, 2, 4, [0]]}, "bad UNIT"),
    "slot-fd-negative": (wire.UNIT, {**UNIT, "slot": [1, -2, 4, [0, 1]]}, "bad UNIT slot"),
    "slot-fd-bool": (wire.UNIT, {**UNIT, "slot": [1, True, 4, [0, 1]]}, "bad UNIT slot"),
    "slot-positions-str": (wire.UNIT, {**UNIT, "slot": [1, 2, 4, "01"]}, "bad UNIT slot"),
    "slot-position-bool": (wire.UNIT, {**UNIT, "slot": [1, 2, 4, [0, True]]}, "positions"),
    "items-bool": (wire.ITEMS, {**fields_of(SAMPLES[4]), "items": [1, True]}, "list of ints"),
    "items-float": (wire.ITEMS, {**fields_of(SAMPLES[4]), "items": [1.0]}, "list of ints"),
    "items-nested": (wire.ITEMS, {**fields_of(SAMPLES[4]), "items": [[1]]}, "list of ints"),
    "pull-count-0": (wire.PULL, {**fields_of(SAMPLES[5]), "count": 0}, "PULL of 0 elements"),
    "pull-pass-negative": (wire.PULL, {**fields_of(SAMPLES[5]), "pass": -1}, "of pass -1"),
    "index-video-0-frames": (
        wire.INDEX,
        {"job": "j", "file": 0, "videos": [["v0", 0, 1]]},
        "has 0 frames",
    ),
    "index-video-of-2": (wire.INDEX, {"job": "j", "file": 0, "videos": [["v0", 3]]}, "of 3"),
    "index-label-str": (wire.INDEX, {"job": "j", "file": 0, "videos": [["v0", 3, "x"]]}, "bad"),
    "index-frames-bool": (wire.INDEX, {"job": "j", "file": 0, "videos": [["v", True, 1]]}, "bad"),
    "job-file-not-a-pair": (
        wire.JOB,
        {**fields_of(SAMPLES[1]), "files": ["a.h5"]},
        "JOB file must be a list of 2",
    ),
    "job-file-number-str": (
        wire.JOB,
        {**fields_of(SAMPLES[1]), "files": [["0", "a.h5"]]},
        "bad JOB file",
    ),
    "job-on-error-unknown": (
        wire.JOB,
        {**fields_of(SAMPLES[1]), "on_error": "ignore"},
        "JOB on_error 'ignore'",
    ),
    "data-skipped-position-out-of-range": (
        wire.DATA,
        {**fields_of(SAMPLES[6]), "skipped": [[2, 0, "x"]]},
        "do not fit 2 samples",
    ),
    "data-skipped-position-negative": (
        wire.DATA,
        {**fields_of(SAMPLES[6]), "skipped": [[-1, 0, "x"]]},
        "do not fit 2 samples",
    ),
    "data-skipped-position-repeated": (
        wire.DATA,
        {**fields_of(SAMPLES[6]), "skipped": [[0, 0, "x"], [0, 1, "y"]]},
        "do not fit 2 samples",
    ),
    "data-skipped-more-than-samples": (
        wire.DATA,
        {**fields_of(SAMPLES[6]), "skipped": [[0, 0, "x"], [1, 0, "y"], [2, 0, "z"]]},
        "do not fit 2 samples",
    ),
    "data-skipped-frame-negative": (
        wire.DATA,
        {**fields_of(SAMPLES[6]), "skipped": [[0, -3, "x"]]},
        "bad DATA skipped row",
    ),
    "data-skipped-reason-too-long": (
        wire.DATA,
        {**fields_of(SAMPLES[6]), "skipped": [[0, 0, "x" * (messages.MAX_SKIP_REASON + 1)]]},
        "bad DATA skipped row",
    ),
    "data-skipped-of-2": (
        wire.DATA,
        {**fields_of(SAMPLES[6]), "skipped": [[0, 0]]},
        "DATA skipped row must be a list of 3",
    ),
    "data-skipped-reason-bytes": (
        wire.DATA,
        {**fields_of(SAMPLES[6]), "skipped": [[0, 0, b"x"]]},
        "bad DATA skipped row",
    ),
    "source-sys-path-non-str": (
        wire.SOURCE,
        {**fields_of(SAMPLES[9]), "sys_path": ["/ok", 3]},
        "sys_path must be a list of str",
    ),
    "source-sys-path-bytes": (
        wire.SOURCE,
        {**fields_of(SAMPLES[9]), "sys_path": [b"/x"]},
        "sys_path must be a list of str",
    ),
}


@pytest.mark.parametrize(("kind", "fields", "match"), MALFORMED.values(), ids=list(MALFORMED))
def test_malformed_nested_values_raise_protocol_error(
    kind: str, fields: dict[str, Any], match: str
) -> None:
    frames = wire.encode(kind, fields)  # the fields match the schema: only the nesting is bad
    wire.decode(frames)
    with pytest.raises(ProtocolError, match=match) as info:
        messages.decode(frames)
    assert not isinstance(info.value, VersionMismatchError)


def test_malformed_cases_are_what_they_say() -> None:
    """The UNIT the malformed cases start from is valid: only the change makes them fail."""
    assert isinstance(messages.decode(wire.encode(wire.UNIT, UNIT)), messages.Unit)
    good_slot = {**UNIT, "slot": [1, 2, 4, [3, 0]]}
    decoded = messages.decode(wire.encode(wire.UNIT, good_slot))
    assert isinstance(decoded, messages.Unit) and decoded.slot == SlotRef(1, 2, 4, (3, 0))


# --------------------------------------------------------------------------------------------
# Golden headers of the kinds protocol 3 added (and a typed UNIT): one message, one encoding
# --------------------------------------------------------------------------------------------

MAGIC_AND_VERSION = "95 a6 683566656564 05"  # fixarray(5), fixstr(6) "h5feed", fixint 5

GOLDEN_ITEMS = bytes.fromhex(
    MAGIC_AND_VERSION
    + "a5 6974656d73"  # fixstr(5) "items"
    + "85"  # fixmap(5), keys sorted: batch, epoch, items, job, unit
    + "a5 6261746368 02"  # "batch": 2
    + "a5 65706f6368 01"  # "epoch": 1
    + "a5 6974656d73 93 04 00 09"  # "items": [4, 0, 9]
    + "a3 6a6f62 a2 6a31"  # "job": "j1"
    + "a4 756e6974 07"  # "unit": 7
    + "90"  # fixarray(0): no arrays
)

GOLDEN_PULL = bytes.fromhex(
    MAGIC_AND_VERSION
    + "a4 70756c6c"  # fixstr(4) "pull"
    + "86"  # fixmap(6), keys sorted: batch, count, epoch, job, pass, unit
    + "a5 6261746368 02"  # "batch": 2
    + "a5 636f756e74 10"  # "count": 16
    + "a5 65706f6368 01"  # "epoch": 1
    + "a3 6a6f62 a2 6a31"  # "job": "j1"
    + "a4 70617373 01"  # "pass": 1 (the attribute is pass_: pass is a Python keyword)
    + "a4 756e6974 07"  # "unit": 7
    + "90"
)

GOLDEN_INDEX_BATCH = bytes.fromhex(
    MAGIC_AND_VERSION
    + "ab 696e6465785f6261746368"  # fixstr(11) "index_batch"
    + "84"  # fixmap(4), keys sorted: counts, files, job, names
    + "a6 636f756e7473 91 02"  # "counts": [2]
    + "a5 66696c6573 91 03"  # "files": [3]
    + "a3 6a6f62 a2 6a31"  # "job": "j1"
    + "a5 6e616d6573 92 c4 02 7630 c4 02 7631"  # "names": [bin "v0", bin "v1"] (UTF-8)
    + "92"  # fixarray(2): two arrays, frames then labels
    + "93 a6 6672616d6573 a3 3c6938 91 02"  # ["frames", "<i8", [2]]
    + "93 a6 6c6162656c73 a3 3c6938 91 02"  # ["labels", "<i8", [2]]
)


def test_golden_index_batch() -> None:
    """INDEX_BATCH (added in protocol 4, additively): columns; frames and labels as arrays."""
    message = messages.IndexBatch(
        "j1", (3,), (2,), (b"v0", b"v1"), np.array([5, 1], np.int64), np.array([7, -1], np.int64)
    )
    frames = messages.encode(message, 5)  # version 5's golden (6 changed only byte 8)
    assert frame_bytes(frames[0]) == GOLDEN_INDEX_BATCH
    assert [frame_bytes(f) for f in frames[1:]] == [
        np.array([5, 1], "<i8").tobytes(),
        np.array([7, -1], "<i8").tobytes(),
    ]


def _index_batch_frames(
    files: list[Any], counts: list[Any], names: list[Any], frames: Any, labels: Any
) -> list[Any]:
    fields = {"job": "j", "files": files, "counts": counts, "names": names}
    arrays = [("frames", np.asarray(frames)), ("labels", np.asarray(labels))]
    return wire.encode(wire.INDEX_BATCH, fields, arrays)


I8 = np.int64
MALFORMED_INDEX_BATCH = {
    "counts-do-not-add-up": (_index_batch_frames([0], [2], [b"a"], I8([1]), I8([0])), "int64"),
    "names-short": (_index_batch_frames([0], [2], [b"a"], I8([1, 1]), I8([0, 0])), "2 byte"),
    "name-not-bytes": (_index_batch_frames([0], [1], [3], I8([1]), I8([0])), "1 byte strings"),
    "name-str": (_index_batch_frames([0], [1], ["a"], I8([1]), I8([0])), "1 byte strings"),
    "zero-frames": (_index_batch_frames([0], [1], [b"a"], I8([0]), I8([0])), "fewer than 1"),
    "file-repeated": (
        _index_batch_frames([0, 0], [1, 1], [b"a", b"b"], I8([1, 1]), I8([0, 0])),
        "distinct",
    ),
    "count-zero": (_index_batch_frames([0, 1], [0, 1], [b"a"], I8([1]), I8([0])), "distinct"),
    "frames-float": (_index_batch_frames([0], [1], [b"a"], np.float64([1]), I8([0])), "int64"),
    "files-not-ints": (_index_batch_frames(["x"], [1], [b"a"], I8([1]), I8([0])), "list of ints"),
    "counts-longer": (_index_batch_frames([0], [1, 1], [b"a"], I8([1]), I8([0])), "one count"),
    "no-arrays": (
        wire.encode(wire.INDEX_BATCH, {"job": "j", "files": [], "counts": [], "names": []}),
        "arrays",
    ),
}


@pytest.mark.parametrize(
    ("frames", "match"), MALFORMED_INDEX_BATCH.values(), ids=list(MALFORMED_INDEX_BATCH)
)
def test_malformed_index_batch_raises_protocol_error(frames: list[Any], match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        messages.decode([frame_bytes(f) for f in frames])


# Protocol 5: CHECK, and SOURCE_INFO's checks ([item, digest, reproducible], digest as bin).
GOLDEN_CHECK = bytes.fromhex(
    MAGIC_AND_VERSION
    + "a5 636865636b"  # fixstr(5) "check"
    + "82"  # fixmap(2), keys sorted: epoch, job
    + "a5 65706f6368 03"  # "epoch": 3
    + "a3 6a6f62 a2 6a31"  # "job": "j1"
    + "90"
)
GOLDEN_SOURCE_INFO = bytes.fromhex(
    MAGIC_AND_VERSION
    + "ab 736f757263655f696e666f"  # fixstr(11) "source_info"
    + "86"  # fixmap(6), keys sorted: checks, epoch, job, kind, length, spec
    + "a6 636865636b73 91 93 05 c4 02 abcd c3"  # "checks": [[5, bin8(2) ab cd, true]]
    + "a5 65706f6368 01"  # "epoch": 1
    + "a3 6a6f62 a2 6a31"  # "job": "j1"
    + "a4 6b696e64 a5 6b65726173"  # "kind": "keras"
    + "a6 6c656e677468 07"  # "length": 7
    + "a4 73706563 80"  # "spec": {}
    + "90"
)

GOLDENS = [
    (messages.Check("j1", 3), GOLDEN_CHECK),
    (
        messages.SourceInfo("j1", "keras", 7, {}, 1, (messages.ItemCheck(5, b"\xab\xcd", True),)),
        GOLDEN_SOURCE_INFO,
    ),
    (messages.Items("j1", 7, 2, 1, (4, 0, 9)), GOLDEN_ITEMS),
    (messages.Pull("j1", 7, 2, 1, 16, 1), GOLDEN_PULL),
    (
        messages.Unit(
            "j1", 7, 2, 1, (Row(0, 1, 2, 3, 0.5, 0.25, True, 9),), SlotRef(4242, 9, 8, (3,))
        ),
        GOLDEN_UNIT,
    ),
]


@pytest.mark.parametrize(
    ("message", "golden"), GOLDENS, ids=["check", "source_info", "items", "pull", "unit"]
)
def test_golden_header(message: messages.Message, golden: bytes) -> None:
    """Version 5's goldens (version 6 changed only byte 8 of these kinds:
    tests/unit/common/test_protocol_versions.py)."""
    frames = messages.encode(message, 5)
    assert frames == [golden]
    assert messages.decode_said([golden]) == (message, 5)


# --------------------------------------------------------------------------------------------
# Fuzz: random input raises ProtocolError or decodes to a valid message, never anything else
# --------------------------------------------------------------------------------------------


def decode_or_protocol_error(frames: list[bytes]) -> None:
    try:
        message = messages.decode(frames)
    except ProtocolError:
        return
    assert message.KIND in wire.KINDS
    # What decodes is valid: it encodes again, to the same message.
    assert_same(round_trip(message), message)


@PROPERTY
@given(data=st.binary(max_size=300), extra=st.lists(st.binary(max_size=16), max_size=3))
def test_property_random_bytes(data: bytes, extra: list[bytes]) -> None:
    decode_or_protocol_error([data, *extra])


# Record-like nested values (short lists of scalars), so that random fields reach the nested
# checks of rows, videos, files and slots rather than failing the top-level type check.
scalars = st.none() | st.booleans() | ints | st.floats(allow_nan=False) | texts
records = st.lists(scalars | st.lists(ints, max_size=3), min_size=2, max_size=9)
FIELD_VALUES: dict[type, st.SearchStrategy[Any]] = {
    int: ints,
    float: st.floats(),  # NaN and infinities too: a float field's range refuses them
    bool: st.booleans(),
    str: texts,
    type(None): st.none(),
    dict: maps,
    list: st.lists(records | scalars, max_size=4) | records,
}


@st.composite
def schema_shaped_headers(draw: st.DrawFn) -> bytes:
    """A header of this version whose fields have the schema's top-level types, with random
    contents: wire's field check passes, messages' nested checks decide."""
    kind = draw(st.sampled_from(sorted(wire.KINDS)))
    fields = {
        name: draw(st.one_of(*(FIELD_VALUES[t] for t in types)))
        for name, types in wire.SCHEMAS[kind].items()
    }
    header: bytes = msgpack.packb(
        [wire.MAGIC, wire.PROTOCOL_VERSION, kind, fields, []], use_bin_type=True
    )
    return header


@PROPERTY
@given(header=schema_shaped_headers())
def test_property_random_fields_of_the_right_top_level_type(header: bytes) -> None:
    decode_or_protocol_error([header])


VALID_ENCODED = [[frame_bytes(f) for f in messages.encode(m)] for m in SAMPLES]


@PROPERTY
@given(
    original=st.sampled_from(VALID_ENCODED),
    position=st.integers(min_value=0),
    bit=st.integers(0, 7),
    cut=st.booleans(),
)
def test_property_mutated_messages(
    original: list[bytes], position: int, bit: int, cut: bool
) -> None:
    header = bytearray(original[0])
    position %= len(header)
    if cut:
        del header[position:]
    else:
        header[position] ^= 1 << bit
    decode_or_protocol_error([bytes(header), *original[1:]])


def _source_info_frames(checks: Any) -> list[bytes]:
    fields = {"job": "j", "kind": "map", "length": 3, "spec": {}, "epoch": 0, "checks": checks}
    return [frame_bytes(f) for f in wire.encode(wire.SOURCE_INFO, fields)]


@pytest.mark.parametrize(
    ("checks", "match"),
    [
        ([[0, b"x", True]] * (messages.MAX_CHECKS + 1), "17 checks"),
        ([[0, b"x" * (messages.MAX_DIGEST_BYTES + 1), True]], "digest too long"),
        ([[0, "text", True]], "bad SOURCE_INFO check"),
        ([[0, b"x", 1]], "bad SOURCE_INFO check"),
        ([[True, b"x", True]], "bad SOURCE_INFO check"),
        ([[0, b"x"]], "list of 3 values"),
    ],
)
def test_malformed_source_info_checks_raise_protocol_error(checks: Any, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        messages.decode(_source_info_frames(checks))


# Every string a peer sends has a bound of its own (issue 38, item 4): a HELLO's host is a DNS
# name (253 characters), its worker a ZeroMQ routing id (255 bytes), its package the h5feed
# version or the version-5 legacy text.
LONGEST_HELLO = messages.Hello(
    "w" * MAX_WORKER_NAME, 1, "h" * MAX_HOST, "p" * MAX_PACKAGE, "n" * MAX_NONCE
)


def test_the_longest_legal_hello_is_accepted() -> None:
    assert round_trip(LONGEST_HELLO) == LONGEST_HELLO
    legacy = legacy_package("0.1.0+" + "g" * 58, VersionRange(5, 6), 1)  # a 64-char version
    pod = "trainer-" + "x" * 245  # a pod name as long as a DNS name may be
    hello = messages.Hello("worker-0", 1, pod, legacy, "5f0c2a" * 5)
    assert round_trip(hello) == hello
    assert round_trip(messages.Hello("w", 1, "node-a", PREVIOUS_PACKAGE, "n")).package == "0.1.0"


@pytest.mark.parametrize(
    ("field", "length", "match"),
    [
        ("host", MAX_HOST + 1, "HELLO host too long: 254 host, at most 253"),
        ("host", 1 << 20, "HELLO host too long"),
        ("worker", MAX_WORKER_NAME + 1, "HELLO worker too long"),
        ("package", MAX_PACKAGE + 1, "HELLO package too long"),
        ("nonce", MAX_NONCE + 1, "HELLO nonce too long"),
    ],
)
def test_a_hello_with_a_string_past_its_bound_is_refused(
    field: str, length: int, match: str
) -> None:
    fields = {**fields_of(LONGEST_HELLO), field: "x" * length}
    frames = wire.encode(wire.HELLO, fields)  # wire checks types only: the schema refuses
    with pytest.raises(ProtocolError, match=match):
        messages.decode([frame_bytes(f) for f in frames])


@PROPERTY
@given(
    st.sampled_from(["worker", "host", "package", "nonce"]),
    st.text(min_size=0, max_size=600),
)
def test_property_a_hello_string_decodes_exactly_when_within_its_bound(
    field: str, text: str
) -> None:
    bound = {"worker": MAX_WORKER_NAME, "host": MAX_HOST}.get(field)
    bound = bound or {"package": MAX_PACKAGE, "nonce": MAX_NONCE}[field]
    frames = [
        frame_bytes(f) for f in wire.encode(wire.HELLO, {**fields_of(LONGEST_HELLO), field: text})
    ]
    if len(text) <= bound:
        assert getattr(messages.decode(frames), field) == text  # kept whole, never cut
    else:
        with pytest.raises(ProtocolError, match=f"HELLO {field} too long"):
            messages.decode(frames)


def test_an_error_of_a_long_exception_is_cut_by_its_sender_and_says_so() -> None:
    """The worker cuts its own text to the bounds (a peer's longer text is refused)."""
    error = messages.Error.of("job-1", 3, ValueError("x" * (MAX_MESSAGE + 5)))
    assert len(error.message) <= MAX_MESSAGE and error.message.endswith("characters cut] ")
    assert round_trip(error) == error
