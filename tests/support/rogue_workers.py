"""A real worker process driven by a test as a rogue trainer would: for the trust tests
of code and files."""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping

import h5py
import numpy as np
import pytest
import zmq
from layout_data import make_videos, write_groups, write_raw
from paths import REPO

from h5feed.common.protocol import messages

RECEIVE_TIMEOUT_MS = 20_000  # a worker imports numpy, h5py and OpenCV before its HELLO


EXIT_TIMEOUT_S = 10


ALLOWED = "trustpkg.data:*"


_PACKAGE = {
    "__init__.py": "",
    "helpers.py": "def numbers():\n    return list(range(3))\n",
    # imports os (for the dotted-name walk) and re-exports a function of another module
    "data.py": (
        "import os\n"
        "from trustpkg.helpers import numbers as reexported\n\n"
        "def numbers():\n    return list(range(10))\n"
    ),
    "evil.py": (
        "import os, pathlib\n"
        "pathlib.Path(os.environ['TRUST_MARKER']).write_text('imported')\n\n"
        "def run(**kwargs):\n    return [1]\n"
    ),
}


class Rogue:
    """A consumer on a ROUTER socket and the worker process connected to it."""

    def __init__(self, router: zmq.Socket[bytes], process: subprocess.Popen[bytes]) -> None:
        self.router = router
        self.process = process
        self.identity = b""

    def receive(self) -> messages.Message:
        """The next message that is not a HELLO, within the timeout."""
        while True:
            assert self.router.poll(RECEIVE_TIMEOUT_MS, zmq.POLLIN), "no answer within the timeout"
            routing, *frames = self.router.recv_multipart(copy=False)
            self.identity = routing.bytes
            message = messages.decode(frames)
            if not isinstance(message, messages.Hello):
                return message

    def send(self, message: messages.Message) -> None:
        self.router.send_multipart([self.identity, *messages.encode(message)], copy=False)

    def error(self, message: messages.Message) -> messages.Error:
        self.send(message)
        answer = self.receive()
        assert isinstance(answer, messages.Error), answer
        return answer


class Setup:
    def __init__(self, base: pathlib.Path) -> None:
        self.base = base
        self.marker = base / "evil-imported"
        self.root = base / "root"
        self.outside = base / "outside"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    s = Setup(tmp_path_factory.mktemp("trust"))
    package = s.base / "code" / "trustpkg"
    package.mkdir(parents=True)
    for name, text in _PACKAGE.items():
        (package / name).write_text(text)
    s.root.mkdir()
    s.outside.mkdir()
    videos = make_videos(seed=3, count=2)
    write_groups(s.root / "inside.h5", videos)
    write_groups(s.outside / "real.h5", videos)  # exists: its refusal must read as the FIFO's
    os.mkfifo(s.outside / "secret.h5")  # opening it would block the worker
    (s.root / "link.h5").symlink_to(s.outside / "secret.h5")
    with h5py.File(s.root / "elink.h5", "w") as f:  # a video group in a file outside
        f["video_000"] = h5py.ExternalLink(str(s.outside / "secret.h5"), "/video_000")
    with h5py.File(s.root / "elink_rel.h5", "w") as f:
        f["video_000"] = h5py.ExternalLink("../outside/secret.h5", "/video_000")
    write_raw(s.outside / "raw.h5", videos, with_offsets=False)
    with h5py.File(s.outside / "raw.h5", "r") as f:
        shape, labels = f["images"].shape, f["labels"][()]
    layout = h5py.VirtualLayout(shape=shape, dtype=np.uint8)
    layout[...] = h5py.VirtualSource(str(s.outside / "secret.h5"), "images", shape=shape)
    with h5py.File(s.root / "vds.h5", "w") as f:  # raw layout: images from a file outside
        f.create_virtual_dataset("images", layout)
        f.create_dataset("labels", data=labels)
    return s


@contextlib.contextmanager
def rogue_worker(
    base: pathlib.Path, argv: Callable[[str], list[str]], env: Mapping[str, str]
) -> Iterator[Rogue]:
    """A real worker process (``python -m h5feed.producer.worker *argv(address)``, run in
    ``base``) connected to a ROUTER this test speaks for, past its HELLO; killed at the end."""
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    address = f"ipc://{base}/worker.sock"
    router.bind(address)
    process = subprocess.Popen(
        [sys.executable, "-m", "h5feed.producer.worker", *argv(address)],
        stdin=subprocess.DEVNULL, env=dict(env), cwd=base,
    )  # fmt: skip
    try:
        rogue = Rogue(router, process)
        assert router.poll(RECEIVE_TIMEOUT_MS, zmq.POLLIN), "no HELLO within the timeout"
        rogue.identity = router.recv_multipart()[0]
        yield rogue
    finally:
        process.kill()
        process.wait(timeout=EXIT_TIMEOUT_S)
        router.close(linger=0)
        context.term()


@pytest.fixture(scope="module")
def rogue(setup: Setup) -> Iterator[Rogue]:
    env = dict(os.environ, TRUST_MARKER=str(setup.marker))
    # the worker runs elsewhere (relative paths of the external storage resolve there): it
    # imports h5feed from this checkout and the user code from the temporary package
    paths = (str(REPO), str(setup.base / "code"), env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)

    def argv(address: str) -> list[str]:
        return [
            "--connect", address, "--worker-id", "w0", "--parent-pid", str(os.getpid()),
            "--persistent", "--allow-code", ALLOWED, "--data-root", str(setup.root),
        ]  # fmt: skip

    with rogue_worker(setup.base, argv, env) as worker:
        yield worker
