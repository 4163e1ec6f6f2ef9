"""Which copy of the user's code a job means (issue 26's module identity): the trainer names
the module's file and digest in its JOB or SOURCE, and a worker running another copy of that
module refuses the job, naming both (``h5feed.common.user_code.code_identity``)."""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
import sys
import uuid

import numpy as np
import pytest
from ports import free_port
from remote_producers import remote_feed

from h5feed.common.errors import FeatureVersionError, ProtocolError, WorkerError
from h5feed.common.protocol import messages
from h5feed.common.user_code.code_identity import MAX_HASHED_BYTES, digest_of, shown
from h5feed.consumer.core.code_identities import identities_of, module_file
from h5feed.producer.sources import SourceJob
from h5feed.producer.worker import loaded_code
from h5feed.producer.worker.code_policy import TRUSTED
from h5feed.producer.worker.loaded_code import CodeVersionRefused

TRANSFORM = (
    "import numpy as np\n\n\ndef scaled(clip, rng):\n    return clip.astype(np.float32) * {}\n"
)
FACTORY = "def items():\n    return [{{'x': float(i) * {}}} for i in range(4)]\n"


def fresh_module(directory: pathlib.Path, text: str) -> tuple[str, pathlib.Path]:
    """A module of a name no other test uses (this process keeps what it imports)."""
    name = f"edited_{uuid.uuid4().hex[:12]}"
    path = directory / f"{name}.py"
    path.write_text(text)
    return name, path


def identity(name: str, path: pathlib.Path) -> messages.CodeIdentity:
    return messages.CodeIdentity(name, hashlib.sha256(path.read_bytes()).digest(), str(path))


# -- the wire --------------------------------------------------------------------------------


def test_a_jobs_identities_reach_a_peer_of_protocol_6_and_are_left_out_for_5() -> None:
    code = (messages.CodeIdentity("aug", b"d" * 32, "/srv/aug.py"),)
    job = messages.Job("j", (), {}, {}, None, code=code)
    assert messages.decode(messages.encode(job, 6)) == job
    assert messages.decode(messages.encode(job, 5)).code == ()  # advisory: sent without
    source = messages.Source("s", "m:f", {}, (), 0, 1, 0, 0, None, code=code)
    assert messages.decode(messages.encode(source, 6)) == source
    assert messages.decode(messages.encode(source, 5)).code == ()
    # A field that is not advisory still refuses the older peer (nothing silently dropped).
    with pytest.raises(FeatureVersionError, match="clip_semantics"):
        messages.encode(messages.Job("j", (), {}, {}, None, clip_semantics=2), 5)


def test_identities_are_bounded_on_the_wire() -> None:
    long_digest = (messages.CodeIdentity("aug", b"d" * (messages.MAX_DIGEST_BYTES + 1), "/a"),)
    with pytest.raises(ProtocolError, match="too long"):
        messages.decode(messages.encode(messages.Job("j", (), {}, {}, None, code=long_digest)))
    many = tuple(
        messages.CodeIdentity(f"m{i}", b"d", "/a") for i in range(messages.MAX_CODE_IDENTITIES + 1)
    )
    with pytest.raises(ProtocolError, match="too long"):
        messages.decode(messages.encode(messages.Job("j", (), {}, {}, None, code=many)))


# -- the trainer's side ----------------------------------------------------------------------


