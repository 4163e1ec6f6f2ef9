"""A worker's settings are one value that crosses the command line unchanged
(``h5feed/common/worker_settings.py``)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import REPO

from h5feed.common.protocol.wire import DEFAULT_MAX_MESSAGE_BYTES
from h5feed.common.worker_settings import (
    _FLAG,
    _GROUPS,
    WORKER_MODULE,
    Code,
    Data,
    Network,
    Process,
    WorkerSettings,
)
from h5feed.producer.files import open_files
from h5feed.producer.files.read_limits import NO_LIMITS, ProducerLimits
from h5feed.producer.service.server import ServiceOptions, service_worker
from h5feed.producer.worker.code_policy import NOTHING
from h5feed.producer.worker.loop import Worker

DEFAULTS = WorkerSettings(Network("ipc:///tmp/x"), Process("w0"))
FULL = WorkerSettings(
    Network("tcp://trainer:5555", "/keys/w.key_secret", "/keys/trainer.key", 1 << 20),
    Process("w0", 1234, persistent=True, stats_file="/tmp/w0.json"),
    Data("/data", "/cache", 7, 1000, 2000, 3000),
    Code(allow_code=("mypkg.data:*", "other:fn")),
)


def test_defaults_and_a_fully_set_value_cross_the_command_line_unchanged() -> None:
    assert WorkerSettings.from_argv(DEFAULTS.to_argv()) == DEFAULTS
    assert DEFAULTS.to_argv() == ["--connect", "ipc:///tmp/x", "--worker-id", "w0"]
    assert WorkerSettings.from_argv(FULL.to_argv()) == FULL
    trusted = dataclasses.replace(FULL, code=Code(trust_code=True))
    assert WorkerSettings.from_argv(trusted.to_argv()) == trusted


_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1
).filter(lambda t: not t.startswith("-"))
_optional_text = st.none() | _text
_positive = st.integers(1, 1 << 40)


@st.composite
def _settings(draw: st.DrawFn) -> WorkerSettings:
    trust = draw(st.booleans())
    return WorkerSettings(
        Network(
            draw(_text),
            draw(_optional_text),
            draw(_optional_text),
            draw(st.integers(-1, 1 << 40)),
        ),
        Process(
            draw(_text),
            draw(st.none() | st.integers(1, 1 << 22)),
            draw(st.booleans()),
            draw(_optional_text),
            draw(st.floats(1e-3, 1e6, allow_nan=False, allow_infinity=False)),
        ),
        Data(
            draw(_optional_text),
            draw(_optional_text),
            draw(_positive),
            draw(st.none() | _positive),
            draw(st.none() | _positive),
            draw(_positive),
        ),
        Code((), True) if trust else Code(tuple(draw(st.lists(_text, max_size=3)))),
    )


@settings(max_examples=60, deadline=None)
@given(_settings())
def test_any_valid_value_crosses_the_command_line_unchanged(value: WorkerSettings) -> None:
    assert WorkerSettings.from_argv(value.to_argv()) == value


def test_every_field_has_a_flag_named_after_it() -> None:
    """The parser fills a field from the flag of the same name; one without a flag, or with
    another name, would be lost on the way."""
    top = {f.name for f in dataclasses.fields(WorkerSettings)}
    assert top == {attribute for attribute, _kind in _GROUPS}
    flags = []
    for _attribute, kind in _GROUPS:
        for field in dataclasses.fields(kind):
            assert _FLAG in field.metadata, f"{kind.__name__}.{field.name} has no flag"
            flag = field.metadata[_FLAG].flag
            assert flag == "--" + field.name.replace("_", "-"), (field.name, flag)
            flags.append(flag)
    assert len(flags) == len(set(flags))
    help_text = WorkerSettings.parser().format_help()
    assert all(flag in help_text for flag in flags)


def test_the_defaults_are_the_workers_own() -> None:
    """A default left off the command line (guarantee 3) means what the worker would use."""
    data, network = Data(), Network("x")
    assert (data.max_frame_pixels, data.max_clip_pixels, data.max_chunk_bytes) == (
        NO_LIMITS.max_frame_pixels,
        NO_LIMITS.max_clip_pixels,
        NO_LIMITS.max_chunk_bytes,
    )
    assert data.max_open_files == open_files.DEFAULT_MAX_OPEN_FILES
    assert network.max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES
    assert (data.data_root, data.cache_dir, Process("w").persistent) == (None, None, False)
    worker = Worker(WorkerSettings(Network("ipc:///nowhere/h5feed-test"), Process("w")))
    try:
        assert worker.jobs_share.code_policy == NOTHING
        assert ProducerLimits.of(worker.settings.data) == NO_LIMITS
        assert worker.memory is None and worker.files is None  # not persistent
    finally:
        worker.connection.close(0)
        worker.context.term()


def test_invalid_settings_are_refused_when_built() -> None:
    with pytest.raises(ValueError, match="exclude each other"):
        Code(allow_code=("a:*",), trust_code=True)
    with pytest.raises(ValueError, match="max_open_files must be an int >= 1"):
        Data(max_open_files=0)
    with pytest.raises(ValueError, match="max_clip_pixels must be an int >= 1"):
        Data(max_clip_pixels=True)
    with pytest.raises(ValueError, match="allow_code must be a tuple"):
        Code(allow_code=["a:*"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="an address"):
        Network("")
    with pytest.raises(ValueError, match="a name"):
        Process("")
    for stop in (0.0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="stop_wait_s must be a number of seconds > 0"):
            Process("w", stop_wait_s=stop)


def test_the_entry_point_refuses_trust_code_with_allow_code_as_a_usage_error() -> None:
    argv = [*DEFAULTS.to_argv(), "--trust-code", "--allow-code", "a:*"]
    result = subprocess.run(
        [sys.executable, "-m", WORKER_MODULE, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 2, result
    assert "--trust-code and --allow-code exclude each other" in result.stderr


def test_the_command_runs_the_worker_module_isolated_unless_code_is_trusted() -> None:
    assert FULL.command("python")[:4] == ["python", "-P", "-m", WORKER_MODULE]
    trusted = dataclasses.replace(DEFAULTS, code=Code(trust_code=True))
    assert trusted.command("python")[:3] == ["python", "-m", WORKER_MODULE]
    assert trusted.command("python")[3:7] == ["--connect", "ipc:///tmp/x", "--worker-id", "w0"]


def test_a_service_worker_is_persistent_a_child_with_this_hosts_cache() -> None:
    template = service_worker("ipc:///t", "p", data_root="/data", max_open_files=9)
    options = ServiceOptions(2, template)
    value = options.settings_of("ipc:///x", "p-0", "/s.json", ("a", "b"))
    assert options.prefix == "p"
    assert value.process == Process("p-0", os.getpid(), persistent=True, stats_file="/s.json")
    assert value.network == Network("ipc:///x", "a", "b")
    assert value.data.cache_dir is not None and value.data.max_open_files == 9
    assert WorkerSettings.from_argv(value.to_argv()) == value


def test_h5feed_produce_offers_the_workers_options_from_their_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``h5feed produce``'s worker flags are the fields given ``offered`` (flag, type, help,
    the service's default): set by flag or environment, they reach every worker's settings."""
    from h5feed.cli import build_parser
    from h5feed.common.worker_settings import PRODUCER_MAX_CLIP_PIXELS, PRODUCER_MAX_FRAME_PIXELS
    from h5feed.producer.service import command

    offered = {name: default for name, _flag, _offer, default in WorkerSettings.offered()}
    assert set(offered) == {
        "max_message_bytes", "stop_wait_s", "data_root", "max_open_files", "max_frame_pixels",
        "max_clip_pixels", "max_chunk_bytes", "allow_code",
    }  # fmt: skip
    parser = build_parser()
    assert command._worker_values(parser.parse_args(["produce"])) == offered
    assert (offered["max_frame_pixels"], offered["max_clip_pixels"]) == (
        PRODUCER_MAX_FRAME_PIXELS,
        PRODUCER_MAX_CLIP_PIXELS,
    )  # the service's caps, not the worker's (none)
    monkeypatch.setenv("H5FEED_MAX_OPEN_FILES", "5")
    monkeypatch.setenv("H5FEED_ALLOW_CODE", "a:*, b:f")
    monkeypatch.setenv("H5FEED_DATA_ROOT", "/from-env")
    argv = ["produce", "--data-root", "/d", "--max-chunk-bytes", "9", "--stop-wait-s", "2.5"]
    values = command._worker_values(build_parser().parse_args(argv))
    template = service_worker("ipc:///x", "p", **values)
    assert (template.data.data_root, template.data.max_open_files) == ("/d", 5)
    assert (template.data.max_chunk_bytes, template.process.stop_wait_s) == (9, 2.5)
    assert template.code.allow_code == ("a:*", "b:f")
    assert template.data.max_frame_pixels == PRODUCER_MAX_FRAME_PIXELS
    flagged = build_parser().parse_args(["produce", "--allow-code", "c:*"])
    assert command._worker_values(flagged)["allow_code"] == ("c:*",)  # the flag replaces $VAR
    with pytest.raises(SystemExit):
        build_parser().parse_args(["produce", "--max-message-bytes", "0"])
