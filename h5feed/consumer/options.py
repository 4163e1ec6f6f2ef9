"""Everything ``h5feed.dataset()`` / ``h5feed.batches()`` is configured with, validated once.

A feed's configuration is a :data:`FeedConfig`: an :class:`HdfConfig` (``files``, ``clip``,
``layout``, ``options``) or a :class:`~h5feed.consumer.sources.options.SourceConfig` (the
user's code, its batching, ``options``). Both are frozen and never change once made.

Defaults are written once, as the field defaults of the dataclasses: :class:`ClipSpec`
(the clip), :class:`LayoutArgs` (``layout``, ``frames_key``, ``label_key``, resolved into a
:class:`~h5feed.common.layouts.LayoutSpec` when the config is made), :class:`FeedOptions`
(plan, processes, timing) and :class:`SourceConfig`. :func:`describe_parameters` derives from
them every keyword of ``dataset()``/``batches()`` with its default as Python text; the tests
(``tests/test_config.py``) check :class:`FeedKwargs`' keys, the defaults ``dataset()``'s
docstring lists and the README's parameter table against it, so none of those can drift.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, TypedDict

from h5feed.common import layouts, trainer_main
from h5feed.common.config import (
    CLIP_STARTS,
    DEFAULT_MAX_OPEN_FILES,
    ClipSpec,
    default_cache_dir,
)
from h5feed.common.curve import check_secret_mode
from h5feed.common.exposure import check_listen
from h5feed.common.file_labels import directory_labels
from h5feed.common.layouts import LayoutSpec
from h5feed.common.messages import ON_ERROR_CHOICES
from h5feed.common.metrics_http import metrics_address
from h5feed.common.wire import DEFAULT_LIMITS, DEFAULT_MAX_MESSAGE_BYTES
from h5feed.consumer.plan import PlanOptions
from h5feed.consumer.sources.options import SOURCE_FIELDS, SourceConfig

#: The suffixes of the HDF5 files a directory is searched for (case-insensitive).
_H5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")


def resolve_files(
    files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], root: str | None = None
) -> list[str]:
    """The dataset's files, in plan order.

    A directory gives the ``*.h5``/``*.hdf5``/``*.hdf``/``*.he5`` files under it, searched
    recursively (``<root>/<class>/<id>.hdf5``; symbolic links to directories are not
    followed), sorted by path; a glob gives its matches, sorted; a list keeps its order (each
    entry may itself be a file, directory or glob). Paths are kept as given (not made
    absolute), so a batch's ``file`` is what the user wrote or the glob matched. Raises
    FileNotFoundError naming what matched nothing (for a directory: that it was searched
    recursively, for which suffixes), ValueError for an empty list (the iteration would
    otherwise wait for an index of no file).
    """
    if isinstance(files, (str, os.PathLike)):
        entries: Sequence[str | os.PathLike[str]] = [files]
    else:
        entries = list(files)
    if not entries:
        raise ValueError("h5feed: the list of files is empty")
    if root is not None:
        return _resolve_under(entries, root)
    resolved: list[str] = []
    for entry in entries:
        text = os.fspath(entry)
        if os.path.isdir(text):
            found = _hdf5_files_under(text)
        elif glob.has_magic(text):
            found = sorted(p for p in glob.glob(text) if os.path.isfile(p))
        elif os.path.isfile(text):
            found = [text]
        else:
            raise FileNotFoundError(f"h5feed: no such file or directory: {text!r}")
        if not found and os.path.isdir(text):
            suffixes = "/".join(f"*{s}" for s in _H5_SUFFIXES)
            raise FileNotFoundError(
                f"h5feed: directory {text!r} holds no HDF5 file: searched recursively for "
                f"{suffixes} (case-insensitive)"
            )
        if not found:
            raise FileNotFoundError(f"h5feed: {text!r} matches no HDF5 file")
        resolved.extend(found)
    if len(set(resolved)) != len(resolved):
        raise ValueError("h5feed: the same file is listed twice")
    return resolved


def _hdf5_files_under(directory: str) -> list[str]:
    """The HDF5 files (by suffix) anywhere under ``directory``, sorted by path."""
    found = []
    for parent, _dirs, names in os.walk(directory, followlinks=False):
        found += [os.path.join(parent, n) for n in names if n.lower().endswith(_H5_SUFFIXES)]
    return sorted(p for p in found if os.path.isfile(p))


def _resolve_under(entries: Sequence[str | os.PathLike[str]], root: str) -> list[str]:
    """Paths relative to ``root``, as the producers will resolve them under their data root.

    When this process sees ``root`` too, globs and directories are expanded there; when it
    does not (the files live only on the producers' hosts), entries must be plain relative
    paths, taken as they are: the producers report any that is missing, naming host and path.
    """
    if not os.path.isdir(root):
        texts = [os.fspath(e) for e in entries]
        bad = [t for t in texts if glob.has_magic(t) or os.path.isabs(t)]
        if bad:
            raise ValueError(
                f"h5feed: data_root {root!r} is not visible here, so files must be plain "
                f"relative paths, not globs or absolute paths: {bad[:3]}"
            )
        return texts
    resolved = resolve_files([os.path.join(root, os.fspath(e)) for e in entries])
    return [os.path.relpath(path, root) for path in resolved]


@dataclasses.dataclass(frozen=True, slots=True)
class FeedOptions:
    """Plan, process and timing options (the clip itself is a :class:`ClipSpec`)."""

    batch_size: int = 8
    shuffle: bool = True
    seed: int = 0
    clips_per_video: int = 1
    clip_start: str = "random"
    drop_remainder: bool = False
    deterministic: bool = True
    epochs: int | None = 1
    shard: tuple[int, int] = (0, 1)
    workers: int = 2
    max_inflight_batches: int | None = None
    start_timeout_s: float = 60.0
    unit_timeout_s: float = 120.0
    #: A peer whose connection stops answering ZeroMQ heartbeats (killed without BYE, host
    #: down, cable cut, process stopped) is declared lost within this (see common/liveness.py).
    peer_timeout_s: float = 5.0
    #: Local workers that die are replaced; more than this many restarts of one worker within
    #: a minute end the iteration (a worker that dies on every start is a bug, not bad luck).
    max_restarts: int = 3
    #: A unit whose holder died this many times ends the iteration, naming its samples (a
    #: poison sample that kills every worker that makes it must not loop forever).
    max_unit_attempts: int = 3
    index_cache: str | None = dataclasses.field(default_factory=default_cache_dir)
    tune_malloc: bool = True
    listen: str | None = None
    data_root: str | None = None
    join_grace_s: float = 1.5
    curve_key: str | None = None
    curve_authorized: str | None = None
    shared_memory: bool = True
    metrics_port: int | str | None = None
    #: ZMQ_MAXMSGSIZE of the consumer's socket and its local workers': a peer that sends a
    #: larger frame is disconnected by libzmq before the frame is buffered (see
    #: h5feed.common.wire.DEFAULT_MAX_MESSAGE_BYTES for why 1 GiB).
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    insecure: bool = False
    #: HDF5 files each local worker keeps open at once, least recently used closed first
    #: (``h5feed/producer/open_files.py`` says why 128); producers have their own flag.
    max_open_files: int = DEFAULT_MAX_OPEN_FILES
    #: A bad frame (undecodable, failing its CRC32): "raise" ends the iteration naming file,
    #: video and frame; "skip" zero-fills that sample, marks it ``valid=False`` and counts it
    #: (see h5feed/consumer/hdf5/bad_data.py). Errors of whole files end it either way.
    on_error: str = "raise"
    #: With on_error="skip": the most samples one epoch may skip before the iteration ends
    #: (TooManySkippedError); None: 0.1% of the epoch's samples, rounded up.
    max_skipped: int | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.clips_per_video < 1:
            raise ValueError(f"clips_per_video must be >= 1, got {self.clips_per_video}")
        if self.clip_start not in CLIP_STARTS:
            raise ValueError(f"clip_start must be one of {CLIP_STARTS}, got {self.clip_start!r}")
        if self.epochs is not None and self.epochs < 1:
            raise ValueError(f"epochs must be >= 1 or None (forever), got {self.epochs}")
        index, count = self.shard
        if not (count >= 1 and 0 <= index < count):
            raise ValueError(
                f"shard must be (index, count) with 0 <= index < count, got {self.shard}"
            )
        if self.workers < 0 or (self.workers == 0 and not self.listen):
            raise ValueError(
                f"workers must be >= 1, or 0 with listen= (remote producers), got {self.workers}"
            )
        if self.max_inflight_batches is not None and self.max_inflight_batches < 1:
            raise ValueError("max_inflight_batches must be >= 1")
        if (self.curve_key is None) != (self.curve_authorized is None):
            raise ValueError(
                "CURVE needs both curve_key (this consumer's .key_secret file) and "
                "curve_authorized (the directory of the producers' public .key files)"
            )
        if self.curve_key is not None:  # refused before anything starts, as ssh does
            check_secret_mode(self.curve_key)
        if self.start_timeout_s <= 0 or self.unit_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        if not self.peer_timeout_s >= 2.0:  # heartbeats run every 0.5 s: room for a few
            raise ValueError(f"peer_timeout_s must be >= 2, got {self.peer_timeout_s!r}")
        if isinstance(self.max_restarts, bool) or self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts!r}")
        if isinstance(self.max_unit_attempts, bool) or self.max_unit_attempts < 1:
            raise ValueError(f"max_unit_attempts must be >= 1, got {self.max_unit_attempts!r}")
        if isinstance(self.max_open_files, bool) or self.max_open_files < 1:
            raise ValueError(f"max_open_files must be >= 1, got {self.max_open_files!r}")
        if self.on_error not in ON_ERROR_CHOICES:
            raise ValueError(f"on_error must be one of {ON_ERROR_CHOICES}, got {self.on_error!r}")
        if self.max_skipped is not None and (
            isinstance(self.max_skipped, bool)
            or not isinstance(self.max_skipped, int)
            or self.max_skipped < 0
        ):
            raise ValueError(f"max_skipped must be an int >= 0 or None, got {self.max_skipped!r}")
        if self.metrics_port is not None:
            metrics_address(self.metrics_port, "metrics_port")
        if self.max_message_bytes < DEFAULT_LIMITS.max_header_bytes:
            raise ValueError(
                f"max_message_bytes must be at least {DEFAULT_LIMITS.max_header_bytes} (a "
                f"header's limit), got {self.max_message_bytes}"
            )
        if not isinstance(self.insecure, bool):
            raise ValueError(f"insecure must be True or False, got {self.insecure!r}")
        if self.listen is not None:  # beyond this host: CURVE keys, or insecure=True said
            check_listen(self.listen, keyed=self.curve_key is not None, insecure=self.insecure)

    @property
    def inflight_batches(self) -> int:
        """The global credit budget: batches dispatched to workers and not yet taken by the
        trainer. Default ``max(4, 2 * workers)``, so every worker has a unit queued behind the
        one it is working on."""
        if self.max_inflight_batches is not None:
            return self.max_inflight_batches
        return max(4, 2 * self.workers)

    def plan_options(self) -> PlanOptions:
        return PlanOptions(
            batch_size=self.batch_size,
            shuffle=self.shuffle,
            seed=self.seed,
            clips_per_video=self.clips_per_video,
            clip_start=self.clip_start,
            drop_remainder=self.drop_remainder,
            shard=self.shard,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class LayoutArgs:
    """``layout``, ``frames_key`` and ``label_key`` as ``dataset()`` takes them; :meth:`resolve`
    makes them one :class:`~h5feed.common.layouts.LayoutSpec` (see
    :func:`h5feed.common.layouts.resolve` for how the keys combine with a layout)."""

    layout: layouts.LayoutLike = "auto"
    frames_key: str = "frames"
    label_key: str | None = "label"

    def __post_init__(self) -> None:
        if not isinstance(self.frames_key, str) or not self.frames_key:
            raise ValueError("frames_key must be a non-empty dataset name")

    def resolve(self) -> LayoutSpec:
        """The layout the files are read with; ValueError for a layout or names that do not
        fit together."""
        return layouts.resolve(self.layout, self.frames_key, self.label_key)


@dataclasses.dataclass(frozen=True, slots=True)
class HdfConfig:
    """An HDF5 feed's whole configuration: the ``files`` (in plan order, as given or as a
    glob/directory resolved), how clips are cut (``clip``), how the files store videos
    (``layout``, resolved) and the plan/process ``options``. Frozen: an iteration never
    changes it."""

    files: tuple[str, ...]
    clip: ClipSpec
    layout: LayoutSpec
    options: FeedOptions
    #: Each file's label, decided here rather than read by the workers (one-video files
    #: labelled by their directory: :func:`h5feed.common.file_labels.directory_labels`);
    #: None: the workers' index says.
    file_labels: tuple[int, ...] | None = None


#: A feed's configuration: HDF5 files, or the user's code in the workers (``source=``).
FeedConfig: TypeAlias = HdfConfig | SourceConfig


def _names(cls: type[Any]) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def hdf_config(files: Any, kwargs: Mapping[str, Any]) -> HdfConfig:
    """The configuration of an HDF5 feed from ``dataset()``'s arguments, validated (TypeError
    for an unknown argument, ValueError for a bad value, FileNotFoundError for files that match
    nothing) before any process starts."""
    if files is None:
        raise TypeError("h5feed: give the HDF5 files, or source= (your own code)")
    clip_names, layout_names, option_names = (
        _names(ClipSpec), _names(LayoutArgs), _names(FeedOptions)
    )  # fmt: skip
    unknown = set(kwargs) - clip_names - layout_names - option_names
    if unknown:
        raise TypeError(f"h5feed: unknown arguments {sorted(unknown)}")
    clip = ClipSpec.of(**{k: v for k, v in kwargs.items() if k in clip_names})
    layout = LayoutArgs(**{k: v for k, v in kwargs.items() if k in layout_names}).resolve()
    options = {k: v for k, v in kwargs.items() if k in option_names}
    options["index_cache"] = index_cache_dir(options.pop("index_cache", True))
    feed_options = FeedOptions(**options)
    check_main_path("transform", clip.transform, feed_options)
    paths = resolve_files(files, options.get("data_root"))
    layout, labels = directory_labels(layout, paths)
    return HdfConfig(tuple(paths), clip, layout, feed_options, labels)


def check_main_path(what: str, path: str | None, options: FeedOptions) -> None:
    """ValueError, before any worker starts, for ``"__main__:name"`` where the workers
    cannot load the training script (see :mod:`h5feed.common.trainer_main`)."""
    if path is None or path.partition(":")[0] != trainer_main.MAIN:
        return
    refusal = trainer_main.main_refusal(f"{what} {path!r}", remote=options.listen is not None)
    if refusal is not None:
        raise ValueError(f"h5feed: {refusal}")


def index_cache_dir(index_cache: bool | str | None) -> str | None:
    """``index_cache=`` as :class:`FeedOptions` holds it: True is :func:`default_cache_dir`,
    a path itself, False/None no cache."""
    if index_cache is True:
        return default_cache_dir()
    return str(index_cache) if index_cache else None


def describe_parameters() -> dict[str, str]:
    """Every keyword argument of ``dataset()``/``batches()`` (``prefetch`` aside) with its
    default as Python text (``16``, ``"random"``, ``(0, 1)``, ``None``), in the order of the
    dataclasses that own them: :class:`ClipSpec`, :class:`LayoutArgs`, :class:`FeedOptions`,
    :class:`SourceConfig`. Computed from their field defaults, so it cannot disagree with
    them. Where an argument is not stored as given, its default is the argument's:
    ``index_cache`` is True (the default directory), a source's ``source``/``source_args``/
    ``output_signature`` are None (not given)."""
    found: dict[str, Any] = {}
    for cls in (ClipSpec, LayoutArgs, FeedOptions):
        for field in dataclasses.fields(cls):
            found[field.name] = field.default
    found["index_cache"] = True  # FeedOptions holds the directory True stands for
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
    fields of :class:`ClipSpec`, :class:`LayoutArgs` and :class:`FeedOptions`, and the source
    keys (``SOURCE_KEYS``), as ``tests/test_config.py`` checks.

    Defaults: :func:`describe_parameters` (from those dataclasses); ``index_cache`` is True
    (the default directory, see :func:`default_cache_dir`), a directory, or False (off).
    ``tune_malloc`` (default True) keeps 16 MiB of freed memory mapped in the trainer process
    (glibc ``M_TOP_PAD``) so each ~5 MB batch does not fault in fresh pages; see
    ``h5feed/consumer/memory.py``. ``shared_memory`` (default True): local workers write
    batches straight into shared memory the trainer reads (see ``h5feed/consumer/core/slots.py``).
    ``metrics_port`` (default: ``$H5FEED_METRICS_PORT``, else none) serves ``/metrics`` and
    ``/stats`` on that port of 127.0.0.1 (0: a free one), or on ``"HOST:PORT"``
    (``"0.0.0.0:9100"``: every interface); see ``h5feed/consumer/metrics.py``.
    ``max_message_bytes`` (default 1 GiB) caps every frame on the consumer's socket and its
    local workers' (``ZMQ_MAXMSGSIZE``); ``max_frame_pixels`` (default 64 megapixels) caps a
    stored frame's height x width, read from its header before it is decoded or read.
    ``insecure`` (default False): ``listen`` on an address other hosts reach, without CURVE
    keys, raises ValueError unless this is True; then it warns (``h5feed.InsecureWarning``).
    ``max_open_files`` (default 128): HDF5 files each local worker keeps open at once (see
    ``h5feed/producer/open_files.py``). ``on_error`` (default "raise") and ``max_skipped``
    (default None: 0.1% of an epoch's samples, rounded up): what a bad frame does (see
    ``h5feed/consumer/hdf5/bad_data.py``).
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
    workers: int
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
    max_open_files: int
    on_error: str
    max_skipped: int | None
    # User sources (see h5feed/consumer/sources/api.py).
    source: str | None
    source_args: dict[str, Any] | None
    output_signature: Any
    ragged: bool | Sequence[str]
    steps_per_epoch: int | None
    source_batched: bool
