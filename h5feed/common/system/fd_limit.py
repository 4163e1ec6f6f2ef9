"""The open-descriptor limit of a process: raised to the most an unprivileged process may.

Guarantees: :func:`raise_open_files_limit` raises the soft ``RLIMIT_NOFILE`` to the hard limit
(capped at Linux's default ``fs.nr_open`` when the hard limit is unlimited) and never lowers
it; a refusal by the kernel keeps the soft limit and says so in a warning. Producer workers
call it when they start (sockets, shared memory, their open HDF5 files); the trainer calls it
when it binds (each connection to its port holds one descriptor: see
``h5feed/consumer/core/router.py``).
"""

from __future__ import annotations

import logging
import resource

# RLIM_INFINITY as a soft limit is refused by Linux above fs.nr_open; this is its default.
_NOFILE_CAP = 1 << 20
_log = logging.getLogger("h5feed")


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft limit of open descriptors to the hard one; returns (soft, hard) now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _NOFILE_CAP if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as exc:  # e.g. above fs.nr_open: keep the soft limit
            _log.warning("open files limit kept at %d (hard %d): %s", soft, hard, exc)
    return soft, hard
