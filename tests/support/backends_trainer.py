"""Trainers without TensorFlow, run by tests/system/test_backends.py in .venv-backends (``make
backends``: jax[cpu], keras, the CPU torch wheel, h5feed without the tf extra).

``python tests/support/backends_trainer.py keras|torch DATA_DIR OUT_JSON``; ``keras`` fits with the
backend ``KERAS_BACKEND`` names. Writes what it saw as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from typing import Any

import numpy as np
from keras_recording import recorded_epochs

import h5feed

CLIP = {"clip_len": 2, "resize": (16, 16), "workers": 1, "seed": 3, "batch_size": 4}


def keras_fit(data: str) -> dict[str, Any]:
    """``model.fit`` for 2 epochs on ``h5feed.keras_batches``; the (Keras epoch, h5feed epoch,
    sample) of every row Keras took, and the steps per epoch."""
    import keras

    ds = h5feed.keras_batches(data, x="frames", y="label", **CLIP)
    taken: list[list[int]] = []

    def record(keras_epoch: int, batch: dict[str, np.ndarray]) -> None:
        epochs, samples = batch["epoch"].tolist(), batch["sample"].tolist()
        taken.extend([keras_epoch, e, s] for e, s in zip(epochs, samples, strict=True))

    epochs = recorded_epochs(ds, record)

    model = keras.Sequential(
        [
            keras.layers.Input((2, 16, 16, 3)),
            keras.layers.Rescaling(1 / 255.0),
            keras.layers.Flatten(),
            keras.layers.Dense(4),
        ]
    )
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ds, epochs=2, callbacks=[epochs], verbose=1)
    ds.close()
    return {
        "length": len(ds),
        "steps": epochs.steps,
        "taken": taken,
        "backend": keras.backend.backend(),
    }


def torch_loop(data: str) -> dict[str, Any]:
    """Two iterations of ``h5feed.torch_batches``, and the no-copy checks on one batch."""
    import torch

    from h5feed.consumer.trainers.torch_tensors import to_torch

    feed = h5feed.torch_batches(data, keys=("frames", "label", "sample", "epoch", "file"), **CLIP)
    rows: list[list[int]] = []
    kinds: set[str] = set()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            for batch in feed:
                kinds |= {f"{k}:{type(v).__name__}:{v.dtype}" for k, v in batch.items()}
                rows += [
                    [int(e), int(s)] for e, s in zip(batch["epoch"], batch["sample"], strict=True)
                ]
                loss = batch["frames"].float().mean()  # a new tensor: no write into h5feed's
                loss.item()
        numpy_batch = next(iter(h5feed.batches(data, **CLIP, epochs=1)))
        tensors = to_torch(numpy_batch, ("frames", "label"))
    frames = numpy_batch["frames"]
    try:
        h5feed.torch_batches(data, pin_memory=True, **CLIP)
        pin_error = ""
    except ValueError as error:
        pin_error = str(error)
    return {
        "rows": rows,
        "kinds": sorted(kinds),
        "warnings": [str(w.message) for w in caught],
        "same_memory": tensors["frames"].data_ptr() == frames.__array_interface__["data"][0]
        and np.shares_memory(tensors["frames"].numpy(), frames),
        "frames_writeable": bool(frames.flags.writeable),
        "shape": list(tensors["frames"].shape),
        "is_tensor": isinstance(tensors["frames"], torch.Tensor),
        "pin_error": pin_error,
    }


def main() -> None:
    mode, data, out = sys.argv[1:4]
    result = keras_fit(data) if mode == "keras" else torch_loop(data)
    result["tensorflow_importable"] = importlib.util.find_spec("tensorflow") is not None
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
