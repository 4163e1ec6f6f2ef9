"""The consumer ceiling over the socket: real TCP between network namespaces, with and without
CURVE, next to raw ZeroMQ on the same path.

``h5feed bench --ceiling --transports tcp,curve``. The bench process makes a network namespace
joined to its own by a veth pair (:mod:`h5feed.bench.netns`) and starts this process (run by
``run_one`` for ``"kind": "socket_ceiling"``) in the root namespace: it is the trainer. The
senders run inside the namespace (``ip netns exec``), so every byte crosses the kernel's TCP
stack; they say they run on another host, so no shared-memory slot is ever offered. Per
transport, three paths, each with fresh senders, a warm-up and ``repeats`` windows:

1. ``raw``: plain pyzmq (:mod:`h5feed.bench.raw_zmq`): a msgpack header frame and one batch
   frame per message, received with ``copy=False`` and viewed with ``np.frombuffer``;
2. ``batches``: ``h5feed.batches(..., workers=0, listen=tcp://...)`` fed by synthetic workers
   (:mod:`h5feed.bench.synthetic_worker`: the real worker and protocol, zeros for frames);
3. ``dataset``: the same into ``h5feed.dataset`` (TensorFlow).

With at least two CPUs the trainer is pinned to one and the senders to the rest. Trainer CPU
(``time.process_time``: every thread, ZeroMQ's I/O thread included) per clip splits the cost:
``raw`` is the receive itself (kernel copy, ZeroMQ, CURVE decryption); ``batches - raw`` is
h5feed's own work (protocol, scheduling, assembly and any copy into the batch); ``dataset -
batches`` is the hand-off to TensorFlow.

``--io-threads N`` gives the raw receiver N ZeroMQ I/O threads (CURVE decrypts in them: does a
second one raise the encrypted ceiling from 2+ senders?); the h5feed paths keep the trainer's
one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from h5feed.bench.ceiling import ListeningFeed, pinned_setup, stop_producers
from h5feed.bench.contender import Contender, Setup
from h5feed.bench.measure import drive_for, measure_window
from h5feed.bench.workload import BATCH_BYTES, BATCH_SIZE

TRANSPORTS = ("tcp", "curve")
PATHS = ("raw", "batches", "dataset")


def free_port(address: str) -> int:
    """A TCP port free now on ``address`` (the OS's pick; another process could take it
    before it is bound again, which would fail the bind loudly)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port


class _Keys:
    """CURVE key files for one run: the trainer's pair and one authorised producer pair."""

    def __init__(self, directory: str) -> None:
        from h5feed.common.trust.curve import KeyPair, write_key_pair

        self.trainer_public, self.trainer_secret = write_key_pair(directory, "trainer")
        self.authorized = os.path.join(directory, "authorized")
        os.mkdir(self.authorized)
        _, self.producer_secret = write_key_pair(self.authorized, "producer")
        self.trainer_secret_z85 = KeyPair.load(self.trainer_secret).secret

    def producer_args(self) -> list[str]:
        return ["--key", self.producer_secret, "--server-key", self.trainer_public]


@contextlib.contextmanager
def _senders(
    spec: dict[str, Any], path: str, address: str, keys: _Keys | None, cpus: list[int]
) -> Iterator[None]:
    """``spec["producers"]`` senders of ``path`` inside the namespace, connecting to
    ``address``; stopped (BYE, then SIGTERM, then SIGKILL) on leaving."""
    from h5feed.bench.netns import Netns

    net = Netns(**spec["netns"])
    module = "h5feed.bench.raw_zmq" if path == "raw" else "h5feed.bench.synthetic_worker"
    common = ["--connect", address, "--parent-pid", str(os.getpid())]
    common += ["--cpus", ",".join(map(str, cpus))]
    common += keys.producer_args() if keys is not None else []
    processes = []
    try:
        for i in range(spec["producers"]):
            own = [] if path == "raw" else ["--worker-id", f"remote-{i}", "--host", net.name]
            argv = [sys.executable, "-m", module, *common, *own]
            processes.append(_popen(net.command(argv)))
        yield
    finally:
        if path == "raw":
            for process in processes:
                process.terminate()  # raw senders have no BYE to wait for
        stop_producers(processes)


def _popen(argv: list[str]) -> Any:
    import subprocess

    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


def _contender(
    setup: Setup, path: str, address: str, keys: _Keys | None, io_threads: int = 1
) -> Contender:
    if path == "raw":
        from h5feed.bench.raw_zmq import RawReceiver

        return RawReceiver(setup, address, keys.trainer_secret_z85 if keys else None, io_threads)
    if keys is None:  # a private veth link: no CURVE is the point of the "tcp" path
        return ListeningFeed(setup, path, address, insecure=True)
    return ListeningFeed(
        setup, path, address, curve_key=keys.trainer_secret, curve_authorized=keys.authorized
    )


def serve_socket_ceiling(spec: dict[str, Any], send: Callable[[str, dict[str, Any]], None]) -> int:
    """The socket ceiling process (see the module docstring): sends one ``socket_ceiling``
    message with every window."""
    setup, trainer_cpus, producer_cpus = pinned_setup(spec)
    host = spec["netns"]["host_address"]
    windows: list[dict[str, Any]] = []
    tmpdir = tempfile.mkdtemp(prefix="h5feed-socket-ceiling-")
    try:
        for transport in spec["transports"]:
            keys = None
            if transport == "curve":
                keys = _Keys(tempfile.mkdtemp(dir=tmpdir))
            for path in PATHS:
                address = f"tcp://{host}:{free_port(host)}"
                contender = _contender(setup, path, address, keys, spec.get("io_threads", 1))
                with _senders(spec, path, address, keys, producer_cpus):
                    try:
                        contender.start()
                        contender.next_frames()
                        for _ in range(spec["repeats"]):
                            drive_for(contender, spec["warmup_s"])
                            window = measure_window(contender, spec["window_s"])
                            windows.append(
                                {
                                    "transport": transport,
                                    "path": path,
                                    **window.as_dict(),
                                    "gb_per_s": window.clips_per_s * BATCH_BYTES / BATCH_SIZE / 1e9,
                                }
                            )
                    finally:
                        contender.close()
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    tf = sys.modules.get("tensorflow")
    send(
        "socket_ceiling",
        {
            "windows": windows,
            "transports": list(spec["transports"]),
            "trainer_cpus": trainer_cpus,
            "producer_cpus": producer_cpus,
            "producers": spec["producers"],
            "io_threads": spec.get("io_threads", 1),
            "netns": spec["netns"]["name"],
            "link": f"veth {spec['netns']['host_address']} <-> {spec['netns']['peer_address']}",
            "tensorflow": getattr(tf, "__version__", None),
        },
    )
    return 0