def test_the_trainer_names_the_file_of_each_module_and_its_sha256(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name, path = fresh_module(tmp_path, TRANSFORM.format(1.0))
    assert name not in sys.modules  # found without being imported
    found = identities_of(f"{name}:scaled", None, f"{name}:other")  # one per module
    assert found == (identity(name, path),)
    assert name not in sys.modules
    assert identities_of("no_such_module_anywhere:f") == ()  # only the producers may have it
    assert identities_of("sys:exit") == ()  # built in: no file
    assert module_file("json") == sys.modules["json"].__file__  # imported: where it was found


def test_a_file_too_large_to_hash_has_no_identity(tmp_path: pathlib.Path) -> None:
    big = tmp_path / "big.py"
    with big.open("wb") as file:
        file.truncate(MAX_HASHED_BYTES + 1)
    assert digest_of(str(big)) is None
    assert digest_of(str(tmp_path)) is None  # a directory
    assert digest_of(str(tmp_path / "missing.py")) is None


# -- the worker's side -----------------------------------------------------------------------


def test_a_worker_refuses_a_copy_other_than_the_one_it_loaded_naming_both(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    name, path = fresh_module(tmp_path, FACTORY.format(1.0))
    first = identity(name, path)

    def source(code: tuple[messages.CodeIdentity, ...]) -> messages.Source:
        return messages.Source("s", f"{name}:items", {}, (), 0, 1, 0, 0, None, code=code)

    SourceJob(source((first,)), True, TRUSTED)  # loads the module: the copy this process runs
    path.write_text(FACTORY.format(2.0))  # edited; the worker keeps its first copy
    edited = identity(name, path)
    with pytest.raises(CodeVersionRefused) as refused:
        SourceJob(source((edited,)), True, TRUSTED)
    message = str(refused.value)
    assert f"module {name!r}" in message and message.count(str(path)) == 2
    assert shown(first.digest) in message and shown(edited.digest) in message
    assert "Restart the producer" in message
    SourceJob(source((first,)), True, TRUSTED)  # the copy it runs: taken
    SourceJob(source(()), True, TRUSTED)  # a trainer that found no file (or protocol 5)


def test_a_module_not_loaded_here_is_not_checked() -> None:
    loaded_code.check((messages.CodeIdentity("never_loaded_here", b"d" * 32, "/x.py"),))


# -- end to end: a producer that outlives its trainers ---------------------------------------


@pytest.mark.timeout(180)
def test_a_producer_that_loaded_the_transform_refuses_its_edited_copy_until_restarted(
    tmp_path: pathlib.Path, small_dataset: list[pathlib.Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before module identities, the second trainer got batches of the first copy (scale 1),
    # silently: the worker kept the module Python had imported for the first.
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    monkeypatch.syspath_prepend(str(code_dir))
    name, path = fresh_module(code_dir, TRANSFORM.format(1.0))
    port = free_port()

    def producer() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "h5feed", "produce", "--data-root",
             str(small_dataset[0].parent), "--workers", "1", "--name", "p0",
             "--allow-code", f"{name}:*"],
            env={**os.environ, "H5FEED_CONNECT": f"tcp://127.0.0.1:{port}",
                 "PYTHONPATH": os.pathsep.join([str(code_dir), os.environ.get("PYTHONPATH", "")])},
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def frames() -> dict[tuple[int, int], np.ndarray]:
        feed = remote_feed(
            port, small_dataset[:1], transform=f"{name}:scaled", batch_size=3,
            start_timeout_s=60, unit_timeout_s=60,
        )  # fmt: skip
        out = {}
        for batch in feed:
            for key, clip in zip(batch["sample"].tolist(), batch["frames"], strict=True):
                out[(0, key)] = clip
        return out

    running = producer()
    try:
        first = frames()
        assert first and all(clip.dtype == np.float32 for clip in first.values())
        loaded = hashlib.sha256(path.read_bytes()).hexdigest()
        path.write_text(TRANSFORM.format(2.0))
        edited = hashlib.sha256(path.read_bytes()).hexdigest()
        with pytest.raises(WorkerError, match="CodeVersionRefused") as refused:
            frames()
        message = str(refused.value).split("--- worker traceback ---")[0]
        assert message.count(str(path)) == 2, message
        assert loaded[:12] in message and edited[:12] in message, message
        running.kill()
        running.communicate(timeout=30)
        running = producer()  # a new worker process loads the edited copy
        second = frames()
        assert second.keys() == first.keys()
        assert all(np.array_equal(second[k], first[k] * 2) for k in first)
    finally:
        if running.poll() is None:
            running.kill()
        running.communicate(timeout=30)
