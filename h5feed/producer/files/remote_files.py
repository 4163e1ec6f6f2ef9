"""Opening an HDF5 file on object storage (``s3://``, ``gs://``, ``https://``) in a producer:
one fsspec file object per file, range-cached, handed to ``h5py.File``.

h5py's wheels carry no S3 driver, so a URL is read through a Python file object: HDF5 asks for
small pieces (a superblock, B-tree nodes, a video's frame descriptors, a heap collection of a
few JPEGs). Each open file's reads go through a
:class:`~h5feed.producer.files.range_cache.RangeCache` in place of fsspec's block cache: a read
that misses fetches its own bytes, at least :data:`MIN_FETCH_BYTES` (64 KiB) from where it
starts (HDF5's runs of small adjacent reads become one request), and the read-ahead fills it
with the exact ranges the next clips need (:mod:`~h5feed.producer.files.read_ahead`). What it
holds is bounded by :data:`MAX_BLOCKS` x :data:`BLOCK_BYTES` (16 MiB) per open file, so a
worker's memory for it stays bounded by ``max_open_files`` x 16 MiB. A process's own fsspec
options may set another block size (``default_block_size``, in bytes, in
``$H5FEED_STORAGE_OPTIONS``): the cache of a file is then :data:`MAX_BLOCKS` of those
(:func:`block_bytes`).

Guarantees of :func:`open_h5`:

1. One fsspec file per open, and every ranged GET of it pinned to the ETag the open saw (s3fs
   sends ``If-Match``): an object replaced while it is open fails its next read (HTTP 412,
   named by URL) instead of mixing two objects' bytes.
2. An object that this process indexed (:func:`identity`, which the index cache key calls for
   every file of a job) and that has another ETag when it is (re)opened is refused with a
   :class:`FileReadError` naming the URL and both ETags, so a file is never read with an index
   learnt from another object.
3. Its external links are refused before it is returned (:mod:`url_confine`).
4. A ranged GET that fails (a body cut short, a connection reset, a request that failed all
   its botocore attempts) is made again, and a read whose GET still fails is retried from
   the same position, each at most :data:`~h5feed.common.storage_config.READ_ATTEMPTS`
   times, all within :data:`~h5feed.common.storage_config.READ_BUDGET_S` of the read's
   first attempt, with exponential backoff and jitter; a missing, unreadable or replaced
   object is not retried (:mod:`read_retries`). What still
   fails reaches h5py, which reports the read as failed, or the file's heap reads
   (:mod:`heap_reads`: its rows cut from the range cache's bytes) as an OSError naming the
   URL: the reader names the URL.
5. With a node-local cache (:mod:`~h5feed.producer.files.node_cache`, the producer's own
   setting), an object whose complete copy is on this node is opened from the copy, named by
   its URL and its links refused as above; one without is streamed while the copy is made;
   a copy HDF5 cannot open is dropped and the object streamed.

Where a producer's credentials, endpoint and region come from (its own environment, never
the wire) and how long a request may take: :mod:`h5feed.common.storage_config`. A request that
fails surfaces in h5py as an OSError, which the readers report naming the URL
(:class:`FileReadError` when opening).

What the requests cost (requests, bytes, retries, refusals) is counted as they are made
(:mod:`h5feed.producer.files.request_counts`) and reaches the trainer with each DATA part.

fsspec is imported on the first URL only (a producer of local files never imports it); a
missing package is an error naming the extra to install (``h5feed[storage]``).
"""

from __future__ import annotations

import socket
from typing import Any

import h5py

from h5feed.common import object_urls, storage_config
from h5feed.common.errors import FileReadError
from h5feed.producer.files import (
    gc_guard,
    node_cache,
    read_ahead,
    read_retries,
    request_counts,
    url_confine,
)
from h5feed.producer.files.heap_reads import HeapReads
from h5feed.producer.files.range_cache import RangeCache

__all__ = [
    "BLOCK_BYTES",
    "MAX_BLOCKS",
    "MIN_FETCH_BYTES",
    "block_bytes",
    "check_readable",
    "filesystem",
    "identity",
    "metadata_page",
    "open_h5",
    "open_h5_with_heap",
    "size",
]

