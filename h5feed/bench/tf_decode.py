"""tf.data decoding the JPEGs itself: Python only reads the bytes.

``from_generator`` of shuffled video indices; ``map(py_function)`` reads the JPEG bytes of one
random clip (h5py); ``map`` decodes them with ``tf.io.decode_jpeg`` (the 16 frames as 16 ops
of one graph, so they run in parallel), resizes with ``tf.image.resize`` (bilinear), crops
with ``tf.image.random_crop`` and flips the whole clip with probability 1/2; both maps with
``num_parallel_calls=AUTOTUNE, deterministic=False``; then ``batch(8).prefetch(AUTOTUNE)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from h5feed.bench.tf_recipes import MapPyFunction
from h5feed.bench.workload import CLIP_LEN, CLIP_SHAPE, RESIZE, draw_clip


class DecodeJpeg(MapPyFunction):
    """See the module docstring."""

    def read(self, index: Any) -> np.ndarray:
        """The JPEG bytes of a random clip of video ``index``, as a [clip_len] bytes array."""
        clip = draw_clip(np.random.default_rng(), self.setup.videos[int(index)])
        return np.array(self.reader.encoded(clip), dtype=object)

    def build(self) -> Any:
        import tensorflow as tf

        ds = tf.data.Dataset.from_generator(
            self.indices, output_signature=tf.TensorSpec((), tf.int64)
        )

        def read(index: Any) -> Any:
            encoded = tf.py_function(self.read, [index], tf.string)
            return tf.ensure_shape(encoded, (CLIP_LEN,))

        def decode(encoded: Any) -> Any:
            frames = tf.stack([tf.io.decode_jpeg(encoded[t], channels=3) for t in range(CLIP_LEN)])
            frames = tf.image.resize(frames, RESIZE, method="bilinear")
            frames = tf.image.random_crop(frames, CLIP_SHAPE)
            flip = tf.random.uniform(()) < 0.5
            frames = tf.cond(flip, lambda: tf.reverse(frames, axis=[2]), lambda: frames)
            return tf.cast(frames + 0.5, tf.uint8)  # round to nearest: values are >= 0

        parallel = {"num_parallel_calls": tf.data.AUTOTUNE, "deterministic": False}
        ds = ds.map(read, **parallel).map(decode, **parallel)
        return ds.batch(8).prefetch(tf.data.AUTOTUNE)
