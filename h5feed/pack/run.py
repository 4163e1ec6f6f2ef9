"""``h5feed pack``: a source tree of videos -> sharded HDF5 files in the default layout.

Guarantees of :func:`pack`:

1. Every video of SRC (see :mod:`h5feed.pack.sources`) ends up in exactly one shard, as one
   top-level group, with every frame OpenCV reads from it (``read()`` until it returns False),
   in order; or, with ``skip_broken``, it is listed in the report and the manifest as skipped.
   Without ``skip_broken``, a video that cannot be opened, has no readable frame or an image
   that does not decode stops the run with an error naming the file.
2. Shards fill in plan order: a video goes into the current shard unless the shard already
   holds a video and the JPEG bytes would then exceed ``shard_size``; a video is never split,
   so a video larger than ``shard_size`` gets a shard of its own.
3. Interruption (Ctrl-C, a kill, a crash) loses at most the unfinished shard: finished shards
   are complete files listed in the manifest; a re-run with the same SRC and settings skips
   their videos and gives the same shards as an uninterrupted run, without rewriting the
   finished ones. A re-run refuses (``ValueError``, saying what changed) when settings, the
   classes or an already packed video changed; videos added or removed that were not packed
   yet are reported and packed (or left out) as SRC now is.
4. At the end every shard is verified (:mod:`h5feed.pack.verify`); the manifest is marked
   complete only then. A re-run of a complete OUT verifies it again and writes no shard.
5. OUT is never mixed with other data: an OUT without a manifest that already holds HDF5
   files is refused.

Work is spread over ``jobs`` processes (a ``spawn`` pool: this runs under our own entry point,
so re-importing ``__main__`` is harmless); each writes its video into ``OUT/.pack-work/`` and the
main process copies it into the shard. At most ``2 * jobs`` videos are in flight, which bounds
that folder's size.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import logging
import multiprocessing
import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from typing import Any

from h5feed.common.errors import DataError
from h5feed.pack import manifest as manifest_io
from h5feed.pack.encode import Encoded, EncodeTask, encode_video, init_worker
from h5feed.pack.progress import NoProgress, PackProgress
from h5feed.pack.shards import ShardWriter, page_bytes
from h5feed.pack.sources import Plan, Source, discover
from h5feed.pack.verify import verify_manifest

__all__ = ["DEFAULT_QUALITY", "DEFAULT_SHARD_SIZE", "PackReport", "PackSettings", "pack"]

_log = logging.getLogger("h5feed.pack")

DEFAULT_SHARD_SIZE = 1 << 30  # bytes of JPEG per shard file (1 GiB)
DEFAULT_QUALITY = 95
WORK_DIR = ".pack-work"
_INFLIGHT_PER_JOB = 2
_SHARD_FILE = re.compile(r"^shard-\d{5}\.h5(\.tmp)?$")


@dataclasses.dataclass(frozen=True, slots=True)
class PackSettings:
    """What shapes the output; a resumed run must use the same. Validated (``ValueError``)."""

    quality: int = DEFAULT_QUALITY
    shard_size: int = DEFAULT_SHARD_SIZE
    prefix_class: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.quality <= 100:
            raise ValueError(f"quality must be in 1..100, got {self.quality}")
        if self.shard_size < 1:
            raise ValueError(f"shard size must be >= 1 byte, got {self.shard_size}")


@dataclasses.dataclass(slots=True)
class PackReport:
    """What a run did: counts over the whole OUT, and what this run itself wrote."""

    out: str
    shards: int = 0
    videos: int = 0
    frames: int = 0
    bytes: int = 0
    written_shards: int = 0
    resumed_videos: int = 0
    skipped: list[dict[str, str]] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    elapsed_s: float = 0.0


def _warn(report: PackReport, message: str) -> None:
    _log.warning("%s", message)
    report.warnings.append(message)


def _plan_entries(plan: Plan) -> list[dict[str, Any]]:
    return [
        {"name": s.name, "label": s.label, "source": s.path, "fingerprint": s.fingerprint()}
        for s in plan.sources
    ]


def _reconcile(old: dict[str, Any], plan: Plan, settings: dict[str, Any]) -> list[str]:
    """Check that ``old`` (a manifest) can be resumed with ``plan``; return notes on the
    changes that do not prevent it. Raises ValueError naming what does."""
    fix = "delete OUT, choose another OUT, or pass --restart to pack anew"
    if old["settings"] != settings:
        diff = ", ".join(
            f"{key} {old['settings'].get(key)!r} then, {value!r} now"
            for key, value in settings.items()
            if old["settings"].get(key) != value
        )
        raise ValueError(f"OUT was started with other settings ({diff}); {fix}")
    if list(old["classes"]) != list(plan.classes):
        raise ValueError(
            f"the classes of SRC changed since OUT was started: {old['classes']} then, "
            f"{list(plan.classes)} now (labels would shift); {fix}"
        )
    now = {s.path: s for s in plan.sources}
    before = {e["source"]: e for e in old["plan"]}
    changed = []
    for shard in old["shards"]:
        for video in shard["videos"]:
            source = now.get(video["source"])
            entry = before.get(video["source"])
            if source is None or entry is None:
                changed.append(f"{video['source']!r} (packed, now missing)")
            elif source.fingerprint() != entry["fingerprint"] or source.name != video["name"]:
                changed.append(f"{video['source']!r} (packed, since modified)")
    if changed:
        raise ValueError(
            f"SRC changed since OUT was started: {', '.join(changed[:5])}"
            f"{f' and {len(changed) - 5} more' if len(changed) > 5 else ''}; {fix}"
        )
    added = sorted(set(now) - set(before))
    removed = sorted(set(before) - set(now))
    modified = sorted(
        p for p in set(now) & set(before) if now[p].fingerprint() != before[p]["fingerprint"]
    )
    notes = []
    for what, paths in (("added", added), ("removed", removed), ("modified", modified)):
        if paths:
            shown = ", ".join(repr(p) for p in paths[:5])
            more = f" and {len(paths) - 5} more" if len(paths) > 5 else ""
            notes.append(
                f"SRC changed since OUT was last packed: {len(paths)} video(s) {what} that "
                f"were not packed yet ({shown}{more}); packing SRC as it is now"
            )
    return notes


def _prepare_out(out: str, restart: bool) -> dict[str, Any] | None:
    """Create OUT; clear it for ``restart``; return the manifest to resume (or None)."""
    os.makedirs(out, exist_ok=True)
    old = manifest_io.load(out) if not restart else None
    ours = [n for n in os.listdir(out) if _SHARD_FILE.match(n)]
    if restart:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(out, manifest_io.MANIFEST_NAME))
        for name in ours:
            os.unlink(os.path.join(out, name))
    elif old is None and ours:
        raise ValueError(
            f"{out!r} holds shard files ({sorted(ours)[0]!r}, ...) but no "
            f"{manifest_io.MANIFEST_NAME}: pass --restart to replace them"
        )
    if old is None:
        others = [n for n in os.listdir(out) if n.lower().endswith((".h5", ".hdf5", ".he5"))]
        if others:
            raise ValueError(
                f"{out!r} already holds HDF5 files not written by h5feed pack "
                f"({sorted(others)[0]!r}, ...); choose an empty or new OUT"
            )
        return None
    # Shard files the manifest does not list are unfinished: they are redone.
    listed = {s["file"] for s in old["shards"]}
    for name in ours:
        if name not in listed:
            os.unlink(os.path.join(out, name))
    return old


class _Pool:
    """Runs ``encode_video`` over tasks, ``jobs`` at a time, yielding results in task order."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self._executor: concurrent.futures.ProcessPoolExecutor | None = None
        if jobs > 1:
            self._executor = concurrent.futures.ProcessPoolExecutor(
                jobs,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=init_worker,
                initargs=(os.getpid(),),
            )

    def map(self, tasks: list[EncodeTask]) -> Iterator[Encoded]:
        if self._executor is None:
            yield from (encode_video(t) for t in tasks)
            return
        pending: collections.deque[concurrent.futures.Future[Encoded]] = collections.deque()
        window = self.jobs * _INFLIGHT_PER_JOB
        submitted = 0
        while submitted < len(tasks) or pending:
            while submitted < len(tasks) and len(pending) < window:
                pending.append(self._executor.submit(encode_video, tasks[submitted]))
                submitted += 1
            yield pending.popleft().result()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)


