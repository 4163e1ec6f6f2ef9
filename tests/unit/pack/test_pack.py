"""Tests of ``h5feed pack``: real video files (cv2.VideoWriter), real images, real HDF5 output
read back through ``h5feed.batches``, real subprocesses for the command line and for a hard
kill in the middle of a run."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import cv2
import h5py
import numpy as np
import pytest
from pack_data import read_frames, write_video
from terminal import h5feed_on_a_terminal

import h5feed
from h5feed.common.errors import DataError
from h5feed.pack.command import KILL_AFTER_VIDEOS_ENV, parse_size
from h5feed.pack.manifest import MANIFEST_NAME
from h5feed.pack.run import PackSettings, pack
from h5feed.pack.sources import discover, natural_key
from h5feed.producer.layouts.pack_index import INDEX_GROUP

_CLI_TIMEOUT_S = 90.0
#: class -> [(video file name, frames written)]; mp4v in .mp4, MJPG in .avi (both are written
#: and read back by the opencv-python-headless wheels).
TREE = {
    "walk": [("w_a.mp4", 7), ("w_b.avi", 12)],
    "jump": [("j_a.mp4", 5), ("j_b.mp4", 16), ("j_c.avi", 9)],
    "run": [("r_a.avi", 20)],
}
#: stem -> label: the index of its class among the sorted class names.
LABELS = {
    pathlib.Path(name).stem: sorted(TREE).index(cls)
    for cls, videos in TREE.items()
    for name, _ in videos
}


def expected_videos(counts: dict[str, int]) -> dict[str, tuple[str, int]]:
    return {stem: (str(label), counts[stem]) for stem, label in LABELS.items()}


@pytest.fixture(scope="module")
def video_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, int]]:
    """SRC/<class>/<video> with real videos; returns SRC and {stem: frames OpenCV reads}."""
    root = tmp_path_factory.mktemp("videos")
    counts = {}
    seed = 0
    for cls, videos in TREE.items():
        for name, frames in videos:
            seed += 1
            counts[pathlib.Path(name).stem] = write_video(root / cls / name, frames, seed)
    for stem, written in ((pathlib.Path(n).stem, f) for v in TREE.values() for n, f in v):
        assert counts[stem] == written, "OpenCV reads back another count than was written"
    return root, counts


@pytest.fixture(scope="module")
def payloads(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path_factory: pytest.TempPathFactory
) -> list[tuple[str, int]]:
    """(video, JPEG bytes) of the tree's videos in packing order, from one whole pack."""
    out = tmp_path_factory.mktemp("whole")
    pack(video_tree[0], out, jobs=1)
    with h5py.File(out / "shard-00000.h5", "r") as f:
        names = [name for name in f if name != INDEX_GROUP]
        sizes = {name: sum(len(b) for b in f[name]["frames"][:]) for name in names}
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    return [(v["name"], sizes[v["name"]]) for v in manifest["shards"][0]["videos"]]


def greedy_shards(payloads: list[tuple[str, int]], shard_size: int) -> list[list[str]]:
    """The documented rule: a video joins the current shard unless that shard holds a video
    already and would exceed ``shard_size``."""
    shards: list[list[str]] = []
    used = 0
    for name, size in payloads:
        if not shards or (shards[-1] and used + size > shard_size):
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += size
    return shards


def copy_tree(tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path) -> pathlib.Path:
    """A private copy of the module's tree, for tests that change it (mtimes kept)."""
    return pathlib.Path(shutil.copytree(tree[0], tmp_path / "src"))


def h5feed_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "h5feed", "pack", *args],
        capture_output=True,
        text=True,
        timeout=_CLI_TIMEOUT_S,
        env={**os.environ, **(env or {})},
    )


def shard_contents(out: pathlib.Path) -> dict[str, dict[str, tuple[int, list[bytes]]]]:
    """{shard file: {group: (label, frame bytes)}}, everything the shards hold."""
    contents = {}
    for path in sorted(out.glob("*.h5")):
        with h5py.File(path, "r") as f:
            contents[path.name] = {
                name: (int(f[name].attrs["label"]), [bytes(b) for b in f[name]["frames"][:]])
                for name in f
                if name != INDEX_GROUP
            }
    return contents


