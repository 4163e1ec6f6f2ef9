"""Users' PyTorch datasets and Keras PyDatasets through h5feed, unchanged, without TensorFlow:
run by tests/system/test_torch_sources.py in .venv-backends (``make backends``: torch, keras, jax).

``python tests/support/backends_sources.py MODE[,MODE...] OUT_JSON``: each mode gives what it saw
(an error the test expects as ``{"error": ...}``), written as JSON by mode.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import sys
from typing import Any

import numpy as np
from keras_recording import recorded_epochs

import h5feed
from h5feed.common.elements.values import RaggedArray

# Bounds for a loaded 2-core machine: each worker imports torch (and keras) before it answers.
FAST = {"start_timeout_s": 180, "unit_timeout_s": 180, "peer_timeout_s": 30}


def numpy_tensors() -> dict[str, Any]:
    """``h5feed.batches(source=)`` on a Dataset whose items are (Tensor, int): the clips as
    the dataset made them, each item once."""
    import user_torch

    seen: list[int] = []
    exact = True
    dtypes = set()
    for clips, labels in h5feed.batches(
        source="user_torch:VideoClips", source_args={"n": 10}, batch_size=4, workers=2,
        shuffle=True, seed=1, **FAST,
    ):  # fmt: skip
        dtypes.add(f"{type(clips).__name__}:{clips.dtype}:{list(clips.shape[1:])}")
        for clip, label in zip(clips, labels.tolist(), strict=True):
            index = next(i for i in range(10) if np.array_equal(clip, user_torch.expected_clip(i)))
            exact = exact and label == index % 3
            seen.append(index)
    return {"seen": sorted(seen), "exact": exact, "dtypes": sorted(dtypes)}


def torch_tuple() -> dict[str, Any]:
    """``h5feed.torch_batches(source=)`` on tuple items: a (Tensor, Tensor) per batch."""
    import torch
    import user_torch

    feed = h5feed.torch_batches(
        source="user_torch:VideoClips", source_args={"n": 10}, batch_size=4, workers=1,
        shuffle=False, **FAST,
    )  # fmt: skip
    kinds, labels, equal = set(), [], True
    for batch in feed:
        clips, label = batch
        kinds.add(f"{type(batch).__name__}:{type(clips).__name__}:{clips.dtype}")
        labels += label.tolist()
        start = len(labels) - len(label)
        for row, clip in enumerate(clips):
            expected = torch.from_numpy(user_torch.expected_clip(start + row))
            equal = equal and bool(torch.equal(clip, expected))
    feed.close()
    return {"kinds": sorted(kinds), "labels": labels, "equal": equal}


def torch_dict() -> dict[str, Any]:
    """``h5feed.torch_batches(source=)`` on dict items with a string, over two iterations:
    tensors, names, the worker's torch threads, and the worker pids of each iteration."""
    feed = h5feed.torch_batches(
        source="user_torch:NamedClips", source_args={"n": 6}, batch_size=4, workers=2,
        shuffle=False, **FAST,
    )  # fmt: skip
    iterations = []
    for _ in range(2):
        names, indices, threads, pids, kinds = [], [], set(), set(), set()
        for batch in feed:
            kinds |= {f"{k}:{type(v).__name__}" for k, v in batch.items()}
            names += [n.decode() for n in batch["name"]]
            indices += batch["index"].tolist()
            threads |= set(batch["threads"].tolist())
            pids |= {worker["pid"] for worker in feed.stats()["workers"]}
        iterations.append(
            {
                "names": names,
                "indices": indices,
                "threads": sorted(threads),
                "pids": sorted(pids),
                "kinds": sorted(kinds),
            }
        )
    feed.close()
    return {"iterations": iterations}


def ragged_clips() -> dict[str, Any]:
    """[C, T, H, W] tensors whose T varies, with ``ragged=True``."""
    (batch,) = h5feed.batches(
        source="user_torch:Clips", source_args={"n": 6}, batch_size=6, workers=1,
        shuffle=False, ragged=True, **FAST,
    )  # fmt: skip
    clips, _index = batch
    assert isinstance(clips, RaggedArray)
    return {
        "axis": clips.axis,
        "shapes": [list(row.shape) for row in clips.rows()],
        "values": [float(row.mean()) for row in clips.rows()],
    }


def odd(kind: str) -> dict[str, Any]:
    try:
        (batch,) = h5feed.batches(
            source="user_torch:Odd", source_args={"kind": kind}, batch_size=4, workers=1,
            shuffle=False, **FAST,
        )  # fmt: skip
    except h5feed.H5FeedError as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {key: {"dtype": str(v.dtype), "values": v.tolist()} for key, v in batch.items()}


def keras_fit(source: str) -> dict[str, Any]:
    """``model.fit`` for 2 epochs on ``h5feed.keras_batches(source=)``; the rows each Keras
    epoch took (the labels are the rows' ids), and the steps per epoch."""
    import keras

    ds = h5feed.keras_batches(source=source, batch_size=4, workers=2, shuffle=True, **FAST)
    taken: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)

    def record(keras_epoch: int, batch: Any) -> None:
        taken[keras_epoch].update(int(v) for v in np.asarray(batch[1]).tolist())

    epochs = recorded_epochs(ds, record)

    first_x = np.asarray(ds._pending[0][0])
    model = keras.Sequential(
        [keras.layers.Input(first_x.shape[1:]), keras.layers.Flatten(), keras.layers.Dense(1)]
    )
    model.compile("sgd", "mse")
    model.fit(ds, epochs=2, callbacks=[epochs], verbose=0)
    ds.close()
    return {
        "length": len(ds),
        "steps": epochs.steps,
        "taken": {str(e): sorted(c.items()) for e, c in taken.items()},
        "backend": keras.backend.backend(),
    }


MODES = {
    "numpy_tensors": numpy_tensors,
    "torch_tuple": torch_tuple,
    "torch_dict": torch_dict,
    "ragged": ragged_clips,
    "odd": lambda: odd("mixed"),
    "meta": lambda: odd("meta"),
    "keras_sequence": lambda: keras_fit("user_torch:keras_sequence"),
    "keras_torch_dataset": lambda: keras_fit("user_torch:LabelledRows"),
}


def main() -> None:
    """Runs the comma-separated modes of argv[1] in this one process (each pays torch's
    import once); writes ``{mode: result}``."""
    modes, out = sys.argv[1:3]
    results = {mode: MODES[mode]() for mode in modes.split(",")}
    results["tensorflow_importable"] = importlib.util.find_spec("tensorflow") is not None
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
