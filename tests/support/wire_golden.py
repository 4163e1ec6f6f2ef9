"""Golden wire bytes and fields the wire, message and protocol-version tests share."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from h5feed.common.protocol import wire

LITTLE_ENDIAN = sys.byteorder == "little"


little_endian_only = pytest.mark.skipif(
    not LITTLE_ENDIAN, reason="golden bytes and dtype strings assume a little-endian host"
)


# One valid field set per message kind (test_valid_fields_cover_every_kind keeps it complete).
VALID_FIELDS: dict[str, dict[str, Any]] = {
    wire.HELLO: {
        "worker": "worker-0",
        "pid": 4242,
        "host": "node-a",
        "package": "0.1.0",
        "nonce": "ab",
        "protocols": [5, 6],
        "clip_semantics": 1,
    },
    wire.JOB: {
        "job": "job-1",
        "files": ["/data/a.h5", "/data/b.h5"],
        "clip": {"length": 8, "stride": 2, "size": [112, 112], "scale": 0.5, "flip": True},
        "layout": {"kind": "flat", "jpeg": "jpeg", "offsets": "video_offsets", "labels": None},
        "cache_dir": None,
        "on_error": "raise",
        "send_index": True,
        "clip_semantics": 1,
        "code": [["aug", b"\x03" * 32, "/home/me/project/aug.py"]],
    },
    wire.INDEX: {"job": "job-1", "file": 0, "videos": [["v0", 120, 3], ["v1", 64, None]]},
    wire.INDEX_BATCH: {"job": "job-1", "files": [0, 2], "counts": [1, 1], "names": ["a", "b"]},
    wire.UNIT: {
        "job": "job-1",
        "unit": 7,
        "batch": 2,
        "epoch": 1,
        "rows": [[0, "v0", 16]],
        "slot": None,
    },
    wire.DATA: {
        "job": "job-1",
        "unit": 7,
        "batch": 2,
        "samples": [[0, "v0", 16]],
        "skipped": [],
        "busy_s": 0.25,
    },
    wire.ERROR: {
        "job": "job-1",
        "unit": 7,
        "type": "DataError",
        "message": "cannot decode JPEG",
        "traceback": 'Traceback (most recent call last):\n  File "x.py"\nDataError\n',
        "file": "/data/a.h5",
        "video": "v0",
        "frame": 3,
        "file_number": None,
    },
    wire.BYE: {"reason": "done"},
    wire.PING: {},
    wire.SOURCE: {
        "job": "job-1",
        "source": "mypackage.data:make",
        "args": {"files": ["/data/a.h5"], "n": 3},
        "sys_path": ["/home/me/project"],
        "worker": 0,
        "workers": 2,
        "seed": 0,
        "epoch": 0,
        "spec": None,
        "batched": False,
        "code": [],
    },
    wire.SOURCE_INFO: {
        "job": "job-1",
        "kind": "map",
        "length": 100,
        "spec": {"tree": ["leaf"], "leaves": [["", "<f4", [3, None]]]},
        "epoch": 0,
        "checks": [[0, b"\x01" * 16, True], [99, b"\x02" * 16, False]],
    },
    wire.CHECK: {"job": "job-1", "epoch": 3},
    wire.ATTACH: {"port": 5555, "trainer": "host-1234"},
    wire.ATTACHED: {"replica": "fleet-1", "workers": 4, "trainers": 2},
    wire.ITEMS: {"job": "job-1", "unit": 7, "batch": 2, "epoch": 1, "items": [4, 0, 9]},
    wire.PULL: {"job": "job-1", "unit": 7, "batch": 2, "epoch": 1, "count": 16, "pass": 1},
}


# Protocol 3 (ITEMS, PULL, JOB layout) changed byte 8 of every header from 02 to 03; protocol
# 4 (HELLO nonce) changed it to 04 and added HELLO's "nonce"; protocol 5 (SOURCE batched,
# SOURCE_INFO checks, CHECK) changed it to 05. The new kinds' golden headers are in
# tests/unit/common/test_messages.py. Protocol 6 is spoken beside 5 (negotiation): these are the
# goldens
# of version 5, encoded so still; version 6's are in tests/unit/common/test_protocol_versions.py.
MAGIC_AND_VERSION = "95 a6 683566656564 05"  # fixarray(5), fixstr(6) "h5feed", fixint 5


GOLDEN_UNIT = bytes.fromhex(
    MAGIC_AND_VERSION
    + "a4 756e6974"  # "unit"
    + "86"  # fixmap(6), keys sorted: batch, epoch, job, rows, slot, unit
    + "a5 6261746368 02"  # "batch": 2
    + "a5 65706f6368 01"  # "epoch": 1
    + "a3 6a6f62 a2 6a31"  # "job": "j1"
    # "rows": [[0, 1, 2, 3, 0.5, 0.25, true, 9]]
    + "a4 726f7773 91 98 00 01 02 03 cb 3fe0000000000000 cb 3fd0000000000000 c3 09"
    + "a4 736c6f74 94 cd 1092 09 08 91 03"  # "slot": [4242, 9, 8, [3]]
    + "a4 756e6974 07"  # "unit": 7
    + "90"
)


GOLDEN_BYE = bytes.fromhex(
    MAGIC_AND_VERSION
    + "a3 627965"  # "bye"
    + "81 a6 726561736f6e a4 646f6e65"  # fixmap(1) {"reason": "done"}
    + "90"
)
