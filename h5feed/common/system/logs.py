"""Log lines that say who wrote them: every h5feed line carries its process's ids.

``with_ids(logger, "consumer vm pid 123 job 1a2b3c4d")`` prefixes each message with
``[consumer vm pid 123 job 1a2b3c4d]`` whatever handler or format the application uses (the
worker processes put ``[worker ID host H pid N]`` in their format instead). The ``h5feed``
logger has only a ``NullHandler`` in library use (see ``h5feed/__init__.py``): quiet unless the
application or the ``h5feed`` command configures logging.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import MutableMapping
from typing import Any

IdsLogger = logging.LoggerAdapter[logging.Logger]


class _IdsAdapter(logging.LoggerAdapter[logging.Logger]):
    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        # Host and pid when the line is written, not when the logger was made (import time).
        extra = self.extra or {}
        return (
            f"[{extra['role']} {socket.gethostname()} pid {os.getpid()}{extra['ids']}] {msg}",
            kwargs,
        )


def with_ids(logger: logging.Logger, role: str, **ids: object) -> IdsLogger:
    """``logger`` whose lines start with ``[ROLE HOST pid PID key value ...]``."""
    text = "".join(f" {key} {value}" for key, value in ids.items())
    return _IdsAdapter(logger, {"role": role, "ids": text})


def consumer_log(job_id: str) -> IdsLogger:
    """The consumer's logger for the iteration of job ``job_id``: ``[consumer HOST pid PID
    job XXXXXXXX]`` in front of every line (each part of the loop logs through it)."""
    return with_ids(logging.getLogger("h5feed.consumer"), "consumer", job=job_id[:8])