#: An open file's cache holds MAX_BLOCKS x BLOCK_BYTES of its ranges (16 MiB); a read that
#: misses fetches at least MIN_FETCH_BYTES from where it starts.
BLOCK_BYTES = 4 << 20
MAX_BLOCKS = 4
MIN_FETCH_BYTES = 64 << 10


def block_bytes(scheme: str) -> int:
    """The bytes of one ranged GET of this process's files of ``scheme``: its own options'
    ``default_block_size`` when set (a positive integer), else :data:`BLOCK_BYTES`.
    ValueError for another value."""
    given = storage_config.options_for(scheme).get("default_block_size", BLOCK_BYTES)
    if isinstance(given, bool) or not isinstance(given, int) or given <= 0:
        raise ValueError(f"default_block_size must be a positive integer of bytes, not {given!r}")
    return given


def filesystem(scheme: str) -> Any:
    """This process's fsspec filesystem for ``scheme`` (its own options:
    :func:`h5feed.common.storage_config.options_for`)."""
    return storage_config.filesystem(scheme)


def _fail(message: str, url: str, exc: BaseException, number: int | None = None) -> FileReadError:
    return FileReadError(
        f"{message}: {type(exc).__name__}: {str(exc)[:300]}",
        file=url,
        host=socket.gethostname(),
        number=number,
    )


def _info(url: str) -> dict[str, Any]:
    """The object's entry (size, type, ETag...) as it is now: one HEAD request. fsspec's
    listing cache is dropped for it first: an entry listed earlier in this process (a
    persistent worker's) may be of an object replaced since."""
    fs = filesystem(object_urls.parse(url).scheme)
    fs.invalidate_cache(url)
    request_counts.count_request()
    info: dict[str, Any] = fs.info(url)
    return info


def check_readable(number: int, url: str) -> None:
    """FileReadError naming ``url`` and this host unless it is an object this producer may
    read (one HEAD request): what :func:`h5feed.producer.files.open_files.check_readable` does
    with ``stat`` for a path."""
    try:
        info = _info(url)
    except Exception as exc:  # any client error (HTTP status, network, credentials) names the URL
        raise _fail("cannot read the object's metadata", url, exc, number) from exc
    if info.get("type") != "file":
        raise FileReadError(
            f"the URL is a {info.get('type', 'non-file')}, not an object",
            file=url,
            host=socket.gethostname(),
            number=number,
        )


def size(url: str) -> int:
    """The object's size in bytes (one HEAD request)."""
    return int(_info(url)["size"])


def identity(url: str) -> str:
    """What names the object's content now: URL, size, ETag and version (one HEAD request);
    a replaced object gets another. OSError when it cannot be asked for."""
    try:
        info = _info(url)
    except OSError:
        raise
    except Exception as exc:
        raise OSError(f"{url}: {type(exc).__name__}: {exc}") from exc
    etag, version = object_urls.etag_and_version(info)
    _remember(url, etag)
    return f"{url}\0{info.get('size')}\0{etag}\0{version}"


def _etag(info: dict[str, Any]) -> str:
    return object_urls.etag_and_version(info)[0]


#: The ETag of each object as this process last indexed it (:func:`identity`): an open of an
#: object replaced since is refused (guarantee 2). Bounded: cleared past this many objects.
_INDEXED_ETAGS: dict[str, str] = {}
_MAX_REMEMBERED = 100_000


def _remember(url: str, etag: str) -> None:
    if len(_INDEXED_ETAGS) >= _MAX_REMEMBERED:
        _INDEXED_ETAGS.clear()
    if etag:
        _INDEXED_ETAGS[url] = etag


class _UrlFile:
    """An fsspec file whose ``repr`` is its URL (h5py names a file object's file by its
    ``repr``, so ``h5.filename`` and every message built from it name the URL), whose reads
    are retried (guarantee 4): h5py reads through :meth:`readinto` or :meth:`read`."""

    def __init__(self, raw: Any, url: str, source: read_ahead.Source | None = None) -> None:
        self._raw, self._url, self.source = raw, url, source
        self.retried = 0  # reads retried so far (a figure for tests and logs)

    def __repr__(self) -> str:
        return self._url

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def readinto(self, buffer: Any) -> int:
        if self.source is not None:  # the ranges it touches, for the read-ahead
            self.source.touch(self._raw.tell(), memoryview(buffer).nbytes)
        return int(self._retrying(lambda: self._raw.readinto(buffer)))

    def read(self, size: int = -1) -> bytes:
        if self.source is not None and size > 0:
            self.source.touch(self._raw.tell(), size)
        return bytes(self._retrying(lambda: self._raw.read(size)))

    def _retrying(self, call: Any) -> Any:
        position = self._raw.tell()

        def again() -> None:
            self.retried += 1
            self._raw.seek(position)

        return read_retries.retried(call, again)