def stored_classes(path: pathlib.Path) -> list[str]:
    with h5py.File(path, "r") as f:
        return [c.decode() if isinstance(c, bytes) else str(c) for c in f.attrs["classes"]]


def all_videos(out: pathlib.Path) -> dict[str, tuple[str, int]]:
    """{video: (label as text, frame count)}: the videos h5feed.batches yields (each must come
    once per epoch) with their labels, and their frame counts in the shards."""
    feed = h5feed.batches(str(out), clip_len=1, batch_size=4, shuffle=False, workers=1)
    seen: collections.Counter[str] = collections.Counter()
    labels = {}
    for batch in feed:
        for video, label in zip(batch["video"].tolist(), batch["label"].tolist(), strict=True):
            name = video.decode() if isinstance(video, bytes) else str(video)
            seen[name] += 1
            labels[name] = int(label)
    assert set(seen.values()) == {1}, f"a video came more than once per epoch: {seen}"
    frames = {}
    for path in out.glob("*.h5"):
        with h5py.File(path, "r") as f:
            names = [name for name in f if name != INDEX_GROUP]
            frames.update({name: int(f[name]["frames"].shape[0]) for name in names})
    return {name: (str(labels[name]), frames[name]) for name in seen}


# --------------------------------------------------------------------------------------------
# Round trips


