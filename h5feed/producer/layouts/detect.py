"""``layout="auto"``: recognise a file's layout, or say what it holds and how to describe it."""

from __future__ import annotations

import itertools

import h5py
import numpy as np

from h5feed.common.errors import DataError
from h5feed.common.layouts import Auto, Flat, FrameDatasets, Groups, LayoutSpec, Raw
from h5feed.producer.files.link_walk import member_names
from h5feed.producer.layouts import pack_index

#: How many top-level entries the no-match message lists before "... and N more".
_LISTED_ENTRIES = 20
#: Members of a group probed to recognise the frame-datasets layout.
_PROBED_MEMBERS = 4


def detect(h5: h5py.File, path: str, auto: Auto) -> LayoutSpec:
    """The layout of ``h5``, tried in this order with the default names:

    1. flat: a 1-D ``jpeg`` dataset and a ``video_offsets`` dataset;
    2. raw: an ``images`` uint8 dataset of 3 or 4 dimensions;
    3. groups: a top-level group holding a dataset ``auto.frames``;
    4. frame_datasets: a top-level group whose first members are 1-D uint8 datasets.

    Raises DataError naming the file, listing what it holds and how to describe it.
    """
    flat, raw = Flat(), Raw()
    jpeg = h5.get(flat.jpeg)
    if isinstance(jpeg, h5py.Dataset) and jpeg.ndim == 1 and flat.offsets in h5:
        return flat
    images = h5.get(raw.images)
    if isinstance(images, h5py.Dataset) and images.dtype == np.uint8 and images.ndim in (3, 4):
        return raw
    if pack_index.present(h5):  # written by `h5feed pack`: groups, no walk needed
        return Groups(frames=auto.frames, label=auto.label)
    names = member_names(h5, path, "top-level entries")
    groups = [h5[name] for name in names if isinstance(h5[name], h5py.Group)]
    for group in groups:
        if isinstance(group.get(auto.frames), h5py.Dataset):
            return Groups(frames=auto.frames, label=auto.label)
    for group in groups:
        members = list(itertools.islice(group.values(), _PROBED_MEMBERS))
        if members and all(_is_encoded_frame(m) for m in members):
            return FrameDatasets(label=auto.label)
    raise DataError(no_match_message(h5, auto), file=path)


def _is_encoded_frame(obj: object) -> bool:
    return isinstance(obj, h5py.Dataset) and obj.ndim == 1 and obj.dtype == np.uint8


def describe_entry(obj: object) -> str:
    """One line about a top-level entry: a dataset's dtype and shape, a group's members."""
    if isinstance(obj, h5py.Dataset):
        vlen = h5py.check_vlen_dtype(obj.dtype)
        dtype = f"vlen {vlen}" if vlen is not None else str(obj.dtype)
        return f"dataset {dtype} {obj.shape}"
    if isinstance(obj, h5py.Group):
        names = list(itertools.islice(obj.keys(), 3))
        first = f", e.g. {names[0]!r}: {describe_entry(obj[names[0]])}" if names else ""
        return f"group of {len(obj)} members{first}"
    return type(obj).__name__


def no_match_message(h5: h5py.File, auto: Auto) -> str:
    """What the file holds (top-level names, truncated) and which layout parameters to pass."""
    names = sorted(h5.keys())
    lines = [f"  /{n}: {describe_entry(h5[n])}" for n in names[:_LISTED_ENTRIES]]
    if len(names) > _LISTED_ENTRIES:
        lines.append(f"  ... and {len(names) - _LISTED_ENTRIES} more")
    if not names:
        lines.append("  (nothing: the file is empty)")
    suggested = suggest(h5)
    return "\n".join(
        [
            "no known video layout recognised (layout='auto'). The file holds:",
            *lines,
            *(["What fits it (layout=...):", *suggested] if suggested else []),
            "Describe it with layout= (names are parameters; see docs/data/layouts.md):",
            f"  groups:         one group per video with a vlen-uint8 {auto.frames!r} dataset "
            f"and a {auto.label!r} attribute -> frames_key=..., label_key=... "
            "or h5feed.layouts.Groups(frames=..., label=...)",
            "  frame_datasets: one group per video, one 1-D uint8 JPEG dataset per frame -> "
            "h5feed.layouts.FrameDatasets(label=...)",
            "  raw:            pixels uint8 [N, H, W, C] + labels [N] (+ video offsets) -> "
            "h5feed.layouts.Raw(images=..., labels=..., offsets=...)",
            "  flat:           all JPEGs in one vlen-uint8 dataset + video offsets [V+1] + "
            "labels [V] -> h5feed.layouts.Flat(jpeg=..., offsets=..., labels=...)",
            "  video:          one video per file, a root dataset of JPEGs (vlen uint8) or "
            "pixels [T, H, W, C] -> h5feed.layouts.Video(frames=..., label='directory' or an "
            "attribute, classes=...)",
            "  blobs:          opaque zero-padded JPEG blobs [V, T] (|V<n>) + labels [V] -> "
            "h5feed.layouts.Blobs(frames=..., labels=..., lengths=...)",
            "  float pixels:   Raw(...) or Video(...) with scale= (pixel = value x scale; never "
            "guessed) and channels='rgb' or 'bgr'",
        ]
    )


