"""Writing small real HDF5 files in each layout h5feed reads, and what each frame should be.

Each video is a list of RGB frames (distinct random pixels) and a label. ``expected_frames``
gives what h5feed must output for a video's frames without resize/crop/flip: the JPEG decoded
by OpenCV and swapped to RGB (encoded layouts), or the stored pixels (raw).
"""

from __future__ import annotations

import pathlib

import cv2
import h5py
import numpy as np

Video = tuple[list[np.ndarray], int]  # (RGB frames [H, W, 3] uint8, label)

HEIGHT, WIDTH = 24, 32


def make_videos(seed: int, count: int, min_frames: int = 3, max_frames: int = 12) -> list[Video]:
    """``count`` videos of random RGB frames; labels 0..4."""
    rng = np.random.default_rng(seed)
    videos = []
    for v in range(count):
        n = int(rng.integers(min_frames, max_frames + 1))
        frames = [rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8) for _ in range(n)]
        videos.append((frames, v % 5))
    return videos


def jpeg(rgb: np.ndarray) -> np.ndarray:
    """JPEG bytes of an RGB frame, as a uint8 array."""
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    return np.asarray(data, np.uint8).reshape(-1)


def decoded(data: np.ndarray) -> np.ndarray:
    """What h5feed outputs for stored JPEG bytes: cv2.imdecode, BGR -> RGB."""
    image = cv2.imdecode(np.asarray(data, np.uint8), cv2.IMREAD_COLOR)
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def write_groups(path: pathlib.Path, videos: list[Video]) -> dict[str, Video]:
    """The default layout; returns the videos by name with frames as h5feed decodes them."""
    out = {}
    with h5py.File(path, "w") as f:
        for v, (frames, label) in enumerate(videos):
            name = f"video_{v:03d}"
            g = f.create_group(name)
            data = [jpeg(x) for x in frames]
            d = g.create_dataset("frames", (len(data),), dtype=h5py.vlen_dtype(np.uint8))
            for i, x in enumerate(data):
                d[i] = x
            g.attrs["label"] = label
            out[name] = ([decoded(x) for x in data], label)
    return out


def frame_name(i: int) -> str:
    """Unpadded, so a plain string sort would put frame_10 before frame_2."""
    return f"frame_{i}"


def write_frame_datasets(
    path: pathlib.Path, videos: list[Video], label: str = "label"
) -> dict[str, Video]:
    """One group per video, one 1-D uint8 dataset per frame, written in a shuffled order."""
    out = {}
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        for v, (frames, lab) in enumerate(videos):
            name = f"clip{v}"
            g = f.create_group(name)
            data = [jpeg(x) for x in frames]
            for i in rng.permutation(len(data)).tolist():
                g.create_dataset(frame_name(i), data=data[i])
            g.attrs[label] = lab
            out[name] = ([decoded(x) for x in data], lab)
    return out


def write_flat(
    path: pathlib.Path,
    videos: list[Video],
    jpeg_key: str = "jpeg",
    offsets_key: str = "video_offsets",
    labels_key: str = "labels",
) -> dict[str, Video]:
    """All frames in one vlen dataset, cut by offsets; videos named 000000, 000001, ..."""
    out = {}
    data = [jpeg(x) for frames, _ in videos for x in frames]
    offsets = np.cumsum([0] + [len(frames) for frames, _ in videos]).astype(np.int64)
    with h5py.File(path, "w") as f:
        d = f.create_dataset(jpeg_key, (len(data),), dtype=h5py.vlen_dtype(np.uint8))
        for i, x in enumerate(data):
            d[i] = x
        f.create_dataset(offsets_key, data=offsets)
        f.create_dataset(labels_key, data=np.array([lab for _, lab in videos], np.int64))
    for v, (_frames, lab) in enumerate(videos):
        out[f"{v:06d}"] = ([decoded(x) for x in data[offsets[v] : offsets[v + 1]]], lab)
    return out


def write_raw(
    path: pathlib.Path,
    videos: list[Video],
    with_offsets: bool,
    images_key: str = "images",
    labels_key: str = "labels",
    grayscale: bool = False,
) -> dict[str, Video]:
    """Pixels [N, H, W, C]; with offsets, videos as given, else each frame its own video."""
    frames = [x for fs, _ in videos for x in fs]
    if grayscale:
        frames = [x[:, :, :1] for x in frames]
    if with_offsets:
        offsets = np.cumsum([0] + [len(fs) for fs, _ in videos]).astype(np.int64)
        labels = [lab for _, lab in videos]
    else:
        offsets = np.arange(len(frames) + 1, dtype=np.int64)
        labels = [lab for fs, lab in videos for _ in fs]
    with h5py.File(path, "w") as f:
        f.create_dataset(images_key, data=np.stack(frames))
        f.create_dataset(labels_key, data=np.array(labels, np.int32))
        if with_offsets:
            f.create_dataset("video_offsets", data=offsets)
    out = {}
    for v in range(len(offsets) - 1):
        own = frames[offsets[v] : offsets[v + 1]]
        if grayscale:
            own = [np.repeat(x, 3, axis=2) for x in own]
        out[f"{v:06d}"] = (own, labels[v])
    return out


