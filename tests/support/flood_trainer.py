"""A trainer run as a subprocess by tests/system/test_flood.py (not a test module).

``python tests/support/flood_trainer.py CONFIG.json``: sets its soft ``RLIMIT_NOFILE`` to 1024 (the
common default) before h5feed is imported, then reads one epoch of ``files`` with one local
worker, listening with CURVE keys at ``listen``. After its second batch it writes the file
``ready`` in ``dir`` and waits (at most ``wait_s``) for the file ``kill``, then SIGKILLs its
local worker and reads on. A run that completes writes ``result.json``: the sample ids read
and the stream's ``stats()``.
"""

from __future__ import annotations

import json
import os
import pathlib
import resource
import signal
import sys
import time
from typing import Any

config: dict[str, Any] = json.loads(pathlib.Path(sys.argv[1]).read_text())
_soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

import h5feed  # noqa: E402  (after the limit is set, as a trainer started by a shell)

directory = pathlib.Path(config["dir"])
feed = h5feed.batches(
    config["files"], clip_len=4, resize=(48, 64), crop=(40, 40), batch_size=1, workers=1,
    seed=5, listen=config["listen"], curve_key=config["curve_key"],
    curve_authorized=config["curve_authorized"], max_inflight_batches=2,
    join_grace_s=0.0,
)  # fmt: skip
samples: list[int] = []
with feed.stream() as stream:
    for i, batch in enumerate(stream):
        samples += batch["sample"].tolist()
        if i == 1:
            (directory / "ready").write_text(str(resource.getrlimit(resource.RLIMIT_NOFILE)))
            deadline = time.monotonic() + config["wait_s"]
            while not (directory / "kill").exists():
                if time.monotonic() > deadline:
                    sys.exit("flood_trainer: no 'kill' file came")
                time.sleep(0.05)
            os.kill(stream.worker_pids[0], signal.SIGKILL)
    stats = stream.stats()
result = {"samples": samples, "stats": {k: v for k, v in stats.items() if k != "workers"}}
(directory / "result.json").write_text(json.dumps(result, default=str))
