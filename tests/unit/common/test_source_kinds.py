"""Source kinds are classes named by one enum: every member has its producer class (detect,
load) and its consumer scheduler, and the wire names are today's strings."""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest
from paths import REPO

from h5feed.common.errors import SourceError
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.consumer.sources.kinds import SCHEDULERS
from h5feed.producer.sources import KINDS, detect_kind


def test_the_wire_names_never_change() -> None:  # protocol 5: SOURCE_INFO's kind field
    assert [kind.value for kind in SourceKind] == ["map", "keras", "generator"]
    assert SourceKind.of_wire("keras") is SourceKind.KERAS
    assert SourceKind.of_wire("tfrecord") is None and SourceKind.of_wire(3) is None


def test_every_kind_has_one_producer_class() -> None:
    assert sorted(cls.kind for cls in KINDS) == sorted(SourceKind)


class PyDataset:  # named as keras names it, but from this module: not keras
    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> int:
        return index


def _generator() -> Any:
    yield 1


class _WithGenerateData:
    def generate_data(self) -> list[int]:
        return [1]


@pytest.mark.parametrize(
    ("obj", "kind"),
    [
        ([1, 2], SourceKind.MAP),
        (PyDataset(), SourceKind.MAP),
        (_generator(), SourceKind.GENERATOR),
        (_WithGenerateData(), SourceKind.GENERATOR),
        ({1, 2}, SourceKind.GENERATOR),
        (lambda: [1], SourceKind.GENERATOR),
    ],
)
def test_detection_asks_each_kind_in_turn(obj: Any, kind: SourceKind) -> None:
    assert detect_kind(obj).kind is kind


class _Batches:
    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> int:
        return index


def test_a_keras_dataset_is_detected_before_a_map() -> None:
    # by class name and module, as the worker checks it (it never imports TensorFlow)
    keras_base = type("PyDataset", (), {"__module__": "keras.src.trainers.data_adapters"})
    batches = type("Batches", (_Batches, keras_base), {})
    assert detect_kind(batches()).kind is SourceKind.KERAS
    tf_base = type("Sequence", (), {"__module__": "tensorflow.keras.utils"})
    assert detect_kind(type("Old", (_Batches, tf_base), {})()).kind is SourceKind.KERAS
    assert detect_kind(_Batches()).kind is SourceKind.MAP


@pytest.mark.parametrize("obj", [{"a": 1}, "text", b"bytes", 3])
def test_what_no_kind_takes_is_refused(obj: Any) -> None:
    with pytest.raises(SourceError, match=r"is not a source|none of"):
        detect_kind(obj)


def test_every_kind_has_one_consumer_scheduler() -> None:
    assert sorted(SCHEDULERS) == sorted(SourceKind)
    assert all(cls.kind is kind for kind, cls in SCHEDULERS.items())


def test_the_docs_row_on_adding_a_kind_names_what_exists() -> None:
    """docs/architecture/index.md "Where to change what", "add a source kind": every file it
    names exists, and every name it places in a file is defined there."""
    root = REPO
    row = next(
        line
        for line in (root / "docs" / "architecture" / "index.md").read_text().splitlines()
        if line.startswith("| add a source kind |")
    )
    files = re.findall(r"`([\w/]+\.py)`", row)
    assert len(files) == 6, row
    for file in files:
        assert (root / ("" if file.startswith("tests/") else "h5feed") / file).is_file(), file
    placed = re.findall(r"`(\w+)` in `([\w/]+\.py)`", row) + re.findall(
        r"in `(\w+)` of `([\w/]+\.py)`", row
    )
    assert len(placed) == 5, row
    for name, file in placed:
        module = importlib.import_module("h5feed." + file.removesuffix(".py").replace("/", "."))
        assert hasattr(module, name), (name, file)
