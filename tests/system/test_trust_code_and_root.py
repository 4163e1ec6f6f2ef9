"""Trust boundaries of a producer's worker: code by name only when allowed, files only under
the data root.

A real worker process (``python -m h5feed.producer.worker``, as ``h5feed produce`` starts
it:
``--allow-code``, ``--data-root``) is driven from a ROUTER socket playing a rogue consumer.
User code is a package made in a temporary directory whose module ``evil`` writes a marker
file when imported, so "nothing was imported" is checked from outside the worker. Targets
that must stay unopened are FIFOs: a worker that opened one would block, and the test would
get no answer within its timeout.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest
import zmq
from rogue_workers import ALLOWED, EXIT_TIMEOUT_S, RECEIVE_TIMEOUT_MS, REPO, Rogue, Setup

from h5feed.common.config import ClipSpec
from h5feed.common.protocol import messages
from h5feed.common.protocol.messages import FileRef
from h5feed.consumer.options import LayoutArgs
from h5feed.producer.service.server import service_worker
from h5feed.producer.worker.code_policy import CodePolicy, CodeRefused, split_patterns
from h5feed.producer.worker.lifetime import drop_working_directory


def source(job: str, path: str, args: Mapping[str, Any] | None = None) -> messages.Source:
    return messages.Source(job, path, dict(args or {}), (), 0, 1, 0, 0, None)


def hdf5_job(job: str, paths: list[str], spec: ClipSpec | None = None) -> messages.Job:
    spec = spec or ClipSpec(clip_len=2, resize=(24, 32))
    refs = tuple(FileRef(i, path) for i, path in enumerate(paths))
    return messages.Job(job, refs, spec.to_wire(), LayoutArgs().resolve().to_wire(), None)


def assert_refused_code(error: messages.Error, path: str) -> None:
    assert error.type == "CodeRefused", error
    assert repr(path) in error.message and ALLOWED in error.message, error.message


# -- code by name ---------------------------------------------------------------------------


def test_a_rogue_consumer_cannot_run_code_it_names(rogue: Rogue, setup: Setup) -> None:
    touched = setup.base / "rce"
    rce = source("rce", "subprocess:run", {"args": ["sh", "-c", f"id > {touched}"]})
    assert_refused_code(rogue.error(rce), "subprocess:run")
    # a module outside the patterns: not imported at all (it would write the marker)
    assert_refused_code(rogue.error(source("evil", "trustpkg.evil:run")), "trustpkg.evil:run")
    transform = ClipSpec(clip_len=2, resize=(24, 32), transform="trustpkg.evil:run")
    error = rogue.error(hdf5_job("evil-t", ["inside.h5"], transform))
    assert_refused_code(error, "trustpkg.evil:run")
    assert error.unit is None
    assert not touched.exists() and not setup.marker.exists()


def test_dotted_private_and_reexported_names_are_refused(rogue: Rogue, setup: Setup) -> None:
    dotted = "trustpkg.data:os.system"  # matches the pattern, walks out of the module
    assert_refused_code(rogue.error(source("dot", dotted, {"command": "true"})), dotted)
    private = "trustpkg.data:__loader__"
    assert_refused_code(rogue.error(source("priv", private)), private)
    reexported = "trustpkg.data:reexported"  # defined in trustpkg.helpers
    error = rogue.error(source("re", reexported))
    assert_refused_code(error, reexported)
    assert "'trustpkg.helpers'" in error.message


def test_an_allowed_path_works_end_to_end(rogue: Rogue) -> None:
    rogue.send(source("ok", "trustpkg.data:numbers"))
    info = rogue.receive()
    assert isinstance(info, messages.SourceInfo), info
    assert (info.kind, info.length) == ("map", 10)
    rogue.send(messages.Source("ok", "trustpkg.data:numbers", {}, (), 0, 1, 0, 0, info.spec))
    rogue.send(messages.Items("ok", 1, 0, 0, (7, 2)))
    data = rogue.receive()
    assert isinstance(data, messages.Data), data
    assert data.samples == (7, 2)
    assert [a.tolist() for a in data.arrays.values()] == [[7, 2]]


def test_the_policy_object() -> None:
    policy = CodePolicy(("mypkg.*",))
    policy.check("mypkg.data:load")
    for path in ("mypkg.data:os.system", "mypkg.data:_private", "other:load", "mypkg.data"):
        with pytest.raises(CodeRefused, match="mypkg"):
            policy.check(path)
    with pytest.raises(CodeRefused, match="defined in module 'posix'"):
        policy.check_loaded("mypkg.data:system", os.system)
    with pytest.raises(ValueError):
        CodePolicy(("",))
    # A '*' matches private modules and __main__ at any level: they are refused all the same.
    wide = CodePolicy(("mypkg.*:*", "*"))
    wide.check("mypkg.data:load")
    for path, part in [
        ("mypkg.__main__:main", "__main__"),
        ("__main__:main", "__main__"),
        ("mypkg._private:load", "_private"),
        ("mypkg.sub._impl.deep:load", "_impl"),
        ("_hidden.mod:load", "_hidden"),
    ]:
        with pytest.raises(CodeRefused, match=f"module part '{part}' starts with '_'"):
            wide.check(path)
    with pytest.raises(CodeRefused, match="not a dotted module name"):
        wide.check("mypkg..data:load")
    # H5FEED_ALLOW_CODE: never split at the ':' of a pattern (that would allow '*')
    assert split_patterns("mypkg.data:*, other:fn,") == ["mypkg.data:*", "other:fn"]
    allowing = service_worker("ipc:///x", "w", data_root="/data", allow_code=["a:*", "b:f"])
    command = allowing.command()
    assert command[-4:] == ["--allow-code", "a:*", "--allow-code", "b:f"]
    assert "--allow-code" not in service_worker("ipc:///x", "w", data_root="/data").command()


# -- the data root --------------------------------------------------------------------------


def test_paths_outside_the_root_are_refused_unopened(rogue: Rogue, setup: Setup) -> None:
    secret = setup.outside / "secret.h5"
    names = ["../outside/secret.h5", str(secret), "link.h5", "sub/../../outside/secret.h5"]
    rogue.send(hdf5_job("paths", [*names, "inside.h5"]))
    answers = [rogue.receive() for _ in range(len(names) + 1)]
    errors = {a.file: a for a in answers if isinstance(a, messages.Error)}
    assert sorted(errors) == sorted(names), answers
    assert all(e.type == "PathRefused" and "data-root" in e.message for e in errors.values())
    assert "absolute" in errors[str(secret)].message and "'..'" in errors[names[0]].message
    assert "symbolic link" in errors["link.h5"].message
    index = [a for a in answers if isinstance(a, messages.IndexBatch)]
    assert len(index) == 1 and index[0].files == (len(names),)  # the file inside is indexed
    # an existing file and a missing one outside are refused alike: nothing about existence
    rogue.send(hdf5_job("exists", ["../outside/real.h5", "../outside/missing.h5"]))
    first, second = rogue.receive(), rogue.receive()
    assert isinstance(first, messages.Error) and isinstance(second, messages.Error)
    assert first.message.replace("real", "X") == second.message.replace("missing", "X")


def test_links_and_virtual_datasets_out_of_the_root_are_refused(rogue: Rogue, setup: Setup) -> None:
    files = ["elink.h5", "elink_rel.h5", "vds.h5"]
    rogue.send(hdf5_job("links", files))
    answers = [rogue.receive() for _ in files]
    assert all(isinstance(a, messages.Error) for a in answers), answers
    errors = {a.file: a for a in answers if isinstance(a, messages.Error)}
    assert all(e.type == "PathRefused" for e in errors.values()), errors
    elink = errors[str(setup.root / "elink.h5")].message
    assert "external link '/video_000'" in elink or "external link 'video_000'" in elink
    assert "outside the data root" in errors[str(setup.root / "elink_rel.h5")].message
    vds = errors[str(setup.root / "vds.h5")].message
    assert "virtual dataset '/images'" in vds and "outside the data root" in vds


# -- the working directory ------------------------------------------------------------------


def test_a_producers_workers_never_import_from_their_working_directory(
    tmp_path: pathlib.Path,
) -> None:
    """``h5feed produce`` run from a directory holding a module the consumer may name
    (``--allow-code 'planted:*'``) and a package shadowing an installed one (numpy): the
    worker imports neither (each writes a marker when imported)."""
    planted = tmp_path / "cwd"
    (planted / "numpy").mkdir(parents=True)
    marker = tmp_path / "planted-imported"
    write_marker = f"import pathlib\npathlib.Path({str(marker)!r}).write_text(__name__)\n"
    (planted / "planted.py").write_text(write_marker + "def make(**kwargs):\n    return [1]\n")
    (planted / "numpy" / "__init__.py").write_text(write_marker + "raise ImportError('planted')\n")
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    address = f"ipc://{tmp_path}/produce.sock"
    router.bind(address)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # -P: the service itself too, as the `h5feed` console script would (its sys.path[0] is
    # its bin directory); `python -m h5feed` imports h5feed's dependencies before it can act.
    service = subprocess.Popen(
        [sys.executable, "-P", "-m", "h5feed", "produce", "--connect", address,
         "--workers", "1", "--allow-code", "planted:*"],
        stdin=subprocess.DEVNULL, env=env, cwd=planted,
    )  # fmt: skip
    try:
        rogue = Rogue(router, subprocess.Popen(["true"]))
        assert router.poll(RECEIVE_TIMEOUT_MS, zmq.POLLIN), "no HELLO: the worker died"
        rogue.identity = router.recv_multipart()[0]
        error = rogue.error(source("planted", "planted:make"))
        assert error.type == "SourceError" and "cannot import module 'planted'" in error.message
        assert not marker.exists(), marker.read_text()
    finally:
        service.terminate()
        service.wait(timeout=EXIT_TIMEOUT_S + 5)
        router.close(linger=0)
        context.term()


def test_drop_working_directory_removes_only_what_python_m_put_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.chdir(tmp_path)
    for first in ("", str(tmp_path)):
        monkeypatch.setattr(sys, "path", [first, "/site", str(tmp_path)])
        assert drop_working_directory() is True
        assert sys.path == ["/site", str(tmp_path)]  # one given on PYTHONPATH stays
        assert drop_working_directory() is False
    assert service_worker("ipc:///x", "w").command()[1:3] == ["-P", "-m"]
