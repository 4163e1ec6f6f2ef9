"""Producers on other hosts: two producer "hosts" and a consumer "host", each in its own
network namespace, joined by veth pairs with documentation-only addresses (RFC 5737); one
full epoch crosses real TCP between them."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

#: (consumer side, producer side) of each link: TEST-NET-1 and TEST-NET-2, never routed.
LINKS = (("192.0.2.1", "192.0.2.2"), ("198.51.100.1", "198.51.100.2"))

# One set of network namespaces and addresses per machine: never two of these at once.
pytestmark = pytest.mark.xdist_group("machine")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture()
def namespaces() -> Iterator[tuple[str, list[str]]]:
    """A consumer namespace and two producer namespaces, each producer linked to the consumer."""
    tag = f"h5f{os.getpid() % 100000}"
    consumer, producers = f"{tag}c", [f"{tag}p{i}" for i in range(len(LINKS))]
    made: list[str] = []
    try:
        for name in (consumer, *producers):
            ip("netns", "add", name)
            made.append(name)
            ip("-n", name, "link", "set", "lo", "up")
        for i, (producer, (here, there)) in enumerate(zip(producers, LINKS, strict=True)):
            near, far = f"{tag}c{i}", f"{tag}p{i}v"
            ip("link", "add", near, "type", "veth", "peer", "name", far)
            ip("link", "set", near, "netns", consumer)
            ip("link", "set", far, "netns", producer)
            ip("-n", consumer, "addr", "add", f"{here}/24", "dev", near)
            ip("-n", producer, "addr", "add", f"{there}/24", "dev", far)
            ip("-n", consumer, "link", "set", near, "up")
            ip("-n", producer, "link", "set", far, "up")
        yield consumer, producers
    finally:
        for name in made:  # deleting a namespace deletes its veth ends, and their peers
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def test_one_epoch_over_tcp_between_three_hosts(
    namespaces: tuple[str, list[str]], small_dataset: list[pathlib.Path]
) -> None:
    consumer_ns, producer_ns = namespaces
    root = str(small_dataset[0].parent)
    producers = [
        subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                sys.executable,
                "-m",
                "h5feed",
                "produce",
                "--connect",
                f"tcp://{here}:5555",
                "--data-root",
                root,
                "--workers",
                "1",
                "--name",
                f"host{i}",
                # Without keys beyond loopback: safe here, the only hosts on these links are
                # the namespaces this test made (documentation addresses, never routed).
                "--insecure",
            ],
            stdin=subprocess.DEVNULL,
        )
        for i, (ns, (here, _)) in enumerate(zip(producer_ns, LINKS, strict=True))
    ]
    # insecure=True: the consumer's namespace reaches only the producers' namespaces (above).
    script = textwrap.dedent(
        f"""
        import collections, json
        import h5feed
        feed = h5feed.batches({[p.name for p in small_dataset]!r}, data_root={root!r},
                              workers=0, listen="tcp://0.0.0.0:5555", insecure=True,
                              start_timeout_s=60,
                              join_grace_s=3.0, clip_len=4, resize=(48, 64), batch_size=4)
        seen = collections.Counter(s for b in feed for s in b["sample"].tolist())
        workers = {{w["name"]: w["clips"] for w in feed.stats()["workers"]}}
        print(json.dumps({{"seen": sorted(seen.items()), "workers": workers}}))
        """
    )
    try:
        result = subprocess.run(
            ["ip", "netns", "exec", consumer_ns, sys.executable, "-c", script],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
    finally:
        for process in producers:
            process.terminate()
        for process in producers:
            process.wait(15)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["seen"] == [[s, 1] for s in range(24)]
    assert sorted(name.split("-")[0] for name in report["workers"]) == ["host0", "host1"]
    assert all(clips > 0 for clips in report["workers"].values()), report["workers"]