def open_h5(url: str) -> h5py.File:
    """``url`` opened read-only as an HDF5 file through fsspec (range-cached, see the module
    docstring), its external links refused
    (:func:`h5feed.producer.files.url_confine.refuse_external_links`); FileReadError naming the
    URL and host when it cannot be opened."""
    return open_h5_with_heap(url)[0]


def open_h5_with_heap(url: str) -> tuple[h5py.File, HeapReads | None]:
    """:func:`open_h5`, and the reads of its rows from its bytes
    (:class:`~h5feed.producer.files.heap_reads.HeapReads`) when it is streamed (None when
    it is opened from a node-local copy: HDF5 reads that file itself)."""
    parsed = object_urls.parse(url)
    request_counts.count_request()  # the open's HEAD: the object's size and ETag
    try:
        raw = filesystem(parsed.scheme).open(url, "rb", cache_type="none")
    except ImportError:
        raise
    except Exception as exc:
        raise _fail("cannot open the object", url, exc) from exc
    opened = _etag(getattr(raw, "details", None) or {})
    indexed = _INDEXED_ETAGS.get(url)
    if indexed is not None and opened and opened != indexed:
        raw.close()
        request_counts.count_refused()
        raise FileReadError(
            f"the object was replaced since this worker indexed it (ETag {indexed} then, "
            f"{opened} now): refused, its index no longer holds",
            file=url,
            host=socket.gethostname(),
        )
    root = node_cache.directory()
    if root is not None:  # a node-local copy of the object, when one is complete
        details = getattr(raw, "details", None) or {}
        copy = node_cache.copy_path(root, url, details)
        if copy is not None:
            try:
                h5 = _open_file(node_cache.open_copy(copy, url), url)
            except FileReadError:  # HDF5 cannot open the copy (a damaged disk): stream it
                node_cache.drop(copy)
            else:
                raw.close()
                read_ahead.release_url(url)  # a streamed open of it is read ahead no more
                return h5, None
        node_cache.queue_download(root, url, details, lambda: open_for_copy(url, details))
    raw.cache = RangeCache(  # in place of fsspec's: exact ranges, not blocks
        _requests(raw),
        int(raw.size),
        capacity=MAX_BLOCKS * block_bytes(parsed.scheme),
        min_fetch=MIN_FETCH_BYTES,
    )
    source = read_ahead.Source(url, raw.cache)
    gc_guard.hold(source)  # while the file lives (its reads wait on threads under h5py's lock)
    read_ahead.register(source)
    try:
        h5 = _open_file(_UrlFile(raw, url, source), url, raw.cache)
    except BaseException:
        read_ahead.release(source)
        raise
    cache: RangeCache = raw.cache
    return h5, HeapReads(read_retries.range_reader(cache, url), cache.size, cache.capacity // 4)


#: HDF5's metadata cache of a streamed file: fixed at 16 MiB (HDF5's own starts at 2 MiB and
#: may grow to 32 MiB, but its hit-rate rule rarely grows it while a worker reads clips).
METADATA_CACHE_BYTES = 16 << 20
#: A streamed file is opened without HDF5's chunk cache: with it, HDF5 reads a chunk whole
#: into the cache however few of its rows a read selects (a pack's chunk of 256 frame
#: descriptors, 4 KiB, for a video's 30: bytes the read-ahead did not fetch, so the
#: worker's read waited a round trip for them, holding h5py's lock); without it, HDF5
#: reads an unfiltered chunk's selected rows only, the bytes the read-ahead fetched
#: (:mod:`~h5feed.producer.files.clip_bytes`). The file's range cache holds its bytes.
_NO_CHUNK_CACHE = {"rdcc_nbytes": 0, "rdcc_nslots": 0}


def _open_file(file: Any, url: str, cache: RangeCache | None = None) -> h5py.File:
    """``file`` (the object's, or its node-local copy's, named ``url``) opened by h5py, its
    external links refused; ``file`` closed when either fails. With the object's ``cache``:
    a file whose metadata is paged is opened by whole pages (:func:`_open_in_pages`),
    without HDF5's chunk cache (:data:`_NO_CHUNK_CACHE`) and with a metadata cache of
    :data:`METADATA_CACHE_BYTES` (:func:`_keep_metadata`)."""
    try:
        h5 = h5py.File(file, "r", **(_NO_CHUNK_CACHE if cache is not None else {}))
    except Exception as exc:
        file.close()
        raise _fail("cannot open HDF5 file", url, exc) from exc
    try:
        if cache is not None:
            _open_in_pages(h5, cache)
            _keep_metadata(h5)
        url_confine.refuse_external_links(h5, url)
    except BaseException:
        h5.close()
        file.close()
        raise
    return h5


def open_for_copy(url: str, details: dict[str, Any]) -> _UrlFile:
    """``url`` opened afresh for a whole-object download
    (:mod:`~h5feed.producer.files.node_cache`): its reads pinned to the ETag in ``details``
    (fsspec sends ``If-Match``; another ETag now is refused here), counted, and retried as a
    worker's reads are (guarantee 4)."""
    request_counts.count_request()  # the open's HEAD
    raw = filesystem(object_urls.parse(url).scheme).open(url, "rb", cache_type="none")
    now, then = _etag(getattr(raw, "details", None) or {}), _etag(details)
    if now != then:
        raw.close()
        request_counts.count_refused()
        raise FileReadError(
            f"the object was replaced (ETag {then} when opened, {now} now): not copied",
            file=url,
            host=socket.gethostname(),
        )
    raw.cache.fetcher = _requests(raw)
    return _UrlFile(raw, url)


def _requests(raw: Any) -> Any:
    """The fsspec file ``raw``'s ranged GETs, each counted and retried (guarantee 4)."""
    return read_retries.each_request(request_counts.counted(raw.cache.fetcher), int(raw.size))


def metadata_page(h5: h5py.File) -> int | None:
    """The page of ``h5``'s metadata when it was written with HDF5's paged file-space
    strategy (``h5feed pack``'s shards: metadata in pages apart from the raw data), else
    None. From its superblock, read already: no request."""
    create = h5.id.get_create_plist()
    if create.get_file_space_strategy()[0] != h5py.h5f.FSPACE_STRATEGY_PAGE:
        return None
    return int(create.get_file_space_page_size())


def _open_in_pages(h5: h5py.File, cache: RangeCache) -> None:
    """A paged file's (:func:`metadata_page`) opening, the rest of it (the walk of its links,
    its index), reads whole pages (:meth:`RangeCache.open_in_pages`), not blocks of a
    quarter of the cache holding mostly frames."""
    page = metadata_page(h5)
    if page is not None:
        cache.open_in_pages(page)


def _keep_metadata(h5: h5py.File) -> None:
    """HDF5's metadata cache of the streamed ``h5`` fixed at :data:`METADATA_CACHE_BYTES`.

    Why: a worker keeps hundreds of a file's datasets open (a walk's, a pack's), and reading
    a clip touches metadata of its video (a dataset's header, its chunk index). With HDF5's
    default cache (2 MiB, grown only by a rule of hit rates over 50,000 accesses) those were
    dropped and read again: a round trip each, in the worker's own read, holding h5py's lock
    (counted over 1,600 clips: 1.3 such requests per clip of a pack, 0.35 of the sample
    layout; with it 0.01, frames contiguous, and 0.03). It bounds what is held, not what
    is allocated: a file's cache holds at most its metadata that was read, so a worker's
    memory for it stays bounded by ``max_open_files`` x 16 MiB, half of HDF5's own bound
    (32 MiB)."""
    config = h5.id.get_mdc_config()
    config.set_initial_size = True
    config.initial_size = config.min_size = config.max_size = METADATA_CACHE_BYTES
    h5.id.set_mdc_config(config)
