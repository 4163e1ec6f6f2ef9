"""Shared fixtures: small real HDF5 datasets, an isolated index cache, process helpers; and
every test's tier (tests/support/tiers.py), the in-process tier under its guard
(tests/support/tier_guard.py)."""

from __future__ import annotations

import contextlib
import os
import pathlib
import time
from collections.abc import Iterator
from typing import NamedTuple

import pytest
import tiers
from docker_helpers import built_image, docker_engine, readable_copy
from tier_guard import Refusals, guarded

from h5feed.common.trust.curve import write_key_pair
from h5feed.producer.sample_data import SampleSpec, make_sample_dataset

# urllib3 probes for IPv6 with a socket when first imported, and TensorFlow and Keras import
# it: imported here, at collection, so that an in-process test whose TensorFlow import is its
# first (a test file or directory run alone) is not failed by the tier guard for a probe that
# is the library's, not the test's. In a whole run some test module imports TensorFlow at
# collection anyway.
with contextlib.suppress(ImportError):
    import urllib3.util.connection  # noqa: F401

#: Support modules whose fixtures every test may take by name (as if defined here).
pytest_plugins = ["remote_producers", "rogue_workers", "s3_server", "swarm_helpers"]

#: Small but realistic: 4 files x 6 videos of 6..20 JPEG frames, 96x128 pixels.
SMALL = SampleSpec(
    files=4, videos_per_file=6, min_frames=6, max_frames=20, height=96, width=128, seed=7
)


#: Each collected test's tier and why (tests/support/tiers.py), for the guard's message.
_TIER = pytest.StashKey[tuple[str, str]]()
#: The tier marks of a test marked with two (on itself and its module, say): it fails.
_TWO_TIERS = pytest.StashKey[list[str]]()
#: Set on a test whose report already carries the guard's refusal (said once, not twice).
_GUARD_SAID = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tiers",
        action="store_true",
        help="print each test's tier and why (tests/support/tiers.py)",
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects by these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test with its tier, found from what it uses (tests/support/tiers.py), so that
    ``-m inprocess`` (``make test-fast``) selects it without a mark written by hand."""
    for item in items:
        tier, why = tiers.tier_of(item)
        item.stash[_TIER] = (tier, why)
        if len(marks := {m.name for m in item.iter_markers() if m.name in tiers.TIERS}) > 1:
            item.stash[_TWO_TIERS] = sorted(marks)  # -m would select it in both: fails it
        if item.get_closest_marker(tier) is None:  # `compose` declares `containers`
            item.add_marker(getattr(pytest.mark, tier))
        if config.getoption("--tiers"):
            print(f"{tier:<10} {item.nodeid}  ({why})")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.failed and "tier guard:" in str(report.longrepr):
        item.stash[_GUARD_SAID] = True
    return report


@pytest.fixture(autouse=True)
def tier_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Around each ``inprocess`` test (its function-scoped fixtures included): starting a
    process, making a socket or a ZeroMQ context, or calling Docker fails it, naming the tier
    to mark it (tests/support/tier_guard.py). Other tiers' tests, and collection, are not
    guarded."""
    if marks := request.node.stash.get(_TWO_TIERS, None):
        pytest.fail(f"{request.node.nodeid} is marked with two tiers, {marks}: `-m` would run it in"
                    " both; keep one (tests/support/tiers.py)", pytrace=False)  # fmt: skip
    tier, why = request.node.stash.get(_TIER, ("inprocess", "not collected by this conftest"))
    if tier != "inprocess":
        yield
        return
    refusals = Refusals(request.node.nodeid, why)
    with guarded(refusals):
        yield
    if refusals.refused and not request.node.stash.get(_GUARD_SAID, False):
        # refused in another thread, or caught by the code under test
        pytest.fail(refusals.refused[0], pytrace=False)


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory: pytest.TempPathFactory) -> list[pathlib.Path]:
    return make_sample_dataset(tmp_path_factory.mktemp("small"), SMALL)


