"""A worker process's settings as one frozen value, and its command line.

Both sides start workers: the trainer's local workers
(:mod:`h5feed.consumer.processes.local_workers`) and ``h5feed produce``
(:mod:`h5feed.producer.service.server`); the worker's entry point
(:mod:`h5feed.producer.worker.process`)
reads them back. All three go through :class:`WorkerSettings`:

1. ``WorkerSettings.from_args(parser.parse_args(s.to_argv())) == s`` for every valid ``s``
   (tested, with hypothesis): what a starter means is what the worker gets.
2. :meth:`WorkerSettings.command` is ``python [-P] -m h5feed.producer.worker --connect ADDR
   --worker-id ID ...`` (process monitors match it); ``-P`` (the working directory never on
   the worker's ``sys.path``) unless ``trust_code``: the trainer's own workers search where the
   trainer does, a producer's never where it was started.
3. A value that is not the default is on the command line; a default may be left off.
4. Invalid settings raise ValueError when built (the entry point turns it into a usage error).

The options are grouped by concern: :class:`Network` (where the worker reaches its consumer,
and how), :class:`Process` (its name and lifetime), :class:`Data` (files and the caps on
reading them) and :class:`Code` (which user code it may import). A worker that listens, or
speaks a range of protocol versions, adds its fields to :class:`Network`.

To add a worker option: one field in its group, with its flag (``option``/``switch``/
``repeated`` of :mod:`h5feed.common.field_flags`) as the field's default; the parser, the
command line and the round-trip test follow from it. Given ``offered=Offered(...)``,
``h5feed produce`` offers it too (its flag, ``H5FEED_`` environment variable, help and
default: :mod:`h5feed.producer.service.command`), and the service's workers get it.
Starters use a value whole: a template, and ``dataclasses.replace`` for what differs per
worker (its name, address, stats file).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from h5feed.common.cli_args import positive_int, positive_seconds
from h5feed.common.field_flags import FLAG as _FLAG
from h5feed.common.field_flags import Flag, Offered, option, repeated, switch
from h5feed.common.protocol.frame_cap import DEFAULT_MAX_MESSAGE_BYTES

__all__ = [
    "DEFAULT_DATA",
    "DEFAULT_MAX_CHUNK_BYTES",
    "DEFAULT_MAX_OPEN_FILES",
    "DEFAULT_STOP_WAIT_S",
    "NO_CODE",
    "PRODUCER_MAX_CLIP_PIXELS",
    "PRODUCER_MAX_FRAME_PIXELS",
    "WORKER_MODULE",
    "Code",
    "Data",
    "Flag",
    "Network",
    "Offered",
    "Process",
    "WorkerSettings",
]

#: The module a worker runs as (``python -m``); process monitors match it.
WORKER_MODULE = "h5feed.producer.worker"
#: HDF5 files a worker keeps open at once (``max_open_files=``, ``--max-open-files``); why 128:
#: see ``h5feed/producer/files/open_files.py``.
DEFAULT_MAX_OPEN_FILES = 128
#: Reading limits of a producer (see ``h5feed/producer/files/read_limits.py``): the largest HDF5
#: chunk (uncompressed) a reader inflates beyond one frame, and ``h5feed produce``'s own caps
#: on a stored frame's pixels and on a clip's output pixels (16 frames of 4K UHD), which no
#: consumer can raise.
DEFAULT_MAX_CHUNK_BYTES = 64 << 20
PRODUCER_MAX_FRAME_PIXELS = 64_000_000
PRODUCER_MAX_CLIP_PIXELS = 16 * 3840 * 2160
#: How long a producer asked to stop (SIGTERM) gives each worker to finish the unit in hand and
#: send it (``h5feed produce --stop-wait-s``, ``$H5FEED_STOP_WAIT_S``; see
#: ``h5feed/producer/service/server.py``). A unit takes well under a second at the usual clip
#: sizes: 20 s leaves room for slow storage and large clips. A worker still working by then is
#: killed and the trainer makes its units again (counted as ``units_remade``).
DEFAULT_STOP_WAIT_S = 20.0


def _positive(name: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ValueError(f"{name} must be an int >= 1 or None, got {value!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class Network:
    """Where the worker reaches its consumer, and how."""

    connect: str = option("--connect", "the consumer's address, e.g. ipc:///tmp/x")
    key: str | None = option("--key", "CURVE: this worker's .key_secret file", None)
    server_key: str | None = option("--server-key", "CURVE: the consumer's public .key file", None)
    max_message_bytes: int = option(
        "--max-message-bytes",
        "the largest frame taken or sent (ZMQ_MAXMSGSIZE; default 1 GiB)",
        DEFAULT_MAX_MESSAGE_BYTES,
        int,  # -1: no cap (ZeroMQ's)
        Offered(
            "BYTES",
            "the largest frame the workers take from the trainer (ZMQ_MAXMSGSIZE; default 1 GiB)",
            parse=positive_int,
        ),
    )

    def __post_init__(self) -> None:
        if not self.connect:
            raise ValueError("a worker needs an address to connect to")
        # key without server_key: refused where the keys are loaded (h5feed.common.trust.curve)


@dataclasses.dataclass(frozen=True, slots=True)
class Process:
    """The worker's name and lifetime."""

    worker_id: str = option("--worker-id", "this worker's name, unique per consumer")
    parent_pid: int | None = option("--parent-pid", "exit when this process is gone", None, int)
    persistent: bool = switch(
        "--persistent",
        "outlive an iteration's end (BYE) and wait for the next job (producer service)",
    )
    stats_file: str | None = option(
        "--stats-file", "keep writing this worker's counters here (JSON)", None
    )
    stop_wait_s: float = option(
        "--stop-wait-s",
        "on SIGTERM, the longest it keeps trying to send the unit it finished before it "
        "leaves (default: %(default)s)",
        DEFAULT_STOP_WAIT_S,
        positive_seconds,
        Offered(
            "SECONDS",
            "on SIGTERM, how long each worker may take to finish and send the unit in hand (the "
            "units it did not start go back to the trainer at once); a worker still working "
            "then is killed (default {default:g}; a container's grace period must be at least "
            "this plus 5 s)",
        ),
    )

    def __post_init__(self) -> None:
        if not self.worker_id:
            raise ValueError("a worker needs a name (worker_id)")
        stop = self.stop_wait_s
        if isinstance(stop, bool) or not isinstance(stop, (int, float)) or not 0 < stop < 1e9:
            raise ValueError(f"stop_wait_s must be a number of seconds > 0, got {stop!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class Data:
    """The files a worker opens and what reading them may cost; the caps are a producer
    operator's (``h5feed/producer/files/read_limits.py``; None: no cap of the producer's own)."""

    data_root: str | None = option(
        "--data-root",
        "relative file paths of a job resolve under this",
        None,
        offered=Offered("DIR", "the job's relative file paths resolve under this"),
    )
    cache_dir: str | None = option(
        "--cache-dir",
        "index cache of this host (default: the directory the consumer names)",
        None,
    )
    max_open_files: int = option(
        "--max-open-files",
        "HDF5 files kept open at once (default: %(default)s)",
        DEFAULT_MAX_OPEN_FILES,
        positive_int,
        Offered(
            "N",
            "HDF5 files each worker keeps open at once, least recently used closed first "
            "(default {default})",
        ),
    )
    max_frame_pixels: int | None = option(
        "--max-frame-pixels",
        "cap on a stored frame's pixels; a job's own cap is lowered to it, never raised "
        "(default: %(default)s)",
        None,
        positive_int,
        Offered(
            "N",
            "cap on a stored frame's height x width; a trainer's max_frame_pixels is lowered "
            "to it, never raised (default {default})",
            PRODUCER_MAX_FRAME_PIXELS,
        ),
    )
    max_clip_pixels: int | None = option(
        "--max-clip-pixels",
        "cap on a clip's output pixels (clip_len x height x width); a job asking more is "
        "refused (default: %(default)s)",
        None,
        positive_int,
        Offered(
            "N",
            "cap on a clip's output pixels (clip_len x height x width); a job asking more is "
            "refused (default {default}: 16 frames of 4K UHD)",
            PRODUCER_MAX_CLIP_PIXELS,
        ),
    )
    max_chunk_bytes: int = option(
        "--max-chunk-bytes",
        "cap on an HDF5 chunk's uncompressed bytes beyond one frame (default: %(default)s)",
        DEFAULT_MAX_CHUNK_BYTES,
        positive_int,
        Offered(
            "BYTES",
            "cap on an HDF5 chunk's uncompressed bytes beyond one frame, checked before "
            "reading (default {default})",
        ),
    )

    def __post_init__(self) -> None:
        for name in ("max_open_files", "max_frame_pixels", "max_clip_pixels", "max_chunk_bytes"):
            _positive(name, getattr(self, name))
        if self.max_open_files is None or self.max_chunk_bytes is None:
            raise ValueError("max_open_files and max_chunk_bytes need a value")


@dataclasses.dataclass(frozen=True, slots=True)
class Code:
    """Which user code (``source=``, ``transform=``) the worker may import."""

    allow_code: tuple[str, ...] = repeated(
        "--allow-code",
        "import user code (source=, transform=) only at paths matching this (repeatable)",
        Offered(
            "PATTERN",
            "import user code (source=, transform=) only at import paths 'module:name' "
            "matching this fnmatch pattern, e.g. 'mypkg.data:*' (repeatable; default: none; "
            "env {env}, comma-separated)",
        ),
    )
    trust_code: bool = switch(
        "--trust-code", "import every path the consumer names (local workers of the trainer only)"
    )

    def __post_init__(self) -> None:
        if not isinstance(self.allow_code, tuple):
            raise ValueError(f"allow_code must be a tuple, got {self.allow_code!r}")
        if self.trust_code and self.allow_code:
            raise ValueError("--trust-code and --allow-code exclude each other")


#: No user code; the worker's own defaults for its data.
NO_CODE = Code()
DEFAULT_DATA = Data()


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerSettings:
    """Everything a worker process is started with (module docstring)."""

    network: Network
    process: Process
    data: Data = DEFAULT_DATA
    code: Code = NO_CODE

    def to_argv(self) -> list[str]:
        """The worker's arguments (after ``-m h5feed.producer.worker``)."""
        argv: list[str] = []
        for attribute, field, spec in self._flags():
            value = getattr(getattr(self, attribute), field.name)
            if field.default is not dataclasses.MISSING and value == field.default:
                continue  # guarantee 3: the worker's own default
            if spec.kind == "switch":
                argv.append(spec.flag)
            elif spec.kind == "repeated":
                for item in value:
                    argv += [spec.flag, item]
            else:
                argv += [spec.flag, str(value)]
        return argv

    def command(self, python: str = sys.executable) -> list[str]:
        """The whole command that starts the worker (guarantee 2)."""
        isolate = [] if self.code.trust_code else ["-P"]
        return [python, *isolate, "-m", WORKER_MODULE, *self.to_argv()]

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """Every field's flag, with the field's default (required without one)."""
        for _attribute, field, spec in WorkerSettings._flags():
            if spec.kind == "switch":
                parser.add_argument(spec.flag, action="store_true", help=spec.help)
            elif spec.kind == "repeated":
                parser.add_argument(
                    spec.flag, action="append", default=[], metavar="PATTERN", help=spec.help
                )
            elif field.default is dataclasses.MISSING:
                parser.add_argument(spec.flag, required=True, type=spec.parse, help=spec.help)
            else:
                parser.add_argument(
                    spec.flag, type=spec.parse, default=field.default, help=spec.help
                )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WorkerSettings:
        """The settings parsed by a parser given :meth:`add_arguments`; ValueError when
        they are invalid."""
        return cls.from_values(vars(args))

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> WorkerSettings:
        """The settings of ``values``, by field name (a field not named: its default; a list:
        a tuple); ValueError when they are invalid or a field without a default is missing."""
        groups = {}
        for attribute, kind in _GROUPS:
            given = {}
            for field in dataclasses.fields(kind):
                if field.name in values:
                    value = values[field.name]
                    given[field.name] = tuple(value) if isinstance(value, list) else value
                elif field.default is dataclasses.MISSING:
                    raise ValueError(f"worker settings need {field.name}")
            groups[attribute] = kind(**given)
        return cls(**groups)

    @classmethod
    def parser(
        cls, prog: str | None = None, description: str | None = None
    ) -> argparse.ArgumentParser:
        """An ArgumentParser of the worker's command line."""
        parser = argparse.ArgumentParser(prog=prog, description=description)
        cls.add_arguments(parser)
        return parser

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> WorkerSettings:
        """Parse ``argv`` (as :meth:`to_argv` writes it)."""
        return cls.from_args(cls.parser().parse_args(list(argv)))

    @staticmethod
    def offered() -> Iterator[tuple[str, Flag, Offered, Any]]:
        """(field name, flag, offer, the service's default) of every option ``h5feed produce``
        offers (:class:`Offered`), in command-line order."""
        for _attribute, field, spec in WorkerSettings._flags():
            offer = spec.offered
            if offer is not None:
                default = field.default if offer.default is ... else offer.default
                yield field.name, spec, offer, default

    @staticmethod
    def _flags() -> Iterator[tuple[str, dataclasses.Field[Any], Flag]]:
        """(group attribute, field, flag) of every option, in command-line order."""
        for attribute, kind in _GROUPS:
            for field in dataclasses.fields(kind):
                yield attribute, field, field.metadata[_FLAG]


#: WorkerSettings' groups, in command-line order (its own fields, by name).
_GROUPS: tuple[tuple[str, Any], ...] = (
    ("network", Network),
    ("process", Process),
    ("data", Data),
    ("code", Code),
)