def pack(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    settings: PackSettings = PackSettings(),  # frozen, so sharing it is safe
    *,
    jobs: int = 1,
    skip_broken: bool = False,
    restart: bool = False,
    progress: PackProgress | None = None,
    kill_after_videos: int | None = None,
) -> PackReport:
    """Pack the videos of ``src`` into shards in ``out``; see the module docstring.

    ``kill_after_videos`` is a test hook: the process kills itself (SIGKILL) once that many
    videos were added to shards by this run, to test resumption after a hard interruption.
    Raises DataError for a broken source video (unless ``skip_broken``) or a failed
    verification, ValueError for an unusable SRC or OUT.
    """
    began = time.monotonic()
    shown = progress if progress is not None else NoProgress()
    out_dir = os.fspath(out)
    inside = os.path.commonpath([os.path.realpath(src), os.path.realpath(out_dir)])
    if inside == os.path.realpath(src):
        raise ValueError(f"OUT {out_dir!r} must not be SRC or lie inside it (it would be packed)")
    plan = discover(src, prefix_class=settings.prefix_class)
    report = PackReport(out_dir)
    if plan.ignored:
        _warn(
            report,
            f"{len(plan.ignored)} file(s) in SRC are neither videos nor images and were "
            f"ignored: {', '.join(repr(p) for p in plan.ignored[:5])}"
            f"{' ...' if len(plan.ignored) > 5 else ''}",
        )
    settings_dict = dataclasses.asdict(settings)
    old = _prepare_out(out_dir, restart)
    shards: list[dict[str, Any]] = []
    if old is not None:
        for note in _reconcile(old, plan, settings_dict):
            _warn(report, note)
        shards = list(old["shards"])
    manifest: dict[str, Any] = {
        "source": os.path.abspath(plan.root),
        "settings": settings_dict,
        "classes": list(plan.classes),
        "plan": _plan_entries(plan),
        "shards": shards,
        "skipped": [],
        "complete": False,
    }
    packed = {v["source"] for s in shards for v in s["videos"]}
    todo = [s for s in plan.sources if s.path not in packed]
    report.resumed_videos = len(packed)
    if old is not None and old.get("complete") and not todo:
        _log.info("%s is complete already: verifying it", out_dir)
    manifest_io.save(out_dir, manifest)

    try:
        if todo:
            _write_shards(plan, todo, manifest, out_dir, settings, jobs, skip_broken, shown,
                          report, kill_after_videos)  # fmt: skip
        if not manifest["shards"]:
            raise DataError(f"no video of {plan.root!r} could be packed (all were skipped)")
        shown.start("verifying", sum(len(s["videos"]) for s in manifest["shards"]))
        problems = verify_manifest(out_dir, manifest, jobs, shown.advance)
    finally:
        shown.close()
    if problems:
        raise DataError(
            f"verification of {out_dir!r} failed ({len(problems)} problem(s)):\n  "
            + "\n  ".join(problems[:20])
        )
    manifest["complete"] = True
    manifest_io.save(out_dir, manifest)
    report.shards = len(manifest["shards"])
    report.videos = sum(len(s["videos"]) for s in manifest["shards"])
    report.frames = sum(v["frames"] for s in manifest["shards"] for v in s["videos"])
    report.bytes = sum(s["bytes"] for s in manifest["shards"])
    report.skipped = manifest["skipped"]
    report.elapsed_s = time.monotonic() - began
    return report


