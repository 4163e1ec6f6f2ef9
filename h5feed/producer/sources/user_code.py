"""The user's factory in a worker: loaded by import path, called under the same seeding in
every worker, with the keyword arguments it names.

Errors of the user's code are raised as SourceError naming the source, chained to the
original exception, so the worker's traceback (sent to the trainer) shows the user's frames.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from h5feed.common.errors import SourceError
from h5feed.common.protocol import messages
from h5feed.common.user_code.import_paths import ImportPathError
from h5feed.producer.worker import import_path, seeding
from h5feed.producer.worker.code_policy import CodePolicy
from h5feed.producer.worker.seeding import Purpose


def load_factory(path: str, policy: CodePolicy) -> Callable[..., Any]:
    """The factory named ``"package.module:attribute"`` (the attribute may be dotted where
    ``policy`` is trusted); SourceError naming the path, CodeRefused when ``policy`` refuses
    it (nothing imported)."""
    try:
        return import_path.load_callable(path, policy)
    except ImportPathError as exc:
        raise SourceError(f"source {path!r} {exc}") from exc


def call_accepting(
    function: Callable[..., Any], args: Mapping[str, Any], extra: Mapping[str, Any]
) -> Any:
    """``function(**args, **extra')`` where extra' holds the ``extra`` keywords that the
    signature names explicitly (and ``args`` does not set)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin without a signature: no extras
        parameters = {}  # type: ignore[assignment]
    accepted = {k: v for k, v in extra.items() if k in parameters and k not in args}
    return function(**args, **accepted)


class UserCode:
    """A SOURCE's factory and what it is called with: the shard (``worker`` of ``workers``),
    the dataset's ``seed`` and the iteration's ``first_epoch``."""

    def __init__(self, source: messages.Source, local: bool, policy: CodePolicy) -> None:
        self.path = source.source
        self.args: dict[str, Any] = dict(source.args)
        if local:  # the trainer's own modules, where it found them (same host, same files)
            for entry in source.sys_path:
                if entry not in sys.path:
                    sys.path.append(entry)
        if not all(isinstance(k, str) for k in self.args):
            raise SourceError(f"source {self.path!r}: argument names must be str")
        self.worker = source.worker
        self.workers = source.workers
        self.seed = source.seed
        self.first_epoch = source.epoch
        self.factory = load_factory(self.path, policy)

    def construct(self) -> Any:
        """A new copy of the user's object, made after the same seeding in every worker: one
        object, as if it lived in the trainer."""
        try:
            seeding.seed_for(self.seed, Purpose.CONSTRUCT, self.first_epoch)
            return self.call(self.first_epoch)
        except Exception as exc:
            raise SourceError(
                f"source {self.path!r}: the factory raised {type(exc).__name__}: {exc}"
            ) from exc

    def call(self, epoch: int) -> Any:
        """The factory called for ``epoch`` (the caller seeds and wraps errors)."""
        extra = {
            "shard_index": self.worker,
            "shard_count": self.workers,
            "seed": self.seed,
            "epoch": epoch,
        }
        return call_accepting(self.factory, self.args, extra)
