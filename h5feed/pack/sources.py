"""Finding the videos of a source tree: what ``h5feed pack SRC`` packs, in which order.

Accepted shapes of ``SRC`` (hidden entries, whose names start with ``.``, are ignored):

1. classes of video files: ``SRC/<class>/<video>.<ext>``;
2. classes of image folders: ``SRC/<class>/<video>/<frame>.<ext>`` (one folder = one video);
   a class folder may hold both video files and image folders;
3. flat, no classes: ``SRC/<video>.<ext>`` and/or ``SRC/<video>/<frame>.<ext>``.

A sub-folder of ``SRC`` that holds image files is an image-folder video (shape 3); one that
holds video files or folders is a class (shapes 1 and 2); mixing the two at the top level is an
error, since the labels would be ambiguous. A sub-folder with neither is an empty class beside
other classes, and is ignored (and reported) in a tree without classes. Extensions are
matched case-insensitively: :data:`VIDEO_EXTENSIONS` and :data:`IMAGE_EXTENSIONS`. Other files
are skipped and listed in :attr:`Plan.ignored` (the caller warns about them).

Labels: with classes, a video's label is the index of its class folder among all class
folders sorted by name (an empty class folder keeps its index); without classes every label is
:data:`NO_LABEL` (-1), so that ``h5feed.dataset(OUT)`` reads the result with its defaults.

Group names: the video's file (or folder) name without extension; with ``prefix_class``,
``<class>_<name>``. Two videos with the same group name are an error naming both paths,
raised before any work starts. Videos are packed in (class, name) order; frames of an image
folder in natural order of their file names (``2.jpg`` before ``10.jpg``).
"""

from __future__ import annotations

import dataclasses
import os
import re

__all__ = [
    "IMAGE_EXTENSIONS",
    "JPEG_EXTENSIONS",
    "NO_LABEL",
    "VIDEO_EXTENSIONS",
    "Plan",
    "Source",
    "discover",
    "natural_key",
]

