"""One configuration: the dataclasses hold every default, and every other place that states
the arguments (``FeedKwargs``, ``dataset()``'s docstring, the parameter table of
docs/trainer/parameters.md) is
checked against them; configs are frozen and made whole before any process starts."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import pathlib
import re
import typing

import pytest
from paths import REPO

import h5feed
from h5feed.common import layouts
from h5feed.common.config import ClipSpec
from h5feed.consumer import api
from h5feed.consumer.config.groups import (
    GROUPS,
    FeedOptions,
    NetworkOptions,
    ProcessOptions,
    RecordOptions,
)
from h5feed.consumer.hdf5.config import hdf_config
from h5feed.consumer.options import DataOptions, FeedConfig, HdfConfig, LayoutArgs
from h5feed.consumer.parameters import FeedKwargs, describe_parameters
from h5feed.consumer.plan.epoch_plan import Index, PlanOptions
from h5feed.consumer.sources.api import make_source_config
from h5feed.consumer.sources.options import SOURCE_KEYS, SourceConfig

PARAMETERS = REPO / "docs" / "trainer" / "parameters.md"


def _names(cls: type[object]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]


def _split_top_level(text: str) -> list[str]:
    """``text`` split at commas outside brackets and quotes: ``a=(0, 1), b="x, y"``."""
    parts, depth, quote, current = [], 0, "", ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        parts.append(current.strip())
    return parts


# -- one list of arguments ---------------------------------------------------------------


def test_feed_kwargs_are_the_fields_of_the_dataclasses_and_the_source_keys() -> None:
    options = [name for group in GROUPS for name in _names(group)]
    assert options == list(FeedOptions.names())
    groups = [_names(ClipSpec), _names(LayoutArgs), options, _names(DataOptions), list(SOURCE_KEYS)]
    every = [name for group in groups for name in group]
    assert len(every) == len(set(every)), "an argument belongs to two dataclasses"
    assert set(FeedKwargs.__annotations__) == set(every)
    assert list(describe_parameters()) == every


def test_describe_parameters_renders_the_dataclass_defaults() -> None:
    described = describe_parameters()
    assert described["clip_len"] == str(ClipSpec().clip_len)
    assert described["crop_mode"] == f'"{ClipSpec().crop_mode}"'
    assert described["shard"] == "(0, 1)"
    assert described["start_timeout_s"] == f"{FeedOptions().processes.start_timeout_s:g}"
    assert described["label_key"] == '"label"'
    assert described["index_cache"] == "True"  # the argument's default: the default directory
    assert described["ragged"] == "False"
    assert described["source"] == described["source_args"] == "None"
    for text in described.values():  # every default is a Python literal
        ast.literal_eval(text)


def test_dataset_docstring_lists_every_default_as_the_dataclasses_have_it() -> None:
    doc = inspect.getdoc(api.dataset) or ""
    start = doc.index("Defaults (")
    block = doc[start : doc.index("\n\n", doc.index("\n* ", start))]  # the bullet list
    listed: dict[str, str] = {}
    for span in re.findall(r"``([^`]*=[^`]*)``", block, flags=re.S):
        for item in _split_top_level(" ".join(span.split())):
            name, _, value = item.partition("=")
            assert name not in listed, f"{name} listed twice"
            listed[name] = value
    assert listed == describe_parameters()


#: The docs page's sections (``## Title (`Class`)``) and the names each must hold: the code's
#: groups of the same arguments, in dataset()'s docstring's order.
DOCS_GROUPS = {
    "ClipSpec": _names(ClipSpec),
    "LayoutArgs": _names(LayoutArgs),
    "PlanOptions": _names(PlanOptions),
    "ProcessOptions": _names(ProcessOptions),
    "NetworkOptions": _names(NetworkOptions),
    "RecordOptions": _names(RecordOptions),
    "DataOptions": _names(DataOptions),
    "SourceConfig": list(SOURCE_KEYS),
    "dataset()": ["prefetch", "keys", "resume"],  # dataset()'s own arguments
}


def _docs_tables() -> dict[str, dict[str, str]]:
    """Each section's table of the parameters page: its group (the class its title names,
    or ``dataset()``) -> {parameter: default as written}."""
    text = PARAMETERS.read_text()
    tables: dict[str, dict[str, str]] = {}
    for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        title, _, body = section.partition("\n")
        if "| parameter | default |" not in body:
            continue
        group = re.findall(r"`([\w()]+)`", title)[-1]
        table = body[body.index("| parameter | default |") :]
        table = table[: table.index("\n\n")] if "\n\n" in table else table
        rows: dict[str, str] = {}
        for line in table.strip().splitlines()[2:]:  # header, separator
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            names = re.findall(r"`(\w+)`", cells[0])
            defaults = _split_top_level(cells[1]) if len(names) > 1 else [cells[1]]
            assert len(defaults) == len(names), f"docs row {line!r}: a default per name"
            for name, default in zip(names, defaults, strict=True):
                assert name not in rows, f"{name} is in the docs table twice"
                rows[name] = default
        assert group not in tables, f"two sections for {group}"
        tables[group] = rows
    return tables


def _docs_table() -> dict[str, str]:
    rows: dict[str, str] = {}
    for table in _docs_tables().values():
        assert not set(rows) & set(table), f"in two tables: {sorted(set(rows) & set(table))}"
        rows.update(table)
    return rows


def test_docs_parameter_tables_are_the_codes_groups() -> None:
    tables = _docs_tables()
    assert list(tables) == list(DOCS_GROUPS), "the page's sections are not the code's groups"
    for group, names in DOCS_GROUPS.items():
        assert sorted(tables[group]) == sorted(names), (group, sorted(tables[group]), names)


def test_docs_parameter_table_shows_every_default_as_the_dataclasses_have_it() -> None:
    rows = _docs_table()
    tf_only = inspect.signature(api.dataset).parameters  # dataset()'s own: prefetch, keys
    assert rows.pop("prefetch") == repr(tf_only["prefetch"].default)
    assert rows.pop("keys") == repr(tf_only["keys"].default).replace("'", '"')
    assert rows.pop("resume") == repr(tf_only["resume"].default)
    assert rows == describe_parameters()


def test_a_wrong_docs_default_is_caught() -> None:
    """The docs check compares texts exactly: a drifted default is a difference."""
    rows = _docs_table()
    rows["clip_len"] = "8"
    rows.pop("prefetch")
    rows.pop("resume")
    assert rows != describe_parameters()


# -- the configs ---------------------------------------------------------------------------


def test_feed_config_is_an_hdf5_or_a_source_config() -> None:
    assert typing.get_args(FeedConfig) == (HdfConfig, SourceConfig)
    assert _names(HdfConfig) == ["files", "clip", "layout", "options", "data", "file_labels"]
    assert "clip" not in _names(SourceConfig) and "kind" not in _names(SourceConfig)
    assert not {"layout", "frames_key", "label_key"} & set(_names(ClipSpec))


def test_hdf_config_resolves_the_layout_apart_from_the_clip(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.h5"
    path.write_bytes(b"")
    config = hdf_config(str(path), {"clip_len": 4, "resize": 32, "frames_key": "jpeg"})
    assert config.files == (str(path),)
    assert config.clip == ClipSpec(clip_len=4, resize=(32, 32))
    assert config.layout == layouts.Auto(frames="jpeg", label="label")
    assert config.options == FeedOptions()
    assert config.data == DataOptions(index_cache=config.data.index_cache)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.clip = ClipSpec()  # type: ignore[misc]
    flat = hdf_config(str(path), {"layout": "flat", "index_cache": False})
    assert flat.layout == layouts.Flat() and flat.data.index_cache is None
    with pytest.raises(TypeError, match=r"unknown arguments.*'ragged'"):
        hdf_config(str(path), {"ragged": True})
    with pytest.raises(TypeError, match="give the HDF5 files"):
        hdf_config(None, {})
    with pytest.raises(ValueError, match="give its names in the layout itself"):
        hdf_config(str(path), {"layout": "raw", "label_key": "y"})


def test_a_source_config_holds_no_clip_and_only_the_given_spec() -> None:
    config = make_source_config(None, {"source": "user_sources:Squares", "batch_size": 3})
    assert isinstance(config, SourceConfig)
    assert config.spec is None and config.options.plan.batch_size == 3
    assert not hasattr(config, "data")  # no data group: no index cache, no clip placement
    with pytest.raises(TypeError, match="do not apply to source="):
        make_source_config(None, {"source": "user_sources:Squares", "layout": "flat"})
    arguments = {"source": "user_sources:Squares", "workers": 1}
    assert h5feed.batches(**arguments).config == make_source_config(None, arguments)


@pytest.mark.parametrize("name", _names(DataOptions))
def test_a_source_refuses_every_option_of_the_data_group_by_name(name: str) -> None:
    """A source feed has no data group: each HDF5-only argument is refused, named, even at
    its default value (it would be silently ignored otherwise)."""
    default = describe_parameters()[name]
    arguments = {"source": "user_sources:Squares", name: ast.literal_eval(default)}
    with pytest.raises(TypeError, match=rf"arguments \['{name}'\] do not apply to source="):
        make_source_config(None, arguments)


def test_options_are_grouped_and_the_plan_group_is_the_plan_options() -> None:
    options = FeedOptions.of({"batch_size": 3, "workers": 5, "listen": None, "seed": 9})
    assert options.plan == PlanOptions(batch_size=3, seed=9)
    assert options.processes == ProcessOptions(workers=5)
    assert options.network == NetworkOptions()
    assert options.processes.inflight_batches == 10
    with pytest.raises(ValueError, match=r"workers must be >= 1, \"auto\", or 0 with listen="):
        FeedOptions.of({"workers": 0})
    assert FeedOptions.of({"workers": 0, "listen": "tcp://127.0.0.1:0"}).processes.workers == 0


def test_an_hdf5_plan_places_clips_as_its_data_group_says(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.h5"
    path.write_bytes(b"")
    config = hdf_config(str(path), {"clips_per_video": 2, "clip_start": "first", "seed": 4})
    index = Index.build([str(path)], [[("v0", 9, 0), ("v1", 9, 1)]])
    plan = config.epoch_plan(index, 1)
    assert plan.options is config.options.plan and len(plan.order) == 4
    assert (plan.clips_per_video, plan.clip_start) == (2, "first")


# -- ClipSpec: validated, never rewritten ----------------------------------------------------


def test_clip_spec_validates_and_never_rewrites_a_value() -> None:
    with pytest.raises(ValueError, match=r"resize must be a \(height, width\) tuple"):
        ClipSpec(resize=[32, 48])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"crop must be a \(height, width\) tuple"):
        ClipSpec(crop=32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="resize must be positive"):
        ClipSpec(resize=(0, 4))
    with pytest.raises(ValueError, match=r"crop .* is larger than resize"):
        ClipSpec.of(resize=16, crop=[8, 32])
    spec = ClipSpec(resize=(32, 48), crop=(16, 16))
    assert (spec.resize, spec.crop) == ((32, 48), (16, 16))


def test_clip_spec_of_normalises_sizes_before_the_spec_is_made() -> None:
    assert ClipSpec.of(resize=32, crop=[16, 24]) == ClipSpec(resize=(32, 32), crop=(16, 24))
    assert ClipSpec.of() == ClipSpec()
    with pytest.raises(ValueError, match=r"resize must be \(height, width\) or None"):
        ClipSpec.of(resize="big")
    with pytest.raises(TypeError):
        ClipSpec.of(layout="flat")


def test_clip_spec_travels_without_the_layout() -> None:
    spec = ClipSpec(clip_len=4, resize=(32, 48), crop=(16, 16), flip=True)
    wire = spec.to_wire()
    assert not {"layout", "frames_key", "label_key"} & set(wire)
    assert ClipSpec.from_wire(wire) == spec
    with pytest.raises(ValueError, match=r"unknown clip fields \['layout'\]"):
        ClipSpec.from_wire({**wire, "layout": {"kind": "auto"}})
