"""A small, realistic sample dataset in h5feed's default HDF5 layout, made in seconds.

Layout (``group_per_video``), the one h5feed reads by default:

* one HDF5 file holds many videos; the file attribute ``h5feed_layout`` is
  ``"group_per_video"``;
* each video is a top-level group ``video_000``, ``video_001``, ... (numbering restarts in
  every file) holding a dataset ``frames_key`` of dtype ``h5py.vlen_dtype(np.uint8)`` and shape
  ``(n_frames,)``, whose elements are the bytes of one JPEG each (BGR in, so ``cv2.imdecode``
  gives BGR back), and an integer attribute ``label_key``.

Content: moving, natural-looking scenes. Each video is a camera panning at constant sub-pixel
velocity over a large multi-octave colour texture (terrain, clouds, sand or moss, coloured
through a palette and shaded), with one or two blurred coloured ellipses moving, rotating and
bouncing off the frame edges. The label ``c`` in ``[0, num_classes)`` is learnable from a
single frame and from motion alike: the ellipses have hue ``c / num_classes`` of the colour
wheel, and the camera pans in direction ``2 * pi * c / num_classes`` (give or take a little).
Labels are balanced within a file (each class ``videos_per_file // num_classes`` or one more
times), in a shuffled order.

Everything is deterministic: the same :class:`SampleSpec` and file index give the same frames,
byte for byte (with the same OpenCV build). File ``i`` depends only on the spec and ``i``, so
files can be made in any order or in parallel.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import math
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping, Sequence

import cv2
import h5py
import numpy as np
from numpy.typing import NDArray

__all__ = [
    "LAYOUT",
    "LAYOUT_ATTR",
    "SampleSpec",
    "make_sample_dataset",
    "sample_file_name",
    "video_group_name",
    "write_sample_file",
    "write_video_file",
]

LAYOUT_ATTR = "h5feed_layout"
"""Name of the file attribute that names the layout."""
LAYOUT = "group_per_video"
"""Value of :data:`LAYOUT_ATTR` in the files written here."""

_MAX_INDEX = 1000  # names are zero-padded to 3 digits, so they sort like their numbers

# Palettes: (position in [0, 1] of the height field, RGB colour). Converted to BGR on use.
_PALETTES: tuple[tuple[tuple[float, tuple[int, int, int]], ...], ...] = (
    (  # terrain seen from above
        (0.00, (18, 42, 96)),
        (0.30, (40, 100, 160)),
        (0.36, (194, 178, 128)),
        (0.42, (92, 140, 62)),
        (0.65, (40, 90, 40)),
        (0.80, (112, 100, 88)),
        (0.92, (236, 236, 240)),
        (1.00, (250, 250, 252)),
    ),
    (  # clouds in a blue sky
        (0.00, (64, 120, 196)),
        (0.45, (104, 156, 218)),
        (0.62, (196, 212, 234)),
        (1.00, (250, 250, 252)),
    ),
    (  # desert sand
        (0.00, (118, 78, 40)),
        (0.50, (190, 140, 82)),
        (0.80, (222, 192, 142)),
        (1.00, (242, 226, 192)),
    ),
    (  # moss and bark
        (0.00, (34, 28, 20)),
        (0.35, (70, 60, 38)),
        (0.55, (84, 110, 46)),
        (0.80, (140, 168, 80)),
        (1.00, (200, 210, 150)),
    ),
)


@dataclasses.dataclass(frozen=True, slots=True)
class SampleSpec:
    """What :func:`make_sample_dataset` makes. Validated on construction (``ValueError``).

    ``files`` files of ``videos_per_file`` videos each; each video has a frame count drawn
    uniformly from ``[min_frames, max_frames]`` (both inclusive) of ``height`` x ``width``
    frames, JPEG-encoded at ``quality``. Labels are in ``[0, num_classes)``.
    """

    files: int = 4
    videos_per_file: int = 24
    min_frames: int = 24
    max_frames: int = 72
    height: int = 240
    width: int = 320
    num_classes: int = 4
    quality: int = 90
    seed: int = 0
    frames_key: str = "frames"
    label_key: str = "label"

    def __post_init__(self) -> None:
        def check_int(name: str, low: int, high: int | None = None) -> None:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an int, got {value!r}")
            if value < low or (high is not None and value > high):
                upper = "" if high is None else f" and <= {high}"
                raise ValueError(f"{name} must be >= {low}{upper}, got {value!r}")

        check_int("files", 1, _MAX_INDEX)
        check_int("videos_per_file", 1, _MAX_INDEX)
        check_int("min_frames", 1)
        check_int("max_frames", 1)
        if self.max_frames < self.min_frames:
            raise ValueError(
                f"max_frames ({self.max_frames}) must be >= min_frames ({self.min_frames})"
            )
        check_int("height", 16, 8192)
        check_int("width", 16, 8192)
        check_int("num_classes", 1, 1000)
        check_int("quality", 1, 100)
        check_int("seed", 0)
        for name in ("frames_key", "label_key"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or "/" in value or value == ".":
                raise ValueError(f"{name} must be a non-empty name without '/', got {value!r}")


def sample_file_name(file_index: int) -> str:
    """Name of sample file ``file_index``: ``sample_000.h5``, ``sample_001.h5``, ..."""
    return f"sample_{file_index:03d}.h5"


def video_group_name(video_index: int) -> str:
    """Name of the group of video ``video_index`` in its file: ``video_000``, ..."""
    return f"video_{video_index:03d}"


# --------------------------------------------------------------------------------------------
# Writing the layout


def _atomic_write(
    path: str | os.PathLike[str],
    videos: Iterable[tuple[str, Sequence[NDArray[np.uint8]], int | None]],
    frames_key: str,
    label_key: str,
) -> None:
    """Write ``videos`` (group name, encoded frames, label or None) to ``path`` atomically.

    The file is written as ``path + ".tmp"``, flushed to disk, then renamed over ``path``: a
    file under its final name is always complete. On error the temporary file is removed.
    """
    final = os.fspath(path)
    tmp = final + ".tmp"
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs[LAYOUT_ATTR] = LAYOUT
            vlen = h5py.vlen_dtype(np.uint8)
            for name, frames, label in videos:
                group = f.create_group(name)
                # An object array of 1-D uint8 arrays; built element by element so that frames
                # of equal length are not stacked into a 2-D array.
                elements = np.empty(len(frames), dtype=object)
                for i, frame in enumerate(frames):
                    elements[i] = frame
                group.create_dataset(frames_key, shape=(len(frames),), dtype=vlen, data=elements)
                if label is not None:
                    group.attrs[label_key] = np.int64(label)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_video_file(
    path: str | os.PathLike[str],
    videos: Mapping[str, tuple[Sequence[bytes], int | None]],
    frames_key: str = "frames",
    label_key: str = "label",
) -> None:
    """Write the given JPEG byte strings and labels to ``path`` in the default layout.

    ``videos`` maps group name to (frames, label); each frame is stored as given (it need not
    be a valid JPEG, which is what tests of corrupt data want); a label of ``None`` leaves the
    attribute out. Groups are written in the mapping's order. Written atomically, like
    :func:`write_sample_file`.
    """
    _atomic_write(
        path,
        (
            (name, [np.frombuffer(bytes(b), dtype=np.uint8) for b in frames], label)
            for name, (frames, label) in videos.items()
        ),
        frames_key,
        label_key,
    )


# --------------------------------------------------------------------------------------------
# Making the pictures


def _noise_field(
    rng: np.random.Generator, height: int, width: int, channels: int, scale: float
) -> NDArray[np.float32]:
    """Fractal (multi-octave) smooth noise of shape (height, width, channels), per-channel
    standardised to mean 0 and standard deviation 1. ``scale`` is the size of the coarsest
    features in pixels; each finer octave halves it and has ``persistence`` times the weight.
    """
    persistence = float(rng.uniform(0.45, 0.6))
    acc = np.zeros((height, width, channels), dtype=np.float32)
    amplitude = 1.0
    feature = scale
    while feature >= 3.0:
        cells_y = max(2, math.ceil(height / feature) + 1)
        cells_x = max(2, math.ceil(width / feature) + 1)
        small = rng.standard_normal((cells_y, cells_x, channels), dtype=np.float32)
        up = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
        acc += np.float32(amplitude) * np.asarray(up, dtype=np.float32).reshape(acc.shape)
        amplitude *= persistence
        feature /= 2.0
    acc -= acc.mean(axis=(0, 1), keepdims=True)
    acc /= acc.std(axis=(0, 1), keepdims=True) + np.float32(1e-6)
    return acc


def _palette_lut(rng: np.random.Generator) -> NDArray[np.uint8]:
    """A (256, 3) BGR lookup table from one of the palettes, its colours slightly jittered."""
    anchors = _PALETTES[int(rng.integers(len(_PALETTES)))]
    positions = np.array([p for p, _ in anchors], dtype=np.float64)
    inner = positions[1:-1] + rng.uniform(-0.03, 0.03, size=len(positions) - 2)
    positions[1:-1] = np.clip(inner, 0.01, 0.99)
    positions.sort()
    colours = np.array([c[::-1] for _, c in anchors], dtype=np.float64)  # RGB -> BGR
    colours *= rng.uniform(0.88, 1.12, size=3)  # a per-video white balance
    grid = np.linspace(0.0, 1.0, 256)
    lut = np.stack([np.interp(grid, positions, colours[:, k]) for k in range(3)], axis=1)
    return np.clip(np.rint(lut), 0, 255).astype(np.uint8)


def _texture(rng: np.random.Generator, height: int, width: int, size: int) -> NDArray[np.uint8]:
    """A natural-looking BGR texture of shape (height, width, 3); ``size`` is the frame's
    smaller side, which sets the feature scale."""
    fields = _noise_field(rng, height, width, 2, scale=size * float(rng.uniform(0.6, 1.2)))
    contrast = np.float32(rng.uniform(0.15, 0.22))
    level = np.clip(fields[..., 0] * contrast + np.float32(0.5), 0.0, 1.0)
    index = (level * np.float32(255.0) + np.float32(0.5)).astype(np.uint8)
    colour = _palette_lut(rng)[index].astype(np.float32)
    shade = np.float32(1.0) + np.float32(rng.uniform(0.08, 0.16)) * fields[..., 1]
    colour *= shade[..., None]
    texture: NDArray[np.uint8] = np.clip(colour + np.float32(0.5), 0, 255).astype(np.uint8)
    return texture


def _triangle(x: float, low: float, high: float) -> float:
    """``x`` folded into ``[low, high]`` by reflection: a position bouncing between walls."""
    span = high - low
    if span <= 0:
        return low
    m = (x - low) % (2.0 * span)
    return low + (m if m <= span else 2.0 * span - m)


@dataclasses.dataclass(frozen=True, slots=True)
class _Blob:
    """A blurred, filled ellipse moving at constant velocity and bouncing off the edges."""

    x0: float
    y0: float
    vx: float
    vy: float
    axis_a: float
    axis_b: float
    angle0: float
    spin: float
    sigma: float
    opacity: float
    colour: tuple[float, float, float]

    def draw(self, frame: NDArray[np.uint8], t: int) -> None:
        """Blend the blob at time ``t`` into ``frame`` (H, W, 3) in place."""
        height, width = frame.shape[:2]
        cx = _triangle(self.x0 + self.vx * t, 0.0, width - 1.0)
        cy = _triangle(self.y0 + self.vy * t, 0.0, height - 1.0)
        reach = max(self.axis_a, self.axis_b) + 3.0 * self.sigma + 2.0
        x0 = max(0, int(cx - reach))
        y0 = max(0, int(cy - reach))
        x1 = min(width, int(cx + reach) + 2)
        y1 = min(height, int(cy + reach) + 2)
        if x1 <= x0 or y1 <= y0:
            return
        mask = np.zeros((y1 - y0, x1 - x0), dtype=np.uint8)
        one = 16  # 4 fractional bits
        cv2.ellipse(
            mask,
            (round((cx - x0) * one), round((cy - y0) * one)),
            (round(self.axis_a * one), round(self.axis_b * one)),
            self.angle0 + self.spin * t,
            0.0,
            360.0,
            255,
            -1,
            cv2.LINE_AA,
            4,
        )
        blurred = cv2.GaussianBlur(mask, (0, 0), self.sigma)
        alpha = np.asarray(blurred, dtype=np.float32) * np.float32(self.opacity / 255.0)
        roi = frame[y0:y1, x0:x1].astype(np.float32)
        colour = np.array(self.colour, dtype=np.float32)
        roi += (colour - roi) * alpha[..., None]
        frame[y0:y1, x0:x1] = (roi + np.float32(0.5)).astype(np.uint8)


def _class_colour(rng: np.random.Generator, label: int, num_classes: int) -> tuple[int, int, int]:
    """A saturated BGR colour whose hue is ``label / num_classes`` of the wheel (jittered by at
    most 15% of the gap between classes)."""
    hue = (label + rng.uniform(-0.15, 0.15)) / num_classes  # fraction of the wheel
    hsv = np.array(
        [[[round(hue * 180.0) % 180, int(rng.integers(200, 256)), int(rng.integers(210, 256))]]],
        dtype=np.uint8,
    )
    b, g, r = (int(v) for v in np.asarray(cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)).reshape(3))
    return b, g, r


def _video_frames(
    rng: np.random.Generator, spec: SampleSpec, label: int, n_frames: int
) -> list[NDArray[np.uint8]]:
    """The JPEG-encoded frames of one video of class ``label``."""
    height, width = spec.height, spec.width
    size = min(height, width)
    px = size / 240.0  # motion and shapes scale with the frame

    # Camera: pans in the class's direction at a constant sub-pixel speed.
    direction = 2.0 * math.pi * (label + rng.uniform(-0.12, 0.12)) / spec.num_classes
    speed = float(rng.uniform(1.5, 3.5)) * px
    vx, vy = speed * math.cos(direction), speed * math.sin(direction)
    travel_x, travel_y = abs(vx) * (n_frames - 1), abs(vy) * (n_frames - 1)
    tex_w = width + math.ceil(travel_x) + 6
    tex_h = height + math.ceil(travel_y) + 6
    texture = _texture(rng, tex_h, tex_w, size)
    # getRectSubPix centres: the window stays 2 px inside the texture along the whole path.
    start_x = 2.0 + (width - 1) / 2.0 + (travel_x if vx < 0 else 0.0)
    start_y = 2.0 + (height - 1) / 2.0 + (travel_y if vy < 0 else 0.0)

    colour = _class_colour(rng, label, spec.num_classes)
    blobs = []
    for _ in range(int(rng.integers(1, 3))):
        axis_a = float(rng.uniform(0.05, 0.14)) * size
        angle = float(rng.uniform(0.0, 2.0 * math.pi))
        blob_speed = float(rng.uniform(1.0, 4.0)) * px
        shade = float(rng.uniform(0.8, 1.0))
        blobs.append(
            _Blob(
                x0=float(rng.uniform(0.0, width - 1.0)),
                y0=float(rng.uniform(0.0, height - 1.0)),
                vx=blob_speed * math.cos(angle),
                vy=blob_speed * math.sin(angle),
                axis_a=max(2.0, axis_a),
                axis_b=max(2.0, axis_a * float(rng.uniform(0.45, 1.0))),
                angle0=float(rng.uniform(0.0, 180.0)),
                spin=float(rng.uniform(-3.0, 3.0)),
                sigma=max(0.8, float(rng.uniform(1.5, 4.0)) * px),
                opacity=float(rng.uniform(0.85, 1.0)),
                colour=(colour[0] * shade, colour[1] * shade, colour[2] * shade),
            )
        )

    params = [cv2.IMWRITE_JPEG_QUALITY, spec.quality]
    encoded: list[NDArray[np.uint8]] = []
    for t in range(n_frames):
        centre = (start_x + vx * t, start_y + vy * t)
        frame = np.array(cv2.getRectSubPix(texture, (width, height), centre), dtype=np.uint8)
        for blob in blobs:
            blob.draw(frame, t)
        ok, buffer = cv2.imencode(".jpg", frame, params)
        if not ok:
            raise RuntimeError("cv2.imencode failed to encode a JPEG frame")
        encoded.append(np.asarray(buffer, dtype=np.uint8).reshape(-1))
    return encoded


def _file_labels(spec: SampleSpec, file_index: int) -> NDArray[np.int64]:
    """Balanced labels of the videos of file ``file_index``, in a shuffled order."""
    rng = np.random.default_rng([spec.seed, file_index])
    offset = int(rng.integers(spec.num_classes))
    labels = (np.arange(spec.videos_per_file, dtype=np.int64) + offset) % spec.num_classes
    rng.shuffle(labels)
    return labels


def _sample_videos(
    spec: SampleSpec, file_index: int
) -> Iterable[tuple[str, list[NDArray[np.uint8]], int]]:
    """The videos of sample file ``file_index``, made one at a time."""
    labels = _file_labels(spec, file_index)
    for v in range(spec.videos_per_file):
        rng = np.random.default_rng([spec.seed, file_index, v])
        n_frames = int(rng.integers(spec.min_frames, spec.max_frames + 1))
        label = int(labels[v])
        yield video_group_name(v), _video_frames(rng, spec, label, n_frames), label


def write_sample_file(path: str | os.PathLike[str], spec: SampleSpec, file_index: int) -> None:
    """Write sample file ``file_index`` of ``spec`` to ``path``, atomically.

    The file holds ``spec.videos_per_file`` videos ``video_000``, ... in the default layout
    (see the module docstring). Its content depends only on ``spec`` (not on ``spec.files``)
    and ``file_index``. It is written as ``path + ".tmp"`` and renamed to ``path`` when
    complete, so ``path`` either does not exist or is a complete file; a stale ``.tmp`` from an
    interrupted run is overwritten.
    """
    if not isinstance(file_index, int) or isinstance(file_index, bool) or file_index < 0:
        raise ValueError(f"file_index must be an int >= 0, got {file_index!r}")
    _atomic_write(path, _sample_videos(spec, file_index), spec.frames_key, spec.label_key)


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def make_sample_dataset(
    directory: str | os.PathLike[str],
    spec: SampleSpec = SampleSpec(),  # frozen, so sharing it is safe
    progress: Callable[[int, int], None] | None = None,
    *,
    processes: int | None = None,
) -> list[pathlib.Path]:
    """Make the sample dataset ``spec`` in ``directory`` and return its files, sorted.

    Creates ``directory`` (and parents) if needed, then writes ``sample_000.h5``, ...,
    one per ``spec.files``, with :func:`write_sample_file`. A file that already exists under its
    final name is complete (writing is atomic) and is kept as it is, not checked against
    ``spec``. ``progress(done, total)`` is called once per file, kept or written, in the
    calling process, with ``done`` counting up to ``total == spec.files``.

    Files are written in parallel by ``processes`` threads (no child process, so safe to call
    from any program); by default one per available CPU, at most one per missing file. With
    ``processes=1``, or a single missing file, everything runs in the calling thread.
    """
    if processes is not None and (not isinstance(processes, int) or processes < 1):
        raise ValueError(f"processes must be an int >= 1 or None, got {processes!r}")
    root = pathlib.Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    paths = [root / sample_file_name(i) for i in range(spec.files)]
    total = len(paths)
    todo = [i for i, p in enumerate(paths) if not p.exists()]
    done = 0
    for _ in range(total - len(todo)):
        done += 1
        if progress is not None:
            progress(done, total)

    workers = min(len(todo), processes if processes is not None else _available_cpus())
    if workers <= 1:
        for i in todo:
            write_sample_file(paths[i], spec, i)
            done += 1
            if progress is not None:
                progress(done, total)
    else:
        # Threads, not processes: OpenCV and NumPy release the GIL for the heavy work, and a
        # process pool would re-import the caller's __main__ (a script without a main guard).
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(write_sample_file, paths[i], spec, i) for i in todo]
            for future in concurrent.futures.as_completed(futures):
                future.result()
                done += 1
                if progress is not None:
                    progress(done, total)
    return sorted(paths)
