"""Videos written for `h5feed pack` and the one-file layout tests."""

from __future__ import annotations

import pathlib

import cv2
import numpy as np

_SIZE_WH = (64, 48)  # frame width, height of the test videos


_FOURCC = {".mp4": "mp4v", ".avi": "MJPG"}


def write_video(path: pathlib.Path, frames: int, seed: int) -> int:
    """Write a video of ``frames`` distinct noisy frames; return the frames OpenCV reads back."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*_FOURCC[path.suffix]), 10, _SIZE_WH)
    assert writer.isOpened(), f"this OpenCV cannot write {path.suffix}"
    rng = np.random.default_rng(seed)
    width, height = _SIZE_WH
    for i in range(frames):
        image = np.full((height, width, 3), (i * 12) % 256, np.uint8)
        image[: height // 2] = rng.integers(0, 256, (height // 2, width, 3), dtype=np.uint8)
        writer.write(image)
    writer.release()
    return len(read_frames(path))


def read_frames(path: pathlib.Path) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, image = capture.read()
        if not ok:
            break
        frames.append(image)
    capture.release()
    return frames
