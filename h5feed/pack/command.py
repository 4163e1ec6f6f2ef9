"""The ``h5feed pack`` subcommand: its options, and the handler that runs it.

Importing this module is cheap (no OpenCV, NumPy or h5py): :mod:`h5feed.cli` imports it to
build its parser.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from h5feed.common.cli_args import int_in

__all__ = ["DESCRIPTION", "EPILOG", "add_arguments", "parse_size", "run_command"]

#: Test hook: ``h5feed pack`` kills itself (SIGKILL) after adding this many videos to shards.
KILL_AFTER_VIDEOS_ENV = "H5FEED_PACK_TEST_KILL_AFTER_VIDEOS"

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)

DESCRIPTION = """\
Pack video files or folders of images into HDF5 files in h5feed's default layout
(OUT/shard-00000.h5, ...), ready for h5feed.dataset("OUT") or h5feed.batches("OUT").

SRC shapes (hidden files ignored; other files skipped with a warning):
  SRC/<class>/<video>.mp4            classes of videos: label = index of the class in
  SRC/<class>/<video>/<frame>.jpg    sorted order; classes of image folders (one folder =
                                     one video, frames in natural order: 2.jpg before 10.jpg)
  SRC/<video>.mp4, SRC/<video>/...   no classes: every label is -1
Video files: .mp4 .m4v .avi .mkv .mov .webm .mpg .mpeg .wmv .flv (what OpenCV reads);
images: .jpg .jpeg .png .bmp .tif .tiff .webp.

Each video becomes a top-level group named after its file without extension (or folder),
holding a 'frames' dataset of JPEG bytes and a 'label' attribute; each file has a 'classes'
attribute (the class names in label order). Video frames and non-JPEG images are encoded as
JPEG at --quality; JPEG images are stored byte for byte.

Guarantees: every frame OpenCV reads from a video is kept, in order; a video is never split
across shards; a broken video (cannot be opened, no readable frame) stops the run with an
error naming it, unless --skip-broken; two videos with the same group name are an error
before any work. Interrupted runs resume: re-run the same command, finished shards are kept
(not rewritten) and the result is the same as an uninterrupted run; a changed SRC is
reported, and refused when it touches videos already packed. Every shard is verified at the
end (size and SHA-256 against OUT/h5feed-pack.json, frame counts, labels, one frame decoded
per video); --verify-only OUT repeats that check."""

EPILOG = """\
examples:
  h5feed pack ~/ucf101 /data/ucf101-h5
  h5feed pack ./videos ./out --shard-size 512M --jobs 8 --quality 90
  h5feed pack --verify-only /data/ucf101-h5
  h5feed pack ./videos ./out --upload s3://bucket/ucf101-h5"""


def parse_size(text: str) -> int:
    """Bytes from ``512M``, ``2G``, ``1.5GiB``, ``100000`` (K/M/G/T are powers of 1024)."""
    match = _SIZE.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 2G, 1000000)")
    value = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if value < 1:
        raise argparse.ArgumentTypeError(f"size must be at least 1 byte: {text!r}")
    return value


_quality = int_in(1, 100)
_jobs = int_in(1)


def add_arguments(parser: Any) -> None:
    """The options of ``h5feed pack`` on ``parser`` (an ``argparse.ArgumentParser``)."""
    parser.add_argument("src", metavar="SRC", nargs="?", help="the source tree (see above)")
    parser.add_argument("out", metavar="OUT", help="output directory (made if missing)")
    parser.add_argument(
        "--shard-size", type=parse_size, default="1G", metavar="SIZE",
        help="JPEG bytes per shard file, e.g. 512M, 2G (default: 1G); a video larger than "
        "this gets a shard of its own",
    )  # fmt: skip
    parser.add_argument(
        "--quality", type=_quality, default=95, metavar="Q",
        help="JPEG quality of re-encoded frames, 1..100 (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=_jobs, default=None, metavar="N",
        help="processes that decode and encode (default: the CPUs this process may use)",
    )  # fmt: skip
    parser.add_argument(
        "--prefix-class", action="store_true",
        help="name groups <class>_<video> (when the same video name occurs in two classes)",
    )  # fmt: skip
    parser.add_argument(
        "--skip-broken", action="store_true",
        help="skip (and report) videos that cannot be read instead of stopping",
    )  # fmt: skip
    parser.add_argument(
        "--restart", action="store_true",
        help="discard what an earlier run left in OUT (its shards and manifest) and start anew",
    )  # fmt: skip
    parser.add_argument(
        "--verify-only", action="store_true",
        help="only verify OUT against its manifest (give OUT alone)",
    )  # fmt: skip
    parser.add_argument(
        "--upload", metavar="URL", default=None,
        help="then copy OUT's shards and manifest under URL (s3://bucket/prefix; "
        "h5feed[storage], credentials from the environment)",
    )  # fmt: skip
    parser.add_argument(
        "--no-progress", action="store_true",
        help="no progress bar (there is none anyway when stderr is not a terminal)",
    )  # fmt: skip


def _progress(args: argparse.Namespace) -> Any:
    from h5feed.pack.progress import NoProgress, RichProgress

    if args.no_progress or not sys.stderr.isatty():
        return NoProgress()
    return RichProgress()


def run_command(args: argparse.Namespace) -> int:
    """Run ``h5feed pack`` with parsed ``args``; print a summary to stdout."""
    from h5feed.common.errors import DataError
    from h5feed.producer.service.cpus import available_cpus

    jobs = args.jobs if args.jobs is not None else available_cpus()
    if args.verify_only:
        from h5feed.pack.verify import verify_out

        out = args.out if args.src is None else None
        if out is None:
            raise ValueError("--verify-only takes OUT alone: h5feed pack --verify-only OUT")
        manifest, problems = verify_out(out, jobs)
        if problems:
            raise DataError(
                f"verification of {out!r} failed ({len(problems)} problem(s)):\n  "
                + "\n  ".join(problems[:20])
            )
        videos = sum(len(s["videos"]) for s in manifest["shards"])
        state = "complete" if manifest.get("complete") else "INCOMPLETE (re-run h5feed pack)"
        print(f"{out}: {len(manifest['shards'])} shards, {videos} videos verified; {state}")
        return 0 if manifest.get("complete") else 1
    if args.src is None:
        raise ValueError("give SRC and OUT: h5feed pack SRC OUT")
    from h5feed.pack.run import PackSettings, pack

    settings = PackSettings(args.quality, args.shard_size, args.prefix_class)
    kill_after = os.environ.get(KILL_AFTER_VIDEOS_ENV)
    report = pack(
        args.src,
        args.out,
        settings,
        jobs=jobs,
        skip_broken=args.skip_broken,
        restart=args.restart,
        progress=_progress(args),
        kill_after_videos=int(kill_after) if kill_after else None,
    )
    resumed = f", {report.resumed_videos} kept from an earlier run" if report.resumed_videos else ""
    skipped = f", {len(report.skipped)} skipped (broken)" if report.skipped else ""
    print(
        f"packed {report.videos} videos, {report.frames} frames into {report.shards} shards "
        f"in {report.out} ({report.bytes / 1e6:.1f} MB; {report.written_shards} written"
        f"{resumed}{skipped}), verified, {report.elapsed_s:.1f}s"
    )
    if args.upload is not None:
        from h5feed.pack.upload import upload

        written = upload(report.out, args.upload)
        print(f"uploaded {len(written)} files under {args.upload}")
    return 0
