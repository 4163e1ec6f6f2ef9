"""Writing a file so that its final name only ever holds a complete file."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def atomic_file(final: str, mode: int | None = None) -> Iterator[str]:
    """Yield ``final + ".tmp"`` to write; when the block ends without an error, flush that file
    to disk and rename it over ``final``. So a reader of ``final`` sees the old file (or none)
    or the complete new one, never a part. On an error the temporary file is removed.

    ``mode``: the temporary file is created empty with this mode first (``O_EXCL``: a new
    inode, never an existing file or a planted link), so the content is never readable with
    wider permissions, not even for a moment (secret keys: 0o600)."""
    tmp = final + ".tmp"
    try:
        if mode is not None:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
