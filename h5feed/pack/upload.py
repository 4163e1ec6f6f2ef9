"""``h5feed pack --upload URL``: what ``h5feed pack`` wrote in OUT, copied to object storage.

HDF5 cannot be written to a bucket in place (h5py writes through seeks and rewrites), so
``pack`` writes and verifies OUT locally, then this copies it: every shard (``*.h5``) under
URL at the same relative key, then ``h5feed-pack.json`` last, so that a reader who finds the
manifest in the bucket finds every shard it lists. Credentials and endpoint are this
process's own (:mod:`h5feed.common.storage_config`). Unfinished files (``*.tmp``) are never
copied. A failed copy raises, naming the file and the URL; a re-run copies everything again
(objects are replaced whole, never appended to).
"""

from __future__ import annotations

import os
import pathlib

from h5feed.common import object_urls, storage_config

__all__ = ["MANIFEST", "upload"]

MANIFEST = "h5feed-pack.json"


def upload(out: str | os.PathLike[str], url: str) -> list[str]:
    """Copy OUT's shards, then its manifest, under ``url``; the URLs written, in order.
    ValueError for a URL that is not plain (:func:`h5feed.common.object_urls.parse`)."""
    target = object_urls.parse(url)
    root = pathlib.Path(out)
    files = sorted(p for p in root.rglob("*.h5") if p.is_file())
    manifest = root / MANIFEST
    if manifest.is_file():
        files.append(manifest)  # last: the manifest names only shards already there
    fs = storage_config.filesystem(target.scheme)
    written = []
    for path in files:
        key = path.relative_to(root).as_posix()
        destination = target.join(key)
        object_urls.parse(destination)  # a key made of OUT's names: still a plain URL
        try:
            fs.put_file(str(path), destination)
        except Exception as exc:
            raise OSError(f"h5feed pack: cannot upload {path} to {destination}: {exc}") from exc
        written.append(destination)
    return written
