"""The fsspec options of one process, and its filesystems: where a URL's endpoint, region
and credentials come from, on either side, and how long a request may take.

Each process decides its own options; none crosses the wire (a JOB carries URLs only):

1. A producer (and a trainer's local worker) takes :data:`STORAGE_ENV` (a JSON object of
   fsspec options, ``{"endpoint_url": "http://minio:9000"}``) over the bounded defaults below,
   and the storage library's own chain for what is not given (for S3: ``AWS_ACCESS_KEY_ID`` /
   ``AWS_PROFILE`` / an instance role, ``AWS_ENDPOINT_URL``, ``AWS_REGION``). Local workers
   inherit the trainer's environment, so they see what the trainer's environment says.
2. A trainer takes ``storage_options=`` of ``dataset()`` when given, else :data:`STORAGE_ENV`
   too, for what it does itself: expanding globs and prefixes, sizing the files and keying its
   index cache. ``storage_options=`` is not passed to any worker: give local workers the same
   options through the environment (``H5FEED_STORAGE_OPTIONS``, ``AWS_ENDPOINT_URL``...).

Requests are bounded: on S3 a connection waits at most :data:`CONNECT_TIMEOUT_S`, a read
:data:`READ_TIMEOUT_S`, and botocore makes at most :data:`S3_ATTEMPTS` attempts of a request
(standard mode: exponential backoff with jitter), with s3fs's own retry loop reduced to one
pass; so a request ends within about ``S3_ATTEMPTS x (CONNECT_TIMEOUT_S + READ_TIMEOUT_S)``
plus backoff. Above that, a worker retries a failed ranged GET, and a failed read of a file,
itself (what botocore does not: a body cut short, a connection reset while reading it) at
most :data:`READ_ATTEMPTS` times each, none started later than :data:`READ_BUDGET_S` after
the read's first attempt: one read ends within ``READ_BUDGET_S`` plus one request's bound.
(botocore's defaults, 60 s each and s3fs's 5 retries on top of botocore's, give minutes
before a dead server is reported.) Options given replace these defaults key by key.

fsspec is imported on the first URL only (a feed of local files never imports it); a missing
package is an ImportError naming the extra to install (``h5feed[storage]``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from h5feed.common import object_urls
from h5feed.common.object_urls import STORAGE_EXTRA

__all__ = [
    "CONNECT_TIMEOUT_S",
    "READ_ATTEMPTS",
    "READ_BUDGET_S",
    "READ_TIMEOUT_S",
    "S3_ATTEMPTS",
    "STORAGE_ENV",
    "filesystem",
    "options_for",
]

#: The environment variable of a process's own fsspec options (a JSON object).
STORAGE_ENV = "H5FEED_STORAGE_OPTIONS"
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0
S3_ATTEMPTS = 3
#: Passes of s3fs's own retry loop around botocore's (s3fs's default is 5): one, so that
#: botocore's attempts are the only retries of a request, and h5feed's own (below) the only
#: retries of a read.
S3FS_PASSES = 1
#: h5feed's own retries of a file's ranged GETs and of its reads (a truncated body, a reset
#: connection, a request that failed all its botocore attempts): at most READ_ATTEMPTS
#: attempts of each, all started within READ_BUDGET_S of the read's first, with exponential
#: backoff and jitter (h5feed/producer/files/read_retries.py).
READ_ATTEMPTS = 4
READ_BUDGET_S = 60.0
_S3_SCHEMES = ("s3", "s3a")
_BENCH_CLASS = "h5feed.bench.latency_fs.LatencyFileSystem"


def options_for(
    scheme: str, given: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The fsspec options for ``scheme``: the bounded defaults (S3), then ``given`` (a trainer's
    ``storage_options=``) or else :data:`STORAGE_ENV`'s, key by key. ValueError when that
    variable is not a JSON object."""
    options: dict[str, Any] = {}
    if scheme in _S3_SCHEMES:
        options = {
            "retries": S3FS_PASSES,
            "config_kwargs": {
                "connect_timeout": CONNECT_TIMEOUT_S,
                "read_timeout": READ_TIMEOUT_S,
                "retries": {"max_attempts": S3_ATTEMPTS, "mode": "standard"},
            },
        }
    if given is None:
        text = (os.environ if environ is None else environ).get(STORAGE_ENV, "").strip()
        if text:
            try:
                given = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"${STORAGE_ENV} is not JSON: {exc}") from exc
            if not isinstance(given, dict):
                raise ValueError(f"${STORAGE_ENV} must be a JSON object of fsspec options")
    options.update(given or {})
    return options


def filesystem(scheme: str, given: Mapping[str, Any] | None = None) -> Any:
    """An fsspec filesystem for ``scheme`` with :func:`options_for`'s options; ImportError
    naming the extra when fsspec, or the package fsspec needs for ``scheme``, is missing.
    fsspec keeps one instance per scheme and options (its instance cache), so repeated calls
    cost a lookup."""
    options = options_for(scheme, given)  # ValueError for a bad $H5FEED_STORAGE_OPTIONS
    try:
        import fsspec
    except ImportError as exc:
        raise ImportError(
            f"reading {scheme}:// URLs needs fsspec: pip install 'h5feed[{STORAGE_EXTRA}]'"
        ) from exc
    # s3fs takes its retry loop's length as an attribute, not an argument (its class default)
    passes = options.pop("retries", None) if scheme in _S3_SCHEMES else None
    if scheme == object_urls.BENCH_SCHEME and os.environ.get(object_urls.BENCH_ENV):
        # the bench's local files behind a latency, registered in the bench's processes only
        # (h5feed.common.object_urls, guarantee 3); by name: nothing imported here
        fsspec.register_implementation(scheme, _BENCH_CLASS, clobber=True)
    try:
        fs = fsspec.filesystem(scheme, **options)
    except (ImportError, ValueError) as exc:  # fsspec: ValueError for an unknown protocol
        raise ImportError(
            f"reading {scheme}:// URLs needs a package fsspec names: {exc} (s3:// comes with "
            f"pip install 'h5feed[{STORAGE_EXTRA}]')"
        ) from exc
    if passes is not None:
        fs.retries = int(passes)
    return fs
