"""The copies of the user's modules this worker process runs, and the check of a job's code
identities against them (the rules and their limits: :mod:`h5feed.common.user_code.code_identity`).

Guarantees:

1. A module is recorded once per process, when a job first loads it by import path
   (:func:`record`, called by :func:`~h5feed.producer.worker.import_path.load_callable`): the file
   it was loaded from and that file's SHA-256 then. Python keeps the module for the life of
   the process, so that is the copy every later job of this worker runs.
2. :func:`check` raises :class:`CodeVersionRefused` for a job naming a recorded module with
   another digest, naming the module, both files and both digests; it passes a module not
   recorded here or recorded without a digest (nothing to compare), and a job naming none.
"""

from __future__ import annotations

from collections.abc import Sequence

from h5feed.common.errors import H5FeedError
from h5feed.common.protocol import messages
from h5feed.common.user_code.code_identity import digest_of, shown

#: module name -> (the file it was loaded from, that file's digest then; None: none known)
_loaded: dict[str, tuple[str, bytes | None]] = {}


class CodeVersionRefused(H5FeedError):
    """A job names another copy of a module than the one this worker process runs."""


def record(name: str, module: object) -> None:
    """``module``, loaded under ``name``, is the copy this process runs (once per name)."""
    if name in _loaded:
        return
    file = getattr(module, "__file__", None)
    _loaded[name] = (file, digest_of(file)) if isinstance(file, str) else ("", None)


def check(expected: Sequence[messages.CodeIdentity]) -> None:
    """Raise CodeVersionRefused unless every module of ``expected`` that this process
    recorded has the digest the trainer found."""
    for identity in expected:
        file, digest = _loaded.get(identity.module, ("", None))
        if digest is None or digest == identity.digest:
            continue
        raise CodeVersionRefused(
            f"this worker runs module {identity.module!r} as loaded from {file} "
            f"(sha256 {shown(digest)}...) for an earlier job, and Python keeps the first "
            f"copy; the trainer's is {identity.file} (sha256 {shown(identity.digest)}...). "
            "Restart the producer (h5feed produce) so that its workers load the trainer's "
            "copy, or give both hosts the same file; a trainer's own workers start afresh "
            "when the dataset is built again"
        )
