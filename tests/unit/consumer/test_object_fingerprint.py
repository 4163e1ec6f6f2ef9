"""The fingerprint's parts for files on object storage (h5feed/consumer/position/fingerprint.py,
guarantee 3): an overwritten object is named, a copy under the same names resumes."""

from __future__ import annotations

import pytest

from h5feed.common.errors import ResumeError
from h5feed.consumer.position import fingerprint

SAVED = [("s3://b/p/a.h5", '"e1"', ""), ("s3://b/p/b.h5", '"e2"', "v2")]


def test_an_overwritten_object_is_named_by_its_url() -> None:
    now = [SAVED[0], ("s3://b/p/b.h5", '"e3"', "v3")]
    with pytest.raises(ResumeError, match=r"objects overwritten .*s3://b/p/b\.h5") as caught:
        fingerprint.check(fingerprint.object_parts(SAVED), fingerprint.object_parts(now))
    assert "a.h5" not in str(caught.value)


def test_the_same_objects_under_another_bucket_resume() -> None:
    moved = [(url.replace("s3://b/", "s3://other/"), e, v) for url, e, v in SAVED]
    fingerprint.check(fingerprint.object_parts(SAVED), fingerprint.object_parts(moved))


def test_too_many_objects_to_name_are_still_told_apart_by_their_digest() -> None:
    many = [(f"s3://b/p/{i:06d}.h5", f'"{i}"', "") for i in range(400)]
    parts = fingerprint.object_parts(many)
    assert "object_etags" not in parts  # past 4 KiB of text: the digest alone
    changed = fingerprint.object_parts([*many[:-1], ("s3://b/p/000399.h5", '"x"', "")])
    with pytest.raises(ResumeError, match="objects: saved"):
        fingerprint.check(parts, changed)
    fingerprint.check_shape(parts | fingerprint.object_parts(SAVED))  # a state's bounds hold