def test_class_tree_round_trip_through_batches(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    src, counts = video_tree
    out = tmp_path / "out" / "nested"  # made, parents included
    report = pack(src, out, jobs=2)
    classes = sorted(TREE)
    expected = expected_videos(counts)
    assert all_videos(out) == expected
    assert report.videos == len(expected) and report.frames == sum(counts.values())
    assert [p.name for p in sorted(out.glob("*.h5"))] == ["shard-00000.h5"]
    assert stored_classes(out / "shard-00000.h5") == classes
    # The frames are the source's, in order (JPEG at quality 95: close, not equal): each stored
    # frame is nearest to the source frame of its own index.
    with h5py.File(out / "shard-00000.h5", "r") as f:
        stored = [cv2.imdecode(b, cv2.IMREAD_COLOR) for b in f["j_b"]["frames"][:]]
        assert f["j_b"].attrs["source"] == "jump/j_b.mp4"
    source = read_frames(src / "jump" / "j_b.mp4")
    assert len(stored) == len(source) == counts["j_b"]
    for i, image in enumerate(stored):
        errors = [np.abs(image.astype(int) - s.astype(int)).mean() for s in source]
        assert int(np.argmin(errors)) == i and errors[i] < 10.0, (i, errors)
    assert not (out / ".pack-work").exists()


def test_a_packed_tree_feeds_tensorflow(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    """pack -> h5feed.dataset: one epoch through tf.data, every video once, sorted labels."""
    src, counts = video_tree
    out = tmp_path / "out"
    pack(src, out, jobs=2)
    ds = h5feed.dataset(str(out), clip_len=2, resize=(24, 32), batch_size=4, workers=2)
    seen: collections.Counter[str] = collections.Counter()
    for batch in ds:
        assert batch["frames"].shape[1:] == (2, 24, 32, 3)
        seen.update(v.decode() for v in batch["video"].numpy().tolist())
    assert seen == collections.Counter(expected_videos(counts).keys())


def test_flat_folder_gets_label_minus_one_and_no_classes(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    src = tmp_path / "flat"
    src.mkdir()
    for name in ("w_a.mp4", "w_b.avi"):
        shutil.copy(video_tree[0] / "walk" / name, src / name)
    out = tmp_path / "out"
    pack(src, out, jobs=1)
    counts = video_tree[1]
    assert all_videos(out) == {"w_a": ("-1", counts["w_a"]), "w_b": ("-1", counts["w_b"])}
    assert stored_classes(out / "shard-00000.h5") == []


def _write_image(path: pathlib.Path, value: int) -> bytes:
    image = np.full((24, 32, 3), value, np.uint8)
    ok, data = cv2.imencode(path.suffix, image)
    assert ok
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.tobytes())
    return data.tobytes()


def test_image_folders_keep_jpeg_bytes_in_natural_order(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    # Frames named 1, 2, 10: natural order, not 1, 10, 2. Frame 2 is a PNG (re-encoded).
    jpeg_1 = _write_image(src / "b" / "clip1" / "f1.jpg", 10)
    _write_image(src / "b" / "clip1" / "f2.png", 120)
    jpeg_10 = _write_image(src / "b" / "clip1" / "f10.jpeg", 250)
    jpeg_other = _write_image(src / "a" / "clip2" / "0.jpg", 60)
    out = tmp_path / "out"
    pack(src, out, jobs=1)
    with h5py.File(out / "shard-00000.h5", "r") as f:
        clip1 = [bytes(b) for b in f["clip1"]["frames"][:]]
        assert int(f["clip1"].attrs["label"]) == 1 and int(f["clip2"].attrs["label"]) == 0
        assert [bytes(b) for b in f["clip2"]["frames"][:]] == [jpeg_other]
    assert clip1[0] == jpeg_1 and clip1[2] == jpeg_10  # byte for byte
    png_as_jpeg = cv2.imdecode(np.frombuffer(clip1[1], np.uint8), cv2.IMREAD_COLOR)
    assert clip1[1][:3] == b"\xff\xd8\xff" and abs(int(png_as_jpeg.mean()) - 120) <= 2
    assert all_videos(out) == {"clip1": ("1", 3), "clip2": ("0", 1)}
    assert stored_classes(out / "shard-00000.h5") == ["a", "b"]


def test_natural_key_orders_numbers_by_value() -> None:
    names = ["f10.jpg", "f2.jpg", "f1.jpg", "g.jpg", "f02b.jpg"]
    assert sorted(names, key=natural_key) == ["f1.jpg", "f2.jpg", "f02b.jpg", "f10.jpg", "g.jpg"]


# --------------------------------------------------------------------------------------------
# Sharding


def test_small_shard_size_gives_several_shards_and_never_splits_a_video(
    video_tree: tuple[pathlib.Path, dict[str, int]],
    payloads: list[tuple[str, int]],
    tmp_path: pathlib.Path,
) -> None:
    src, counts = video_tree
    out = tmp_path / "out"
    shard_size = max(size for _, size in payloads) * 3 // 2  # some shards of 1, some of 2
    expected = greedy_shards(payloads, shard_size)
    assert len(expected) >= 3 and max(len(names) for names in expected) >= 2
    pack(src, out, PackSettings(shard_size=shard_size), jobs=2)
    contents = shard_contents(out)
    assert list(contents) == [f"shard-{i:05d}.h5" for i in range(len(expected))]
    assert [list(videos) for videos in contents.values()] == [sorted(n) for n in expected]
    for videos in contents.values():
        payload = sum(len(b) for _, frames in videos.values() for b in frames)
        assert payload <= shard_size
        for name, (_, frames) in videos.items():
            assert len(frames) == counts[name], f"{name} was split or lost frames"
    assert all_videos(out) == expected_videos(counts)


def test_video_larger_than_the_shard_size_gets_a_shard_of_its_own(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    pack(video_tree[0], out, PackSettings(shard_size=1), jobs=1)
    contents = shard_contents(out)
    assert len(contents) == len(video_tree[1])
    assert all(len(videos) == 1 for videos in contents.values())


def test_parse_size_accepts_units() -> None:
    assert parse_size("512M") == 512 << 20
    assert parse_size("2G") == 2 << 30
    assert parse_size("1.5GiB") == 3 << 29
    assert parse_size("100000") == 100_000
    assert parse_size("64kb") == 64 << 10
    for bad in ("", "G", "-1M", "1X", "0"):
        with pytest.raises(Exception, match="size"):
            parse_size(bad)


# --------------------------------------------------------------------------------------------
# Resuming


def test_killed_run_resumes_to_the_same_result_without_rewriting_finished_shards(
    video_tree: tuple[pathlib.Path, dict[str, int]],
    payloads: list[tuple[str, int]],
    tmp_path: pathlib.Path,
) -> None:
    src = video_tree[0]
    shard_size = max(size for _, size in payloads) * 3 // 2
    first_shard = len(greedy_shards(payloads, shard_size)[0])
    options = ["--shard-size", str(shard_size), "--jobs", "2", "--no-progress"]
    reference = tmp_path / "reference"
    done = h5feed_cli(str(src), str(reference), *options)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    # Killed (SIGKILL, by itself) one video into the second shard: shard 0 is finished, shard 1
    # is half-written.
    kill_after = str(first_shard + 1)
    # (h5feed_cli waits for the output pipes to close: pool workers orphaned by the kill and
    # still holding them would make it time out.)
    killed = h5feed_cli(str(src), str(out), *options, env={KILL_AFTER_VIDEOS_ENV: kill_after})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    finished = [s["file"] for s in manifest["shards"]]
    assert finished == ["shard-00000.h5"] and not manifest["complete"]
    assert (out / "shard-00001.h5.tmp").exists(), "the kill should catch a shard half-written"
    mtime = (out / "shard-00000.h5").stat().st_mtime_ns
    resumed = h5feed_cli(str(src), str(out), *options)
    assert resumed.returncode == 0, resumed.stderr
    assert "kept from an earlier run" in resumed.stdout
    assert (out / "shard-00000.h5").stat().st_mtime_ns == mtime, "a finished shard was rewritten"
    assert shard_contents(out) == shard_contents(reference)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in reference.iterdir())
    ref_manifest = json.loads((reference / MANIFEST_NAME).read_text())
    new_manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert [s["videos"] for s in new_manifest["shards"]] == [
        s["videos"] for s in ref_manifest["shards"]
    ]
    assert new_manifest["complete"]


def test_rerun_of_complete_output_writes_no_shard(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    pack(video_tree[0], out, jobs=1)
    mtime = (out / "shard-00000.h5").stat().st_mtime_ns
    report = pack(video_tree[0], out, jobs=1)
    assert report.written_shards == 0 and report.resumed_videos == report.videos == 6
    assert (out / "shard-00000.h5").stat().st_mtime_ns == mtime


def test_changed_packed_video_is_refused_on_resume(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    src = copy_tree(video_tree, tmp_path)
    out = tmp_path / "out"
    pack(src, out, jobs=1)
    write_video(src / "jump" / "j_a.mp4", 6, seed=99)  # a packed video, changed
    with pytest.raises(ValueError, match=r"SRC changed.*jump/j_a\.mp4.*modified.*--restart"):
        pack(src, out, jobs=1)
    report = pack(src, out, jobs=1, restart=True)
    assert report.resumed_videos == 0 and all_videos(out)["j_a"] == ("0", 6)


def test_changed_classes_are_refused_on_resume(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    src = copy_tree(video_tree, tmp_path)
    out = tmp_path / "out"
    pack(src, out, jobs=1)
    write_video(src / "crawl" / "c_a.mp4", 5, seed=98)  # a new class shifts the labels
    with pytest.raises(ValueError, match=r"classes of SRC changed.*labels would shift"):
        pack(src, out, jobs=1)


def test_added_video_is_reported_and_packed_on_rerun(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    src = copy_tree(video_tree, tmp_path)
    out = tmp_path / "out"
    pack(src, out, jobs=1)
    write_video(src / "walk" / "w_c.mp4", 8, seed=97)
    report = pack(src, out, jobs=1)
    assert any("1 video(s) added" in w and "walk/w_c.mp4" in w for w in report.warnings)
    assert report.written_shards == 1 and report.resumed_videos == 6
    assert all_videos(out)["w_c"] == ("2", 8)


def test_changed_settings_are_refused(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    pack(video_tree[0], out, jobs=1)
    with pytest.raises(ValueError, match=r"other settings \(quality 95 then, 80 now\)"):
        pack(video_tree[0], out, PackSettings(quality=80), jobs=1)


def test_out_inside_src_is_refused(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    src = copy_tree(video_tree, tmp_path)
    with pytest.raises(ValueError, match="must not be SRC or lie inside it"):
        pack(src, src / "packed", jobs=1)
    assert not (src / "packed").exists()


def test_out_with_foreign_hdf5_files_is_refused(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.h5").write_bytes(b"not ours")
    with pytest.raises(ValueError, match=r"not written by h5feed pack.*mine\.h5"):
        pack(video_tree[0], out, jobs=1)


# --------------------------------------------------------------------------------------------
# Verification


@pytest.mark.parametrize(
    ("damage", "message"),
    [("truncate", r"bytes, the manifest says .* \(truncated"), ("flip", "SHA-256 differs")],
)
def test_verify_only_detects_a_damaged_shard(
    video_tree: tuple[pathlib.Path, dict[str, int]],
    tmp_path: pathlib.Path,
    damage: str,
    message: str,
) -> None:
    out = tmp_path / "out"
    pack(video_tree[0], out, PackSettings(shard_size=1), jobs=1)  # one shard per video
    ok = h5feed_cli("--verify-only", str(out))
    assert ok.returncode == 0 and "verified; complete" in ok.stdout, ok.stderr
    shard = out / "shard-00001.h5"
    data = bytearray(shard.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    bad = h5feed_cli("--verify-only", str(out))
    assert bad.returncode == 1
    assert "shard-00001.h5" in bad.stderr and "shard-00000.h5" not in bad.stderr
    assert re.search(message, bad.stderr), bad.stderr


def test_verify_checks_frame_counts_inside_the_file(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    """A shard whose HDF5 content disagrees with the manifest (size and hash made to match)
    is caught by the per-video checks."""
    from h5feed.pack.verify import verify_out

    out = tmp_path / "out"
    pack(video_tree[0], out, jobs=1)
    manifest_path = out / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["shards"][0]["videos"][0]["frames"] += 1
    manifest_path.write_text(json.dumps(manifest))
    _, problems = verify_out(str(out), jobs=1)
    name = manifest["shards"][0]["videos"][0]["name"]
    assert problems == [
        f"{out / 'shard-00000.h5'}, video {name!r}: "
        f"{video_tree[1][name]} frames, the manifest says {video_tree[1][name] + 1}",
        f"{out / 'shard-00000.h5'}: the pack index differs from the manifest",
    ]


def test_verify_only_without_manifest_is_an_error(tmp_path: pathlib.Path) -> None:
    result = h5feed_cli("--verify-only", str(tmp_path))
    assert result.returncode == 1 and "has no h5feed-pack.json" in result.stderr


# --------------------------------------------------------------------------------------------
# Bad sources


def test_broken_video_is_an_error_naming_the_file(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    src = copy_tree(video_tree, tmp_path)
    (src / "run" / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 but not a video" * 10)
    result = h5feed_cli(str(src), str(tmp_path / "out"), "--jobs", "2")
    assert result.returncode == 1
    assert "cannot pack this video" in result.stderr
    assert str(src / "run" / "broken.mp4") in result.stderr
    assert not list((tmp_path / "out").glob("*.tmp")), "an unfinished shard was left behind"


def test_skip_broken_packs_the_others_and_reports_it(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    src = copy_tree(video_tree, tmp_path)
    (src / "run" / "broken.mp4").write_bytes(b"garbage" * 100)
    out = tmp_path / "out"
    report = pack(src, out, jobs=2, skip_broken=True)
    assert [s["source"] for s in report.skipped] == ["run/broken.mp4"]
    assert set(all_videos(out)) == set(video_tree[1])


def test_truncated_video_keeps_what_opencv_reads_and_warns(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    path = src / "cls" / "cut.avi"
    assert write_video(path, 20, seed=5) == 20
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 6 // 10])  # a cut-off download
    readable = len(read_frames(path))
    assert 0 < readable < 20
    report = pack(src, tmp_path / "out", jobs=1)
    assert all_videos(tmp_path / "out") == {"cut": ("0", readable)}
    assert report.warnings == [
        f"{str(path)!r}: OpenCV read {readable} frames, the container claims 20 (all read are kept)"
    ]


def test_empty_class_folder_keeps_its_label_index(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    src = tmp_path / "src"
    shutil.copytree(video_tree[0] / "walk", src / "walk")
    (src / "bike").mkdir()  # sorts first: label 0, no video
    out = tmp_path / "out"
    pack(src, out, jobs=1)
    assert stored_classes(out / "shard-00000.h5") == ["bike", "walk"]
    assert {label for label, _ in all_videos(out).values()} == {"1"}


def test_video_without_readable_frames_is_an_error(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    (src / "cls" / "empty_clip").mkdir(parents=True)
    (src / "cls" / "empty_clip" / "notes.txt").write_text("no image here")
    _write_image(src / "cls" / "ok_clip" / "0.jpg", 1)
    with pytest.raises(DataError, match=r"no frame: the folder holds no image.*empty_clip"):
        pack(src, tmp_path / "out", jobs=1)


def test_undecodable_image_is_an_error_naming_the_frame(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "src"
    _write_image(src / "clip" / "0.jpg", 1)
    (src / "clip" / "1.jpg").write_bytes(b"\xff\xd8\xff truncated")
    with pytest.raises(DataError, match=r"frame 1 \('clip/1\.jpg'\) is not an image"):
        pack(src, tmp_path / "out", jobs=1)


def test_same_name_in_two_classes_is_an_error_unless_prefixed(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    src = copy_tree(video_tree, tmp_path)
    shutil.copy(src / "walk" / "w_a.mp4", src / "jump" / "w_a.mp4")
    with pytest.raises(ValueError, match=r"both be group 'w_a'.*jump/w_a\.mp4.*walk/w_a\.mp4"):
        discover(src)
    out = tmp_path / "out"
    pack(src, out, PackSettings(prefix_class=True), jobs=1)
    assert {"jump_w_a", "walk_w_a", "run_r_a"} <= set(all_videos(out))


def test_classes_mixed_with_loose_videos_are_refused(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    src = copy_tree(video_tree, tmp_path)
    shutil.copy(src / "walk" / "w_a.mp4", src / "loose.mp4")
    with pytest.raises(ValueError, match="mixes class folders"):
        discover(src)


def test_other_files_are_ignored_with_a_warning(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    src = copy_tree(video_tree, tmp_path)
    (src / "walk" / "README.txt").write_text("notes")
    (src / "walk" / ".DS_Store").write_text("hidden: ignored silently")
    report = pack(src, tmp_path / "out", jobs=1)
    assert report.warnings == [
        "1 file(s) in SRC are neither videos nor images and were ignored: 'walk/README.txt'"
    ]


# --------------------------------------------------------------------------------------------
# Command line


def test_help_lists_the_options() -> None:
    result = h5feed_cli("--help")
    assert result.returncode == 0, result.stderr
    for text in ("SRC", "OUT", "--shard-size", "--jobs", "--quality", "--verify-only",
                 "--no-progress", "--restart", "--skip-broken", "--prefix-class", "Guarantees:",
                 ".mkv", "examples:"):  # fmt: skip
        assert text in result.stdout, text


def test_cli_packs_and_prints_a_summary(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    result = h5feed_cli(str(video_tree[0]), str(tmp_path / "out"), "--shard-size", "1M")
    assert result.returncode == 0, result.stderr
    frames = sum(video_tree[1].values())
    assert f"packed 6 videos, {frames} frames into 1 shards" in result.stdout
    assert result.stderr == "", "no progress bar off a terminal, no warning"


def test_progress_bar_shows_on_a_terminal_unless_turned_off(
    video_tree: tuple[pathlib.Path, dict[str, int]], tmp_path: pathlib.Path
) -> None:
    pack = ("pack", str(video_tree[0]))
    status, _, shown = h5feed_on_a_terminal(*pack, str(tmp_path / "a"), timeout_s=_CLI_TIMEOUT_S)
    assert status == 0 and "packing" in shown and "verifying" in shown and "6/6" in shown
    status, _, shown = h5feed_on_a_terminal(
        *pack, str(tmp_path / "b"), "--no-progress", timeout_s=_CLI_TIMEOUT_S
    )
    assert status == 0 and shown == ""
