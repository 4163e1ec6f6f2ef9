"""The walk of a file's links (h5feed/producer/files/link_walk.py) looks at each object once,
a group's members in the order of their addresses, right after the group: one pass through
the metadata of a file written in order (a file opened from object storage is read through a
small cache)."""

from __future__ import annotations

import pathlib

import h5py
import numpy as np
import pytest

from h5feed.producer.files import link_walk


def test_each_object_is_looked_at_once_members_in_address_order_right_after_their_group(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "nested.h5"
    with h5py.File(path, "w") as h5:
        for v in range(40):  # created out of name order: names and addresses disagree
            group = h5.create_group(f"video_{(v * 7) % 40:03d}")
            group.create_dataset("frames", data=np.arange(v + 1))
            group.create_group("extra").create_dataset("crc32", data=np.arange(3))
        h5["video_000"]["link"] = h5py.ExternalLink("elsewhere.h5", "/x")
    looked: list[tuple[str, int]] = []  # (path, address) of each member looked at
    get_info = h5py.h5o.get_info

    def recording(*args: object) -> h5py.h5o.ObjInfo:
        info = get_info(*args)
        if len(args) == 2:  # (parent, name): a member, not the root
            parent, name = args
            looked.append(
                (f"{h5py.h5i.get_name(parent).decode().rstrip('/')}/{name.decode()}", info.addr)
            )  # type: ignore[attr-defined]
        return info

    monkeypatch.setattr(link_walk.h5py.h5o, "get_info", recording)
    with h5py.File(path, "r") as h5:
        found = link_walk.external_links(h5, str(path))
    assert found == [("/video_000/link", "elsewhere.h5", "/x")]
    paths = [path for path, _address in looked]
    assert sorted(paths) == sorted(
        f"/video_{v:03d}{member}"
        for v in range(40)
        for member in ("", "/frames", "/extra", "/extra/crc32")
    )  # each object once: each group, its dataset, its group and that one's dataset
    for parent in {p.rsplit("/", 1)[0] for p in paths}:
        members = [a for p, a in looked if p.rsplit("/", 1)[0] == parent]
        assert members == sorted(members), parent  # in the order of their addresses
    for i, path in enumerate(paths):  # a group's members (at any depth) right after it
        inside = [j for j, p in enumerate(paths) if p.startswith(path + "/")]
        assert inside == list(range(i + 1, i + 1 + len(inside))), path
