"""URLs of object storage, without a server: parsing (no fsspec chaining, no file://, no
'..'), the data-root rule a producer applies to a JOB's URL (PathRefused before any request),
each process's own fsspec options, and the error naming the extra when fsspec is missing."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from h5feed.common import object_urls, storage_config
from h5feed.consumer.hdf5.files import resolve_files
from h5feed.producer.files.confine import PathRefused, job_path
from h5feed.producer.files.url_confine import job_url

ROOT = "s3://bucket/data"


def test_a_url_is_parsed_to_one_normal_form() -> None:
    url = object_urls.parse("s3://bucket/data/a.h5")
    assert (url.scheme, url.bucket, url.key) == ("s3", "bucket", "data/a.h5")
    assert str(object_urls.parse("S3://bucket/data/")) == "s3://bucket/data"
    assert object_urls.is_url("gs://b/k") and object_urls.is_url("simplecache::s3://b/k")
    assert not object_urls.is_url("data/a.h5") and not object_urls.is_url("/abs/a.h5")


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("simplecache::s3://bucket/data/a.h5", "chaining"),
        ("filecache::s3://bucket/data/a.h5", "chaining"),
        ("s3://bucket/data/a.h5::file:///etc/passwd", "chaining"),
        ("file:///etc/passwd", "file://"),
        ("s3://bucket/data/../secret/a.h5", "'..'"),
        ("s3://bucket/data/./a.h5", "'..'"),
        ("s3://bucket/data//a.h5", "empty"),
        ("s3://bucket/data\\..\\x.h5", "backslash"),
        ("s3://bucket/data/a\x00.h5", "control"),
        ("s3://user@bucket/a.h5", "bucket"),
        ("s3:///a.h5", "bucket"),
        ("s3://bucket/" + "a" * 3000, "longer"),
    ],
)
def test_malformed_and_chained_urls_are_refused(text: str, rule: str) -> None:
    with pytest.raises(ValueError, match=rule):
        object_urls.parse(text)
    with pytest.raises(PathRefused, match=rule):  # the producer: with or without a root
        job_path(text, ROOT)
    with pytest.raises(PathRefused, match=rule):
        job_path(text, None)


def test_the_data_root_holds_its_prefix_segment_by_segment() -> None:
    root = object_urls.parse(ROOT)
    assert object_urls.under(object_urls.parse("s3://bucket/data/a.h5"), root)
    assert object_urls.under(object_urls.parse("s3://bucket/data/sub/a.h5"), root)
    assert object_urls.under(object_urls.parse("s3://bucket/data"), root)
    assert not object_urls.under(object_urls.parse("s3://bucket/database/a.h5"), root)
    assert not object_urls.under(object_urls.parse("s3://other/data/a.h5"), root)
    assert not object_urls.under(object_urls.parse("gs://bucket/data/a.h5"), root)
    assert object_urls.under(
        object_urls.parse("s3://bucket/x.h5"), object_urls.parse("s3://bucket")
    )


@pytest.mark.parametrize(
    "path",
    [
        "s3://bucket/database/a.h5",  # a prefix that only starts like the root's
        "s3://other/data/a.h5",
        "gs://bucket/data/a.h5",
        "https://bucket/data/a.h5",
    ],
)
def test_a_url_outside_the_producers_root_is_path_refused(path: str) -> None:
    with pytest.raises(PathRefused, match="outside the data root"):
        job_path(path, ROOT)


def test_under_a_url_root_relative_keys_are_joined_and_paths_refused() -> None:
    assert job_path("s3://bucket/data/a.h5", ROOT) == "s3://bucket/data/a.h5"
    assert job_path("sub/a.h5", ROOT) == "s3://bucket/data/sub/a.h5"
    for bad, rule in [("../secret/a.h5", "'..'"), ("/etc/passwd", "absolute"), ("", "empty")]:
        with pytest.raises(PathRefused, match=rule):
            job_url(bad, ROOT)
    # a URL under a producer whose data root is a local directory
    with pytest.raises(PathRefused, match="local directory"):
        job_path("s3://bucket/data/a.h5", "/srv/data")


def test_each_process_takes_its_own_options_bounded_by_default() -> None:
    s3 = storage_config.options_for("s3", environ={})
    assert s3["config_kwargs"]["read_timeout"] == storage_config.READ_TIMEOUT_S
    assert s3["config_kwargs"]["retries"]["max_attempts"] == storage_config.S3_ATTEMPTS
    env = {storage_config.STORAGE_ENV: '{"endpoint_url": "http://127.0.0.1:9000"}'}
    assert storage_config.options_for("s3", environ=env)["endpoint_url"].endswith(":9000")
    given = storage_config.options_for("s3", {"anon": True}, environ=env)  # the trainer's own
    assert given["anon"] is True and "endpoint_url" not in given
    assert storage_config.options_for("gs", environ={}) == {}
    with pytest.raises(ValueError, match="not JSON"):
        storage_config.options_for("s3", environ={storage_config.STORAGE_ENV: "{"})
    with pytest.raises(ValueError, match="JSON object"):
        storage_config.options_for("s3", environ={storage_config.STORAGE_ENV: "[1]"})


def test_without_fsspec_a_url_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)  # as if not installed
    with pytest.raises(ImportError, match=r"h5feed\[storage\]"):
        storage_config.filesystem("s3")
    with pytest.raises(ImportError, match=r"h5feed\[storage\]"):
        resolve_files("s3://bucket/data/*.h5")


def test_the_trainer_refuses_mixed_lists_and_chained_urls_before_any_request() -> None:
    with pytest.raises(ValueError, match="not both"):
        resolve_files(["s3://bucket/data/a.h5", "local.h5"])
    with pytest.raises(ValueError, match="chaining"):
        resolve_files("simplecache::s3://bucket/data/a.h5")


@pytest.mark.processes
def test_a_local_feed_never_imports_fsspec() -> None:
    code = (
        "import sys, h5feed.consumer.options, h5feed.producer.files.open_files, "
        "h5feed.producer.layouts, h5feed.producer.worker.hdf5_job; "
        "print('fsspec' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "False", out.stderr


def test_the_benchs_local_scheme_is_refused_unless_the_bench_set_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    """h5feed-bench:// reads local files: a peer's URL reaches it only in the bench's own
    processes (object_urls guarantee 3), and there only under the bench's root."""
    monkeypatch.delenv(object_urls.BENCH_ENV, raising=False)
    url = f"{object_urls.BENCH_SCHEME}://data/a.h5"
    with pytest.raises(ValueError, match="the object-storage bench's own"):
        object_urls.parse(url)
    with pytest.raises(PathRefused, match="bench's own"):
        job_url(url, None)  # a producer's check of a JOB's URL
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.h5").write_bytes(b"0123456789")
    (tmp_path / "secret").write_bytes(b"x")
    monkeypatch.setenv(object_urls.BENCH_ENV, json.dumps({"root": str(tmp_path), "latency_ms": 0}))
    assert str(object_urls.parse(url)) == url
    fs = storage_config.filesystem(object_urls.BENCH_SCHEME)
    with fs.open(url, "rb", block_size=4, cache_type="blockcache") as f:
        assert f.read() == b"0123456789"
    assert fs.info(url)["ETag"]
    with pytest.raises(ValueError, match="leaves the bench's root"):
        fs.local("data/../../etc/passwd")  # what parsing refuses anyway ('..')
