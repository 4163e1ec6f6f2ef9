"""Synthetic scenes for the sample dataset: moving, natural-looking, learnable.

Each video is a camera panning at constant sub-pixel velocity over a large multi-octave colour
texture (terrain, clouds, sand or moss, coloured through a palette and shaded), with one or two
blurred coloured ellipses moving, rotating and bouncing off the frame edges. Class ``c`` of
``num_classes`` is learnable from one frame and from motion alike: the ellipses have hue
``c / num_classes`` of the colour wheel, and the camera pans in direction
``2 * pi * c / num_classes`` (give or take a little). Deterministic given the generator.
"""

from __future__ import annotations

import dataclasses
import math

import cv2
import numpy as np
from numpy.typing import NDArray

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


def video_frames(
    rng: np.random.Generator,
    label: int,
    n_frames: int,
    *,
    height: int,
    width: int,
    num_classes: int,
    quality: int,
) -> list[NDArray[np.uint8]]:
    """The JPEG-encoded frames of one video of class ``label`` (see the module docstring)."""
    size = min(height, width)
    px = size / 240.0  # motion and shapes scale with the frame

    # Camera: pans in the class's direction at a constant sub-pixel speed.
    direction = 2.0 * math.pi * (label + rng.uniform(-0.12, 0.12)) / num_classes
    speed = float(rng.uniform(1.5, 3.5)) * px
    vx, vy = speed * math.cos(direction), speed * math.sin(direction)
    travel_x, travel_y = abs(vx) * (n_frames - 1), abs(vy) * (n_frames - 1)
    tex_w = width + math.ceil(travel_x) + 6
    tex_h = height + math.ceil(travel_y) + 6
    texture = _texture(rng, tex_h, tex_w, size)
    # getRectSubPix centres: the window stays 2 px inside the texture along the whole path.
    start_x = 2.0 + (width - 1) / 2.0 + (travel_x if vx < 0 else 0.0)
    start_y = 2.0 + (height - 1) / 2.0 + (travel_y if vy < 0 else 0.0)

    colour = _class_colour(rng, label, num_classes)
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

    params = [cv2.IMWRITE_JPEG_QUALITY, quality]
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