#: Video files OpenCV's FFmpeg backend reads (case-insensitive).
VIDEO_EXTENSIONS = frozenset(
    {".mp4", ".m4v", ".avi", ".mkv", ".mov", ".webm", ".mpg", ".mpeg", ".wmv", ".flv"}
)
#: Image files; those in :data:`JPEG_EXTENSIONS` whose bytes are JPEG are stored as they are.
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"})
JPEG_EXTENSIONS = frozenset({".jpg", ".jpeg"})
#: The label of every video of a tree without classes.
NO_LABEL = -1

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders embedded numbers by value: ``f2.jpg`` < ``f10.jpg``."""
    parts = _DIGITS.split(name)
    return tuple((0, int(p)) if i % 2 else (1, p) for i, p in enumerate(parts) if p)


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    """One video to pack.

    ``path`` is relative to SRC (``/``-separated); ``is_images`` tells an image folder from a
    video file; ``frames`` lists the image files (relative to SRC, in natural order) of an
    image folder (possibly none) and is empty for a video file.
    ``size`` (bytes, summed over frames) and ``mtime_ns`` (the latest) fingerprint it.
    """

    name: str
    label: int
    path: str
    is_images: bool
    frames: tuple[str, ...]
    size: int
    mtime_ns: int

    def fingerprint(self) -> list[int]:
        """What a resumed run compares to tell whether this source changed."""
        return [self.size, self.mtime_ns, len(self.frames)]


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """The videos of SRC in packing order, its class names and the files it skipped."""

    root: str
    classes: tuple[str, ...]
    sources: tuple[Source, ...]
    ignored: tuple[str, ...]


def _ext(name: str) -> str:
    return os.path.splitext(name)[1].lower()


def _visible(path: str) -> list[os.DirEntry[str]]:
    with os.scandir(path) as entries:
        return sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)


class _Walker:
    def __init__(self, root: str) -> None:
        self.root = root
        self.ignored: list[str] = []

    def rel(self, path: str) -> str:
        return os.path.relpath(path, self.root).replace(os.sep, "/")

    def image_folder(self, folder: str, label: int, name: str) -> Source:
        """The video of an image folder; its sub-folders and other files are ignored."""
        frames: list[os.DirEntry[str]] = []
        for entry in _visible(folder):
            if entry.is_file() and _ext(entry.name) in IMAGE_EXTENSIONS:
                frames.append(entry)
            else:
                self.ignored.append(self.rel(entry.path))
        frames.sort(key=lambda e: natural_key(e.name))
        stats = [e.stat() for e in frames]
        return Source(
            name=name,
            label=label,
            path=self.rel(folder),
            is_images=True,
            frames=tuple(self.rel(e.path) for e in frames),
            size=sum(s.st_size for s in stats),
            mtime_ns=max((s.st_mtime_ns for s in stats), default=0),
        )

    def video_file(self, entry: os.DirEntry[str], label: int, name: str) -> Source:
        stat = entry.stat()
        return Source(name, label, self.rel(entry.path), False, (), stat.st_size, stat.st_mtime_ns)

    def items(self, folder: str, label: int, prefix: str) -> list[Source]:
        """Videos directly in ``folder``: video files and image folders."""
        found: list[Source] = []
        for entry in _visible(folder):
            stem = prefix + (entry.name if entry.is_dir() else os.path.splitext(entry.name)[0])
            if entry.is_dir():
                found.append(self.image_folder(entry.path, label, stem))
            elif entry.is_file() and _ext(entry.name) in VIDEO_EXTENSIONS:
                found.append(self.video_file(entry, label, stem))
            else:
                self.ignored.append(self.rel(entry.path))
        return found


def _holds_images(folder: str) -> bool:
    return any(e.is_file() and _ext(e.name) in IMAGE_EXTENSIONS for e in _visible(folder))


def _holds_videos(folder: str) -> bool:
    """Whether ``folder`` holds a video file or a sub-folder (an image folder)."""
    return any(
        e.is_dir() or (e.is_file() and _ext(e.name) in VIDEO_EXTENSIONS) for e in _visible(folder)
    )


def discover(root: str | os.PathLike[str], *, prefix_class: bool = False) -> Plan:
    """The :class:`Plan` of the tree at ``root`` (see the module docstring for the rules).

    Raises ``FileNotFoundError`` if ``root`` is not a directory and ``ValueError`` for a tree
    of no recognised shape (image files directly in ``root``, classes mixed with flat videos,
    no video at all) or for two videos with the same group name.
    """
    top = os.fspath(root)
    if not os.path.isdir(top):
        raise FileNotFoundError(f"source is not a directory: {top!r}")
    walker = _Walker(top)
    entries = _visible(top)
    images = [e.name for e in entries if e.is_file() and _ext(e.name) in IMAGE_EXTENSIONS]
    if images:
        raise ValueError(
            f"{top!r} holds image files directly ({images[0]!r}, ...): put each video's "
            "frames in a folder of its own (SRC/<video>/<frame>.jpg or "
            "SRC/<class>/<video>/<frame>.jpg)"
        )
    dirs = [e for e in entries if e.is_dir()]
    flat_dirs = [e for e in dirs if _holds_images(e.path)]
    class_dirs = [e for e in dirs if e not in flat_dirs and _holds_videos(e.path)]
    # Folders with neither images nor videos: empty classes beside other classes; else, as
    # they cannot be told apart from empty image folders, ignored (and reported).
    bare_dirs = [e for e in dirs if e not in flat_dirs and e not in class_dirs]
    if class_dirs:
        class_dirs = sorted(class_dirs + bare_dirs, key=lambda e: e.name)
    else:
        walker.ignored.extend(walker.rel(e.path) + "/" for e in bare_dirs)
    videos = [e for e in entries if e.is_file() and _ext(e.name) in VIDEO_EXTENSIONS]
    if class_dirs and (videos or flat_dirs):
        flat = (videos or flat_dirs)[0].name
        raise ValueError(
            f"{top!r} mixes class folders ({class_dirs[0].name!r}, ...) with videos outside "
            f"any class ({flat!r}, ...): either every video is in a class folder or none is"
        )
    sources: list[Source] = []
    if class_dirs:
        classes = tuple(e.name for e in class_dirs)
        for label, entry in enumerate(class_dirs):
            prefix = f"{entry.name}_" if prefix_class else ""
            sources.extend(walker.items(entry.path, label, prefix))
    else:
        classes = ()
        sources = walker.items(top, NO_LABEL, "")
    if not sources:
        raise ValueError(
            f"no video found in {top!r}: expected video files "
            f"({', '.join(sorted(VIDEO_EXTENSIONS))}) or folders of images "
            f"({', '.join(sorted(IMAGE_EXTENSIONS))}), in class folders or not"
        )
    _check_unique(sources, prefix_class)
    return Plan(top, classes, tuple(sources), tuple(walker.ignored))


def _check_unique(sources: list[Source], prefix_class: bool) -> None:
    seen: dict[str, Source] = {}
    for source in sources:
        other = seen.setdefault(source.name, source)
        if other is not source:
            hint = "" if prefix_class else "; --prefix-class names groups <class>_<name>"
            raise ValueError(
                f"two videos would both be group {source.name!r}: {other.path!r} and "
                f"{source.path!r} (group names must be unique across the output{hint})"
            )
