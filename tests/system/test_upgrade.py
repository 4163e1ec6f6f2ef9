"""The real previous release against this one: an old producer for a new trainer, new
producers for an old trainer, and a mixed fleet whose bytes equal a fleet of one version.

The previous release's code is this repository at :data:`upgrade_pins.PREVIOUS_RELEASE`,
unpacked with ``git archive`` and put first on ``PYTHONPATH`` of the processes that run it
(nothing is installed: it needs the same packages). A clone without that commit (a shallow
one) fails here, with the command that fixes it: the test is never skipped.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import textwrap
import time
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pytest
import zmq
from conftest import SMALL
from paths import REPO
from ports import free_port
from remote_producers import CLIP, remote_feed
from upgrade_pins import PREVIOUS_PACKAGE, PREVIOUS_PROTOCOL, PREVIOUS_RELEASE

from h5feed.common.protocol import messages
from h5feed.common.protocol.versions import PROTOCOL_VERSION
from h5feed.common.version import __version__
from h5feed.producer.sample_data import make_sample_dataset

SAMPLES = 24  # small_dataset's samples per epoch (as tests/system/test_producers.py counts them)


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The previous release's ``h5feed`` package, unpacked from this repository's history."""
    root = tmp_path_factory.mktemp("previous-release")
    archive = root / "h5feed.tar"
    made = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", "-o", str(archive),
         PREVIOUS_RELEASE, "h5feed"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if made.returncode != 0:
        pytest.fail(
            f"the previous release {PREVIOUS_RELEASE} (protocol {PREVIOUS_PROTOCOL}) is not "
            f"in this clone's history: {made.stderr.strip()}. A shallow clone? Run "
            "`git fetch --unshallow` (tests/support/upgrade_pins.py)."
        )
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return root


def env_of(code: pathlib.Path) -> dict[str, str]:
    """The environment of a process that runs the ``h5feed`` package found at ``code`` (run
    with ``python -P``: the working directory, this repository, must not come first)."""
    return {**os.environ, "PYTHONPATH": str(code)}


