"""A worker process under callgrind, driven message by message by this script as its consumer:
a JOB of the files in DATA_DIR, its INDEX_BATCH, then N UNITs of 8 rows each (clips of 8
frames, resize (64, 80), crop (56, 56), flips), one at a time, each answered by DATA before the
next, then BYE. Run with N=10 and N=60: the difference of the two instruction counts over 400
is the worker's instructions per clip (its start-up, JOB and BYE cancel).

    python worker_clips.py DATA_DIR N CALLGRIND_OUT     (DATA_DIR: h5feed make-sample DIR
        --files 2 --videos-per-file 8 --min-frames 16 --max-frames 24 --height 120
        --width 160; the h5feed on PYTHONPATH is the one measured)
"""

import os
import pathlib
import subprocess
import sys
import tempfile

import zmq

from h5feed.common.config import ClipSpec
from h5feed.common.protocol import messages
from h5feed.consumer.options import LayoutArgs

TIMEOUT_MS = 600_000  # a worker under callgrind starts in minutes
ROWS = 8

data = pathlib.Path(sys.argv[1])
units = int(sys.argv[2])
out = sys.argv[3]
files = sorted(data.glob("*.h5"))
spec = ClipSpec(clip_len=8, resize=(64, 80), crop=(56, 56))
context = zmq.Context()
router = context.socket(zmq.ROUTER)
router.setsockopt(zmq.LINGER, 0)
address = f"ipc://{tempfile.mkdtemp()}/w.sock"
router.bind(address)
worker = subprocess.Popen(
    ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m",
     "h5feed.producer.worker", "--connect", address, "--worker-id", "w0",
     "--parent-pid", str(os.getpid())],
    stderr=subprocess.DEVNULL,
)  # fmt: skip
identity = b""


def receive(hello: bool = False) -> messages.Message:
    """The worker's next message (a HELLO only when ``hello``: it repeats them)."""
    global identity
    while True:
        assert router.poll(TIMEOUT_MS), "no message within the timeout"
        routing, *frames = router.recv_multipart(copy=False)
        identity = routing.bytes
        message = messages.decode(frames)
        if hello or not isinstance(message, messages.Hello):
            return message


def send(message: messages.Message) -> None:
    router.send_multipart([identity, *messages.encode(message)], copy=False)


assert isinstance(receive(hello=True), messages.Hello)
refs = tuple(messages.FileRef(i, str(path)) for i, path in enumerate(files))
send(messages.Job("j", refs, spec.to_wire(), LayoutArgs().resolve().to_wire(), None))
index = receive()
assert isinstance(index, messages.IndexBatch), index
videos = [(f, v) for f, count in zip(index.files, index.counts, strict=True) for v in range(count)]
for unit in range(units):
    rows = []
    for r in range(ROWS):
        sample = unit * ROWS + r
        file, video = videos[sample % len(videos)]
        rows.append(messages.Row(sample, file, video, sample % 8, 0.5, 0.25, sample % 2 == 1, 0))
    send(messages.Unit("j", unit, unit, 0, tuple(rows)))
    answer = receive()
    assert isinstance(answer, messages.Data) and answer.unit == unit, answer
send(messages.Bye("done"))
print(worker.wait(timeout=TIMEOUT_MS / 1000))