def one_file_of_tiny_videos(directory: pathlib.Path, videos: int) -> pathlib.Path:
    """``directory`` with one HDF5 file of ``videos`` videos of 3..5 frames of 24x32 pixels:
    a dataset for tests about counts (shards, steps), not pixels."""
    spec = SampleSpec(
        files=1, videos_per_file=videos, min_frames=3, max_frames=5, height=24, width=32, seed=1
    )
    make_sample_dataset(directory, spec)
    return directory


@pytest.fixture(scope="session")
def docker_env() -> Iterator[dict[str, str]]:
    """A running Docker engine, one per session (tests/support/docker_helpers.py): tests that use it
    are in xdist_group "machine", so they share one pytest worker and run one at a time."""
    yield from docker_engine()


@pytest.fixture(scope="session")
def producer_image(docker_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """docker_env once this tree's producer image is built as docker_helpers.IMAGE: one build
    per session, shared by the container tests, removed at the session's end."""
    yield from built_image(docker_env)


@pytest.fixture(scope="session")
def readable_data(small_dataset: list[pathlib.Path]) -> Iterator[pathlib.Path]:
    """small_dataset where the containers' non-root user (uid 10001) can read it."""
    yield from readable_copy(small_dataset)


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test gets its own index cache, so none depends on another's leftovers."""
    monkeypatch.setenv("H5FEED_CACHE_DIR", str(tmp_path / "index-cache"))
    yield


@pytest.fixture(autouse=True)
def no_object_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with no object remembered as indexed by this process: that memory
    is per process (h5feed/producer/files/remote_files.py, guarantee 2), and two tests' files
    under one URL name (``h5feed-bench://data/shard-00000.h5`` in two temporary roots) would
    be taken for one object replaced, and refused, in whichever ran second."""
    from h5feed.producer.files import remote_files

    monkeypatch.setattr(remote_files, "_INDEXED_ETAGS", {})


@pytest.fixture(autouse=True)
def no_kept_workers_after() -> Iterator[None]:
    """Workers a dataset keeps across iterations stop at the end of each test, so no test
    sees another's: every stream still open is ended first (a tf.data dataset built and never
    iterated holds the stream that learnt a source's length, in TensorFlow's function
    registry, beyond any garbage collection), then every kept pool is closed."""
    yield
    from h5feed.consumer.stream import close_all_streams

    close_all_streams()


def worker_pids(parent_pid: int | None = None) -> list[int]:
    """Pids of running h5feed worker processes (children of ``parent_pid`` if given)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # the process ended while we looked
        if b"h5feed.producer.worker" not in cmdline:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state == "Z":
            continue  # exited, waiting to be reaped
        if parent_pid is None or int(ppid) == parent_pid:
            found.append(int(entry.name))
    return found


def wait_until_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """Wait for processes to end; returns those still alive after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if process_alive(pid)]
        if alive:
            time.sleep(0.05)
    return alive


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def own_worker_pids() -> list[int]:
    return worker_pids(os.getpid())


class CurveKeys(NamedTuple):
    """A trainer's and a producer's CURVE key files, the producer's public key authorized."""

    trainer_public: str
    trainer_secret: str
    producer_public: str
    producer_secret: str
    authorized: pathlib.Path


def trainer_and_producer_keys(directory: pathlib.Path) -> CurveKeys:
    """Key pairs for "trainer" and "producer" under ``directory``/keys, and
    ``directory``/authorized holding the producer's public key (the trainer admits it)."""
    keys, authorized = directory / "keys", directory / "authorized"
    keys.mkdir()
    authorized.mkdir()
    trainer_public, trainer_secret = write_key_pair(str(keys), "trainer")
    producer_public, producer_secret = write_key_pair(str(keys), "producer")
    (authorized / "producer.key").write_bytes(pathlib.Path(producer_public).read_bytes())
    return CurveKeys(trainer_public, trainer_secret, producer_public, producer_secret, authorized)
