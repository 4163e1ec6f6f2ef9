"""The ``https://`` route (fsspec's HTTP filesystem, aiohttp, installed with the storage
extra) against a real HTTP server on loopback (tests/support/http_server.py: static files
with ETags and ranged GETs; plain ``http://``, the same code as ``https://`` without TLS).

What these show: a feed of URLs of a web server is the feed of the same files on disk, batch
for batch, 2 epochs on 2 workers, exactly once, each file read by ranged GETs only (the
trainer takes an ``http(s)`` URL as an object without a GET of it); the index cache keys
follow the file's ETag (one HEAD per URL); a URL outside a ``data_root`` is refused; a missing
URL is named when the feed is made.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from http_server import HttpFiles

import h5feed
from h5feed.producer.files import node_cache
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

pytestmark = pytest.mark.processes

OPTIONS: dict[str, Any] = {
    "clip_len": 2, "resize": (24, 32), "clips_per_video": 2, "batch_size": 3, "seed": 11,
    "index_cache": False, "start_timeout_s": 60, "unit_timeout_s": 60,
}  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[pathlib.Path]:
    root = tmp_path_factory.mktemp("http") / "data"
    spec = SampleSpec(
        files=2, videos_per_file=5, min_frames=4, max_frames=8, height=24, width=32, seed=5
    )
    return sorted(make_sample_dataset(root, spec))


@pytest.fixture()
def server(files: list[pathlib.Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpFiles]:
    monkeypatch.delenv(node_cache.DIR_ENV, raising=False)
    served = HttpFiles(files[0].parent.parent)
    try:
        yield served
    finally:
        served.stop()


def _collect(feed: Any) -> list[dict[str, np.ndarray]]:
    return [{k: np.array(v) for k, v in batch.items()} for batch in feed]


def test_two_epochs_over_http_are_the_same_batches_as_on_disk_exactly_once(
    server: HttpFiles, files: list[pathlib.Path]
) -> None:
    options = {**OPTIONS, "epochs": 2, "workers": 2}
    expected = _collect(h5feed.batches([str(p) for p in files], **options))
    urls = [server.url(p) for p in files]
    got = _collect(h5feed.batches(urls, **options))
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        for key in a:
            if key != "file":
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    for epoch in range(2):
        seen = np.concatenate([b["sample"] for b in got if int(b["epoch"][0]) == epoch])
        assert sorted(seen.tolist()) == list(range(2 * 5 * 2)), f"epoch {epoch}"
    named = {f.decode() for b in got for f in b["file"].tolist()}
    assert named == set(urls)  # batches name the URL
    assert server.ranged > 0 and server.gets == server.ranged  # never a whole file


def test_the_index_cache_follows_an_http_files_etag(
    server: HttpFiles, files: list[pathlib.Path], tmp_path: pathlib.Path
) -> None:
    urls = [server.url(p) for p in files]
    options = {**OPTIONS, "epochs": 1, "workers": 1, "index_cache": str(tmp_path / "cache")}
    first = h5feed.batches(urls, **options)
    assert first.length is None  # never indexed
    batches = _collect(first)
    again = h5feed.batches(urls, **options)
    assert again.length == len(batches)  # the record of the first, keyed by each ETag
    again.close()
    data = bytearray(files[0].read_bytes())
    data[-1] ^= 0xFF  # the same size and name: only the ETag tells
    files[0].write_bytes(bytes(data))
    try:
        changed = h5feed.batches(urls, **options)
        assert changed.length is None  # missed: the file changed
        changed.close()
    finally:
        data[-1] ^= 0xFF
        files[0].write_bytes(bytes(data))


def test_an_http_url_outside_the_data_root_is_refused(
    server: HttpFiles, files: list[pathlib.Path]
) -> None:
    with pytest.raises(ValueError, match="outside data_root"):
        h5feed.batches([server.url(files[0])], data_root=f"{server.endpoint}/other", **OPTIONS)


def test_a_missing_http_url_is_named_when_the_feed_is_made(server: HttpFiles) -> None:
    gone = f"{server.endpoint}/data/gone.h5"
    with pytest.raises(FileNotFoundError, match=f"{gone}.*matches no object"):
        h5feed.batches([gone], **{**OPTIONS, "epochs": 1, "workers": 1})
