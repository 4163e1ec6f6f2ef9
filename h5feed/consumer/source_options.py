"""The configuration of a user source (``h5feed.dataset(source=...)``), validated once."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import msgpack

from h5feed.common.elements import ElementSpec

SOURCE_KEYS = ("source", "source_args", "output_signature", "ragged", "steps_per_epoch")


@dataclasses.dataclass(frozen=True)
class SourceConfig:
    """What the workers run and how its elements are batched.

    ``source``: ``"package.module:factory"``; ``args``: msgpack-able keyword arguments of the
    factory (they travel in the SOURCE message; nothing is pickled); ``ragged``: True (every
    field that varies in size) or the paths of the fields to give as ragged instead of padded;
    ``steps_per_epoch``: generator sources only, batches per epoch; ``spec``: the element
    spec, given (``output_signature``) or learnt from the workers' first elements; ``kind``:
    known once the workers have loaded the source; ``sys_path``: where local workers look
    for the user's modules too (the trainer's ``sys.path``).
    """

    source: str
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    ragged: bool | tuple[str, ...] = False
    steps_per_epoch: int | None = None
    spec: ElementSpec | None = None
    given_spec: bool = False
    kind: str | None = None
    sys_path: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        module, sep, name = self.source.partition(":") if isinstance(self.source, str) else "::"
        if not sep or not module or not name:
            raise ValueError(
                f"source must be an import path 'package.module:factory', got {self.source!r}"
            )
        if not isinstance(self.args, Mapping) or not all(isinstance(k, str) for k in self.args):
            raise ValueError("source_args must be a dict with str keys")
        try:
            msgpack.packb(dict(self.args), use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(
                "source_args must hold msgpack-able values only (numbers, str, bytes, lists, "
                f"dicts; they travel to the workers, nothing is pickled): {exc}"
            ) from exc
        if self.steps_per_epoch is not None and self.steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be >= 1 or None, got {self.steps_per_epoch}")

    def is_ragged(self, path: str) -> bool:
        if isinstance(self.ragged, bool):
            return self.ragged
        return path in self.ragged
