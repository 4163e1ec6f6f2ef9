"""The keyword arguments of ``h5feed.dataset()`` / ``h5feed.batches()`` (:class:`FeedKwargs`)
and their defaults as Python text (:func:`describe_parameters`).

Defaults are written once, as the field defaults of the dataclasses of
:mod:`h5feed.consumer.options` (and :class:`~h5feed.consumer.sources.options.SourceConfig`);
:func:`describe_parameters` derives every keyword and its default from them.
``tests/unit/common/test_config.py`` checks :class:`FeedKwargs`' keys, ``dataset()``'s docstring
and the
parameter table of docs/trainer/parameters.md against it, so none of those can drift.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from h5feed.common.config import ClipSpec
from h5feed.common.layouts import LayoutSpec
from h5feed.consumer.config.groups import GROUPS
from h5feed.consumer.options import DataOptions, LayoutArgs
from h5feed.consumer.sources.options import SOURCE_FIELDS, SourceConfig

#: ``files=``: a glob, a directory or a list of paths (see ``h5feed.dataset``).
PathsLike = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def describe_parameters() -> dict[str, str]:
    """Every keyword argument of ``dataset()``/``batches()`` (``prefetch`` aside) with its
    default as Python text (``16``, ``"random"``, ``(0, 1)``, ``None``), in the order of the
    dataclasses that own them: :class:`ClipSpec`, :class:`LayoutArgs`, the groups of
    :class:`FeedOptions`, :class:`DataOptions`, :class:`SourceConfig`. Computed from their
    field defaults, so it cannot disagree with them. Where an argument is not stored as given,
    its default is the argument's:
    ``index_cache`` is True (the default directory), a source's ``source``/``source_args``/
    ``output_signature`` are None (not given)."""
    found: dict[str, Any] = {}
    for cls in (ClipSpec, LayoutArgs, *GROUPS, DataOptions):
        for field in dataclasses.fields(cls):
            found[field.name] = field.default
    found["index_cache"] = True  # DataOptions holds the directory True stands for
    source_fields = {f.name: f for f in dataclasses.fields(SourceConfig)}
    for key, name in SOURCE_FIELDS.items():
        default = source_fields[name].default
        found[key] = None if default is dataclasses.MISSING else default
    return {name: _python_text(value) for name, value in found.items()}


def _python_text(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_python_text(v) for v in value) + ")"
    return repr(value)


class FeedKwargs(TypedDict, total=False):
    """The keyword arguments of ``h5feed.dataset()`` and ``h5feed.batches()``: exactly the
    fields of :class:`ClipSpec`, :class:`LayoutArgs`, :class:`FeedOptions`' groups and
    :class:`DataOptions`, and the source keys (``SOURCE_KEYS``), as
    ``tests/unit/common/test_config.py``
    checks.

    Defaults: :func:`describe_parameters` (from those dataclasses); ``index_cache`` is True
    (the default directory, see :func:`default_cache_dir`), a directory, or False (off).
    ``tune_malloc`` (default True) keeps freed memory mapped in the trainer process for reuse
    (glibc's mmap threshold and top pad, unless the environment sets the allocator) so each
    ~5 MB batch and the user's own arrays do not fault in fresh pages; see
    ``h5feed/common/system/allocator.py``. ``shared_memory`` (default True): local workers write
    batches straight into shared memory the trainer reads (see ``h5feed/consumer/core/slots.py``).
    ``metrics_port`` (default: ``$H5FEED_METRICS_PORT``, else none) serves ``/metrics`` and
    ``/stats`` on that port of 127.0.0.1 (0: a free one), or on ``"HOST:PORT"``
    (``"0.0.0.0:9100"``: every interface); see ``h5feed/consumer/telemetry/metrics.py``.
    ``max_message_bytes`` (default 1 GiB) caps every frame on the consumer's socket and its
    local workers' (``ZMQ_MAXMSGSIZE``); ``max_frame_pixels`` (default 64 megapixels) caps a
    stored frame's height x width, read from its header before it is decoded or read.
    ``insecure`` (default False): ``listen`` on an address other hosts reach, without CURVE
    keys, raises ValueError unless this is True; then it warns (``h5feed.InsecureWarning``).
    The other options are described at their fields (``max_open_files``, ``on_error``...).
    """

    clip_len: int
    stride: int
    resize: tuple[int, int] | None
    crop: tuple[int, int] | None
    crop_mode: str
    flip: bool
    short_video: str
    frames_key: str
    label_key: str | None
    clip_start: str
    clips_per_video: int
    batch_size: int
    shuffle: bool
    seed: int
    epochs: int | None
    drop_remainder: bool
    deterministic: bool
    shard: tuple[int, int]
    shard_remainder: str
    workers: int | str
    max_inflight_batches: int | None
    start_timeout_s: float
    unit_timeout_s: float
    peer_timeout_s: float
    max_restarts: int
    max_unit_attempts: int
    index_cache: bool | str
    tune_malloc: bool
    listen: str | None
    data_root: str | None
    join_grace_s: float
    curve_key: str | None
    curve_authorized: str | None
    layout: str | Mapping[str, Any] | LayoutSpec
    transform: str | None
    transform_args: dict[str, Any] | None
    reduced_decode: bool
    shared_memory: bool
    metrics_port: int | str | None
    max_message_bytes: int
    max_frame_pixels: int | None
    insecure: bool
    fleet: str | Sequence[str] | None
    fleet_key: str | None
    max_open_files: int
    on_error: str
    max_skipped: int | None
    storage_options: Mapping[str, Any] | None
    lineage: str | os.PathLike[str] | None
    # User sources (see h5feed/consumer/sources/api.py).
    source: str | None
    source_args: dict[str, Any] | None
    output_signature: Any
    ragged: bool | Sequence[str]
    steps_per_epoch: int | None
    source_batched: bool
    shards_start_alike: bool
