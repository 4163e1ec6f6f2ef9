"""The fixed 3D CNN the GPU trainer trains, in torch and in Keras 3 (the same network)."""

from __future__ import annotations

from typing import Any

from h5feed.bench.workload import CLIP_SHAPE

CLASSES = 4


def make_model(width: int) -> Any:
    """Six conv-BN-ReLU blocks (strides 1x2x2, 1, 2, 1, 2, 1; widths w, w, 2w, 2w, 4w, 4w),
    global average pooling, a linear head of 4 classes; channels-last 3D memory."""
    import torch
    from torch import nn

    def block(cin: int, cout: int, stride: tuple[int, int, int]) -> list[nn.Module]:
        return [nn.Conv3d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm3d(cout), nn.ReLU()]

    model: Any = nn.Sequential(  # Any: torch's stubs lack to(memory_format=...)
        *block(3, width, (1, 2, 2)),
        *block(width, width, (1, 1, 1)),
        *block(width, 2 * width, (2, 2, 2)),
        *block(2 * width, 2 * width, (1, 1, 1)),
        *block(2 * width, 4 * width, (2, 2, 2)),
        *block(4 * width, 4 * width, (1, 1, 1)),
        nn.AdaptiveAvgPool3d(1),
        nn.Flatten(),
        nn.Linear(4 * width, CLASSES),
    )
    return model.to(memory_format=torch.channels_last_3d)


def make_keras_model(width: int) -> Any:
    """:func:`make_model`'s network in Keras 3 (channels last), compiled with AdamW."""
    import keras

    layers = [keras.Input((*CLIP_SHAPE,), dtype="uint8"), keras.layers.Rescaling(1 / 255)]
    for cout, stride in [
        (width, (1, 2, 2)), (width, 1), (2 * width, 2), (2 * width, 1), (4 * width, 2),
        (4 * width, 1),
    ]:  # fmt: skip
        layers += [
            keras.layers.Conv3D(cout, 3, strides=stride, padding="same", use_bias=False),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
        ]
    layers += [keras.layers.GlobalAveragePooling3D(), keras.layers.Dense(CLASSES)]
    model = keras.Sequential(layers)
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model
