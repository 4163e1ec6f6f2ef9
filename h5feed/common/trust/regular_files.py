"""Reading a small file named by a user or an operator (a lineage header, a backup's
position file) at a bounded cost, whatever the path turns out to be.

Guarantees of :func:`read_regular`:

1. It never blocks: the file is opened ``O_NONBLOCK`` (opening a FIFO for reading would
   wait for a writer forever) and checked with ``fstat`` on that descriptor before a byte
   is read; anything but a regular file (a FIFO, a device, a directory) is a ValueError.
2. It never reads more than ``most`` bytes: a file declaring more (``st_size``), or one
   that grew past it since, is a ValueError naming the bound.
"""

from __future__ import annotations

import os
import stat


def read_regular(path: str, most: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``most`` of them (module docstring);
    OSError as ``open`` raises it (FileNotFoundError for a missing file)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file: refused unread")
        if info.st_size > most:
            raise ValueError(
                f"{path} holds {info.st_size} bytes, more than the {most} it may: refused unread"
            )
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(most + 1)
    finally:
        os.close(fd)
    if len(data) > most:  # it grew after the fstat
        raise ValueError(f"{path} holds more than the {most} bytes it may: refused")
    return data