def start_producer(
    port: int, data_root: pathlib.Path, name: str, code: pathlib.Path
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "h5feed", "produce", "--data-root", str(data_root),
         "--workers", "1", "--name", name],
        env={**env_of(code), "H5FEED_CONNECT": f"tcp://127.0.0.1:{port}"},
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.fixture()
def fleet(small_dataset: list[pathlib.Path]) -> Iterator[list[subprocess.Popen[str]]]:
    """The producers a test starts, stopped at its end (their output kept for its asserts)."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def run_epochs(
    port: int, dataset: list[pathlib.Path]
) -> tuple[collections.Counter[tuple[int, int]], str, list[Mapping[str, object]]]:
    """Two epochs read by a trainer of this release: (epoch, sample) counts, a digest of every
    batch's arrays in order, and its workers' figures."""
    feed = remote_feed(port, dataset, epochs=2, batch_size=5, seed=3, start_timeout_s=120)
    seen: collections.Counter[tuple[int, int]] = collections.Counter()
    digest = hashlib.sha256()
    for batch in feed:
        seen.update(zip(batch["epoch"].tolist(), batch["sample"].tolist(), strict=True))
        for key in sorted(batch):
            array = np.asarray(batch[key])  # names are objects: their bytes, not pointers
            data = repr(array.tolist()).encode() if array.dtype == object else array.tobytes()
            digest.update(key.encode() + data)
    return seen, digest.hexdigest(), feed.stats()["workers"]


EXACTLY_TWO_EPOCHS = collections.Counter({(e, s): 1 for e in range(2) for s in range(SAMPLES)})


def test_the_previous_release_runs_from_its_own_code(previous_release: pathlib.Path) -> None:
    said = subprocess.run(
        [sys.executable, "-P", "-c",
         "import h5feed, h5feed.common.wire as w; print(h5feed.__file__, h5feed.__version__, "
         "w.PROTOCOL_VERSION)"],
        env=env_of(previous_release), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    where, package, protocol = said.stdout.split()
    assert pathlib.Path(where).is_relative_to(previous_release)
    assert (package, int(protocol)) == (PREVIOUS_PACKAGE, PREVIOUS_PROTOCOL)
    assert (__version__, PROTOCOL_VERSION) != (PREVIOUS_PACKAGE, PREVIOUS_PROTOCOL)


def test_a_new_trainer_reads_every_epoch_exactly_once_from_old_producers(
    previous_release: pathlib.Path,
    small_dataset: list[pathlib.Path],
    fleet: list[subprocess.Popen[str]],
) -> None:
    port = free_port()
    root = small_dataset[0].parent
    fleet += [start_producer(port, root, f"old{i}", previous_release) for i in range(2)]
    seen, _, workers = run_epochs(port, small_dataset)
    assert seen == EXACTLY_TWO_EPOCHS
    assert {(w["protocol"], w["package"]) for w in workers} == {
        (PREVIOUS_PROTOCOL, PREVIOUS_PACKAGE)
    }


OLD_TRAINER = textwrap.dedent(
    """
    import collections, json, sys
    import h5feed
    files, root, port, out = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4]
    feed = h5feed.batches(files, data_root=root, workers=0, listen=f"tcp://127.0.0.1:{port}",
                          epochs=2, batch_size=5, seed=3, start_timeout_s=120, **CLIP)
    seen = collections.Counter()
    for batch in feed:
        seen.update(zip(batch["epoch"].tolist(), batch["sample"].tolist()))
    workers = [w["name"] for w in feed.stats()["workers"]]
    json.dump({"seen": [[e, s, n] for (e, s), n in seen.items()], "workers": workers,
               "version": h5feed.__version__}, open(out, "w"))
    """
)


def test_an_old_trainer_reads_every_epoch_exactly_once_from_new_producers(
    previous_release: pathlib.Path,
    small_dataset: list[pathlib.Path],
    fleet: list[subprocess.Popen[str]],
    tmp_path: pathlib.Path,
) -> None:
    port = free_port()
    root = small_dataset[0].parent
    out = tmp_path / "old-trainer.json"
    files = ",".join(p.name for p in small_dataset)
    script = f"CLIP = {CLIP!r}\n{OLD_TRAINER}"
    fleet += [start_producer(port, root, f"new{i}", REPO) for i in range(2)]
    await_hellos(port, len(fleet))  # both join the epoch from its start
    trainer = subprocess.Popen(
        [sys.executable, "-P", "-c", script, files, str(root), str(port), str(out)],
        env=env_of(previous_release), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _, stderr = trainer.communicate(timeout=300)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.communicate(timeout=30)
    assert trainer.returncode == 0, stderr[-4000:]
    said = json.loads(out.read_text())
    seen = collections.Counter({(e, s): n for e, s, n in said["seen"]})
    assert seen == EXACTLY_TWO_EPOCHS
    assert said["version"] == PREVIOUS_PACKAGE
    assert sorted(name.split("-")[0] for name in said["workers"]) == ["new0", "new1"]


def test_a_mixed_fleet_gives_the_bytes_of_a_fleet_of_one_version(
    previous_release: pathlib.Path,
    small_dataset: list[pathlib.Path],
    fleet: list[subprocess.Popen[str]],
) -> None:
    root = small_dataset[0].parent
    digests: dict[str, str] = {}
    for fleet_of, codes in {"new": [REPO, REPO], "mixed": [previous_release, REPO]}.items():
        port = free_port()
        started = [start_producer(port, root, f"{fleet_of}{i}", c) for i, c in enumerate(codes)]
        fleet += started
        await_hellos(port, len(started))  # both join the epoch from its start
        seen, digests[fleet_of], workers = run_epochs(port, small_dataset)
        assert seen == EXACTLY_TWO_EPOCHS
        protocols = sorted(int(str(w["protocol"])) for w in workers)
        expected = [PREVIOUS_PROTOCOL if c != REPO else PROTOCOL_VERSION for c in codes]
        assert protocols == expected, workers
        if fleet_of == "mixed":  # each did its share: both versions made bytes of the run
            assert all(int(str(w["clips"])) > 0 for w in workers), workers
            # Busy seconds (version 6, advisory) come from the new producer only.
            busy = {int(str(w["protocol"])): float(str(w["busy_s"])) for w in workers}
            assert busy[PREVIOUS_PROTOCOL] == 0.0 < busy[PROTOCOL_VERSION], workers
        stop(started)
    assert digests["mixed"] == digests["new"]


def await_hellos(port: int, count: int, timeout_s: float = 120.0) -> None:
    """Wait until ``count`` workers say hello on ``port`` (each says it every second until a
    trainer answers), so all are up when the trainer binds the port after this returns."""
    context = zmq.Context()  # its own: term() returns once the port is unbound
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(f"tcp://127.0.0.1:{port}")
    heard: set[bytes] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(heard) < count:
            left_ms = int((deadline - time.monotonic()) * 1000)
            assert left_ms > 0 and router.poll(left_ms), f"{len(heard)}/{count} said hello"
            identity, *frames = router.recv_multipart()
            if isinstance(messages.decode(frames), messages.Hello):
                heard.add(identity)
    finally:
        router.close()
        context.term()


def stop(processes: Sequence[subprocess.Popen[str]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        process.communicate(timeout=60)


def test_an_old_and_a_new_producer_share_one_file_for_a_new_trainer_exactly_once(
    previous_release: pathlib.Path,
    fleet: list[subprocess.Popen[str]],
    tmp_path: pathlib.Path,
) -> None:
    """A rolling upgrade of a one-file dataset: several producers read one file (the UNIT
    rows name file and video, so the previous release needs no change to serve its part)."""
    spec = dataclasses.replace(SMALL, files=1, videos_per_file=24)
    one_file = make_sample_dataset(tmp_path, spec)
    port = free_port()
    codes = [previous_release, REPO]
    fleet += [start_producer(port, tmp_path, f"mixed{i}", c) for i, c in enumerate(codes)]
    await_hellos(port, len(fleet))  # both join the epoch from its start
    seen, _, workers = run_epochs(port, one_file)
    assert seen == collections.Counter({(e, s): 1 for e in range(2) for s in range(24)})
    clips = {int(str(w["protocol"])): int(str(w["clips"])) for w in workers}
    assert sorted(clips) == [PREVIOUS_PROTOCOL, PROTOCOL_VERSION], workers
    assert all(made > 0 for made in clips.values()), clips  # both read the one file