#: Top-level names looked at for a suggestion (an error path: bounded, whatever the file).
_SUGGESTION_ENTRIES = 64


def _root_datasets(h5: h5py.File) -> dict[str, h5py.Dataset]:
    """The file's first top-level datasets by name (sorted, at most
    :data:`_SUGGESTION_ENTRIES` names looked at; nothing is read)."""
    names = sorted(h5.keys())[:_SUGGESTION_ENTRIES]
    found = {n: h5.get(n) for n in names}
    return {n: d for n, d in found.items() if isinstance(d, h5py.Dataset)}


def _integer_vector(dataset: h5py.Dataset, length: int) -> bool:
    return dataset.ndim == 1 and dataset.shape[0] == length and dataset.dtype.kind in "iu"


def suggest(h5: h5py.File) -> list[str]:
    """The layouts (as Python) that would read the file's top-level datasets, each with why:
    found from names, shapes and dtypes only (nothing is read). Float pixels get ``scale``
    written as a choice the user makes, never a value picked for them."""
    datasets = _root_datasets(h5)
    found: list[str] = []
    for name, data in datasets.items():
        vlen = h5py.check_vlen_dtype(data.dtype)
        others = {n: d for n, d in datasets.items() if n != name}
        if vlen == np.uint8 and data.ndim == 1:
            n_frames = int(data.shape[0])
            offsets = [n for n, d in others.items() if d.ndim == 1 and d.dtype.kind in "iu"
                       and d.shape[0] >= 2]  # fmt: skip
            for offset in offsets:
                labels = [n for n, d in others.items()
                          if _integer_vector(d, int(others[offset].shape[0]) - 1)]  # fmt: skip
                found.append(
                    f"  h5feed.layouts.Flat(jpeg={name!r}, offsets={offset!r}, "
                    f"labels={labels[0] if labels else None!r})  # if {offset!r} cuts "
                    f"{n_frames} frames into videos"
                )
            found.append(
                f"  h5feed.layouts.Video(frames={name!r})  # one video of {n_frames} frames "
                "per file, labelled by its directory (<root>/<class>/<id>.hdf5; or label=<an "
                "attribute> / None)"
            )
        elif data.dtype.kind == "V" and data.dtype.fields is None and data.ndim == 2:
            videos = int(data.shape[0])
            labels = [n for n, d in others.items() if _integer_vector(d, videos)]
            lengths = "'lengths'" if "lengths" in others else "None"
            found.append(
                f"  h5feed.layouts.Blobs(frames={name!r}, labels="
                f"{labels[0] if labels else None!r}, lengths={lengths})  # {videos} videos of "
                f"up to {int(data.shape[1])} zero-padded encoded frames"
            )
        elif (
            data.dtype.kind in "uf"
            and data.ndim in (3, 4)
            and (data.ndim == 3 or data.shape[3] in (1, 3))
        ):
            if data.dtype.kind == "u" and data.dtype != np.uint8:
                continue
            scale = ", scale=255.0" if data.dtype.kind == "f" else ""
            why = (
                "  # scale: 255.0 if the values are in [0, 1], 1.0 if in [0, 255]; "
                "channels='bgr' if stored BGR"
                if scale
                else "  # channels='bgr' if stored BGR"
            )
            rows = int(data.shape[0])
            labels = [n for n, d in others.items() if _integer_vector(d, rows)]
            found.append(
                f"  h5feed.layouts.Raw(images={name!r}, labels="
                f"{labels[0] if labels else None!r}, offsets=None{scale}){why} (each of the "
                f"{rows} images is a one-frame video)"
            )
            found.append(
                f"  h5feed.layouts.Video(frames={name!r}{scale})  # if the file is one video "
                f"of {rows} frames"
            )
    return found