# -- the forms public loaders write ------------------------------------------------------------


def write_video_files(
    root: pathlib.Path, videos: list[Video], classes: list[str], pixels: bool = False
) -> dict[tuple[str, str], Video]:
    """One file per video, ``<root>/<class>/v_<class>_g01_c<i>.hdf5`` with the root dataset
    ``video``, as 3D-ResNets-PyTorch's ``util_scripts/generate_video_hdf5.py`` writes it
    (vlen uint8, one JPEG per element; read by its ``VideoLoaderHDF5`` as ``f["video"][i]``),
    or uint8 pixels [T, H, W, 3] (``pixels``). A video's label picks its class directory;
    returns (path, video name) -> (frames as h5feed gives them, class index)."""
    out = {}
    for v, (frames, label) in enumerate(videos):
        name = f"v_{classes[label]}_g01_c{v:02d}"
        path = root / classes[label] / f"{name}.hdf5"
        path.parent.mkdir(parents=True, exist_ok=True)
        with h5py.File(path, "w") as f:
            if pixels:
                f.create_dataset("video", data=np.stack(frames))
                out[(str(path), name)] = (list(frames), label)
                continue
            data = [jpeg(x) for x in frames]
            dtype = h5py.special_dtype(vlen=np.dtype("uint8"))
            video = f.create_dataset("video", (len(data),), dtype=dtype)
            for i, x in enumerate(data):
                video[i] = np.frombuffer(x.tobytes(), dtype="uint8")
        out[(str(path), name)] = ([decoded(x) for x in data], label)
    return out


def write_blobs(
    path: pathlib.Path, videos: list[Video], frames_per_row: int, lengths: bool = False
) -> dict[str, Video]:
    """Videos as fixed-length rows of opaque JPEG blobs, as a Keras ``Sequence`` over one
    file stores them: ``frames`` [V, T] of ``|V<n>`` (each JPEG zero-padded to the longest;
    short videos padded with empty blobs), ``labels`` int64 [V], and with ``lengths`` an
    int32 ``lengths`` [V]; read back as ``np.frombuffer(f["frames"][v, t].tobytes(), np.uint8)``."""
    encoded = [[jpeg(x).tobytes() for x in frames[:frames_per_row]] for frames, _ in videos]
    width = max(len(b) for blobs in encoded for b in blobs)
    rows = np.zeros((len(videos), frames_per_row), np.dtype(f"V{width}"))
    for v, blobs in enumerate(encoded):
        for t, blob in enumerate(blobs):
            rows[v, t] = np.void(blob.ljust(width, b"\0"))
    with h5py.File(path, "w") as f:
        f.create_dataset("frames", data=rows)
        f.create_dataset("labels", data=np.array([lab for _, lab in videos], np.int64))
        if lengths:
            f.create_dataset("lengths", data=np.array([len(b) for b in encoded], np.int32))
    return {
        f"{v:06d}": ([decoded(np.frombuffer(b, np.uint8)) for b in blobs], videos[v][1])
        for v, blobs in enumerate(encoded)
    }


def write_float_images(path: pathlib.Path, videos: list[Video]) -> dict[str, Video]:
    """Images as the widely copied ``HDF5DatasetWriter`` stores them: ``images`` float64
    [N, H, W, 3] (``dtype="float"``) of OpenCV images (BGR, values 0..255), ``labels`` int
    [N]; each image is a one-frame video, read with ``Raw(scale=1.0, channels="bgr",
    offsets=None)``."""
    frames = [x for fs, _ in videos for x in fs]
    labels = [lab for fs, lab in videos for _ in fs]
    with h5py.File(path, "w") as f:
        images = f.create_dataset("images", (len(frames), HEIGHT, WIDTH, 3), dtype="float")
        labelled = f.create_dataset("labels", (len(frames),), dtype="int")
        for i, (x, lab) in enumerate(zip(frames, labels, strict=True)):
            images[i] = cv2.cvtColor(x, cv2.COLOR_RGB2BGR).astype("float")
            labelled[i] = lab
    return {f"{i:06d}": ([x], lab) for i, (x, lab) in enumerate(zip(frames, labels, strict=True))}
