"""Object-storage URLs (``s3://bucket/key``, ``gs://...``, ``https://host/path``) as both sides
read them: what is a URL, what is a well-formed one, and what lies under a data root.

Pure text, no I/O and no import of fsspec (the trainer lists and sizes URLs through
:mod:`h5feed.consumer.hdf5.urls`, a producer opens them through
:mod:`h5feed.producer.files.remote_files`; both import fsspec only when a URL is met).

Guarantees of :func:`parse`:

1. It accepts one protocol and one URL: fsspec's URL chaining (``simplecache::s3://...``,
   ``filecache::``, any ``::``), ``file://`` and a scheme-less text are refused, so a URL names
   an object of one remote store and nothing on a local disk.
2. The path is refused when it holds a ``.`` or ``..`` segment, an empty segment (``//``), a
   backslash, a NUL byte or a control character: a parsed URL is already normal, so comparing
   it with a root is comparing text, with no second reading of the same URL by another parser.
3. ``h5feed-bench://`` (:data:`BENCH_SCHEME`, local files behind an injected latency:
   :mod:`h5feed.bench.latency_fs`) is refused unless :data:`BENCH_ENV` is set in this
   process's environment, which only ``h5feed bench object-storage --server local-latency``
   sets (for itself and the local workers it starts): a peer's URL never reaches a local
   file through it otherwise.
4. :func:`under` compares scheme, bucket (or host) and path segment by segment: ``s3://b/pre``
   holds ``s3://b/pre/x.h5`` and ``s3://b/pre`` itself, not ``s3://b/prefix/x.h5``.

Refusals are ValueError naming the URL and the rule; a producer turns them into ``PathRefused``
(:mod:`h5feed.producer.files.url_confine`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BENCH_ENV", "BENCH_SCHEME", "STORAGE_EXTRA", "ObjectUrl", "etag_and_version", "is_url",
    "parse", "under",
]  # fmt: skip

#: The pip extra that installs fsspec and s3fs (``pip install 'h5feed[storage]'``).
STORAGE_EXTRA = "storage"
#: A scheme (RFC 3986) opening a URL (``s3://``) or an fsspec chain (``simplecache::``).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)(://|::)")
#: The bench's test-only scheme, and the variable without which it is refused (guarantee 3).
BENCH_SCHEME = "h5feed-bench"
BENCH_ENV = "H5FEED_BENCH_LATENCY_FS"
#: The longest URL accepted (S3 keys are at most 1,024 bytes).
MAX_URL_CHARS = 2048


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectUrl:
    """A parsed URL: ``scheme://bucket/key`` (``bucket`` is the host for ``http(s)``)."""

    scheme: str
    bucket: str
    key: str  # without a leading "/"; "" for the bucket itself

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}" if self.key else self.root_text

    @property
    def root_text(self) -> str:
        return f"{self.scheme}://{self.bucket}"

    def join(self, key: str) -> str:
        """The URL of ``key`` (a name ending, ``"a/b.h5"``) under this one."""
        return f"{self}/{key}" if self.key else f"{self.root_text}/{key}"


def is_url(text: str) -> bool:
    """``text`` starts with a scheme (``s3://``, ``file://``) or an fsspec chain
    (``simplecache::``): it is meant as a URL, to be :func:`parse`'d (and maybe refused), not
    opened as a local path."""
    return _SCHEME.match(text) is not None


def parse(text: str) -> ObjectUrl:
    """``text`` as an :class:`ObjectUrl`, or ValueError naming it and the rule (module
    docstring, 1 to 3)."""
    shown = text[:200]
    if len(text) > MAX_URL_CHARS:
        raise ValueError(f"a URL longer than {MAX_URL_CHARS} characters is refused: {shown!r}")
    if "::" in text:
        raise ValueError(
            f"fsspec URL chaining ('::', as in 'simplecache::s3://...') is refused: {shown!r}"
        )
    match = _SCHEME.match(text)
    if match is None:
        raise ValueError(f"not a URL (scheme://bucket/key): {shown!r}")
    scheme = match.group(1).lower()
    if scheme == "file" or scheme == "local":
        raise ValueError(f"a file:// URL is refused: give a local file as a path: {shown!r}")
    if scheme == BENCH_SCHEME and not os.environ.get(BENCH_ENV):
        raise ValueError(
            f"{BENCH_SCHEME}:// is the object-storage bench's own (local files), refused "
            f"outside it: {shown!r}"
        )
    rest = text[match.end() :]
    if any(ord(c) < 0x20 or c in "\\\x7f" for c in rest):
        raise ValueError(f"a URL with a backslash or control character is refused: {shown!r}")
    bucket, _slash, key = rest.partition("/")
    if not bucket or "@" in bucket:
        raise ValueError(f"a URL needs a bucket or host (and no user@): {shown!r}")
    key = key.rstrip("/")
    if key and any(part in ("", ".", "..") for part in key.split("/")):
        raise ValueError(f"a URL path with an empty, '.' or '..' segment is refused: {shown!r}")
    return ObjectUrl(scheme, bucket, key)


def under(url: ObjectUrl, root: ObjectUrl) -> bool:
    """``url`` is ``root`` or below it, segment by segment (module docstring, 4)."""
    if (url.scheme, url.bucket) != (root.scheme, root.bucket):
        return False
    return not root.key or url.key == root.key or url.key.startswith(root.key + "/")


def etag_and_version(info: Mapping[str, Any]) -> tuple[str, str]:
    """An object's ETag and version from its fsspec entry (a listing's, a HEAD's, an open
    file's ``details``), as S3 (``ETag``, ``VersionId``), GCS (``md5Hash``, ``generation``) and
    HTTP (``etag``) name them; "" for what the store does not give."""
    etag = info.get("ETag") or info.get("etag") or info.get("md5Hash") or ""
    version = info.get("VersionId") or info.get("generation") or ""
    return str(etag), str(version)