def _write_shards(
    plan: Plan,
    todo: list[Source],
    manifest: dict[str, Any],
    out_dir: str,
    settings: PackSettings,
    jobs: int,
    skip_broken: bool,
    shown: PackProgress,
    report: PackReport,
    kill_after_videos: int | None,
) -> None:
    """Encode ``todo`` in a pool and fill shards with it, in order (guarantees 1-3)."""
    work = os.path.join(out_dir, WORK_DIR)
    shutil.rmtree(work, ignore_errors=True)  # leftovers of an interrupted run
    os.makedirs(work)
    tasks = [
        EncodeTask(
            index=i,
            name=s.name,
            label=s.label,
            source=s.path,
            root=plan.root,
            is_images=s.is_images,
            frames=s.frames,
            quality=settings.quality,
            out_path=os.path.join(work, f"{i:08d}.h5"),
        )
        for i, s in enumerate(todo)
    ]
    shards: list[dict[str, Any]] = manifest["shards"]
    shown.start("packing", len(plan.sources), done=len(plan.sources) - len(todo))
    pool = _Pool(min(jobs, len(tasks)))
    writer: ShardWriter | None = None
    added = 0
    try:
        for result in pool.map(tasks):
            task = tasks[result.index]
            if result.error is not None:
                path = os.path.join(plan.root, task.source)
                if not skip_broken:
                    raise DataError(f"cannot pack this video: {result.error}", file=path)
                _warn(report, f"skipped {path!r}: {result.error}")
                manifest["skipped"].append({"source": task.source, "reason": result.error})
                shown.advance()
                continue
            if result.header_frames > 0 and result.frames < result.header_frames:
                _warn(
                    report,
                    f"{os.path.join(plan.root, task.source)!r}: OpenCV read {result.frames} "
                    f"frames, the container claims {result.header_frames} (all read are kept)",
                )
            full = (
                writer is not None
                and writer.videos
                and (writer.payload_bytes + result.payload_bytes > settings.shard_size)
            )
            if writer is not None and full:
                shards.append(writer.finish())
                report.written_shards += 1
                writer = None
                manifest_io.save(out_dir, manifest)
            if writer is None:
                page = page_bytes(settings.shard_size)
                writer = ShardWriter(out_dir, len(shards), plan.classes, page)
            entry = {"name": task.name, "frames": result.frames, "label": task.label,
                     "source": task.source}  # fmt: skip
            writer.add(task.out_path, entry, result.payload_bytes)
            os.unlink(task.out_path)
            shown.advance(frames=result.frames)
            added += 1
            if kill_after_videos is not None and added >= kill_after_videos:
                os.kill(os.getpid(), signal.SIGKILL)
        if writer is not None and writer.videos:
            shards.append(writer.finish())
            report.written_shards += 1
            writer = None
        manifest_io.save(out_dir, manifest)
    finally:
        if writer is not None:
            writer.discard()
        pool.close()
        shutil.rmtree(work, ignore_errors=True)
