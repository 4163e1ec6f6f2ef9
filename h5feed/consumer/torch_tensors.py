"""PyTorch: h5feed batches as ``torch`` tensors over the batch memory, without a copy.

``torch_batches(files, keys=("frames", "label"), **kwargs)`` iterates ``h5feed.batches`` and
gives each batch as a dict of tensors. Guarantees:

1. No copy: each numeric array becomes ``torch.from_numpy(array)``, a tensor over the same
   memory (the received message or the shared-memory slot), which stays valid while the tensor
   lives (the tensor holds the array, the array its buffer; a slot is reused only once the
   last array or tensor over it is gone).
2. Read-only memory: h5feed's arrays may be read-only views of the received message. PyTorch
   has no read-only tensors, so it would warn for each; the warning is silenced here and the
   rule is yours instead: do not write into these tensors in place (``frames.float()``,
   ``.to(device)`` and ``.clone()`` make new tensors; ``frames.div_(255)`` would write into
   h5feed's buffer).
3. String keys (``file``, ``video``) stay NumPy object arrays: they cannot become tensors.
4. ``pin_memory=True`` copies each tensor into page-locked memory (``tensor.pin_memory()``),
   which needs CUDA (else ``ValueError`` here, not a late failure); then
   ``.to("cuda", non_blocking=True)`` is an asynchronous DMA that overlaps the training step.
   It costs one host copy per batch, in the trainer's thread: measured on an H100 with 15
   workers (README "On a GPU"), it cost 18 ms of trainer CPU per clip and halved the steps/s
   of a model the unpinned path kept 0.89 busy, so leave it off (the default) unless you
   measured otherwise.
5. Same batches, order and semantics as :func:`h5feed.batches` (each iteration runs
   ``epochs`` epochs and continues the epoch count).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from h5feed.consumer.api import PathsLike, batches
from h5feed.consumer.feed import Feed

_READ_ONLY_WARNING = "The given NumPy array is not writable"


def to_torch(
    batch: Mapping[str, np.ndarray], keys: Sequence[str] | None = None, pin_memory: bool = False
) -> dict[str, Any]:
    """``batch``'s ``keys`` (default: all) as tensors over the same memory (see the module
    docstring: read-only memory, strings, ``pin_memory``)."""
    import torch

    if pin_memory and not torch.cuda.is_available():
        raise ValueError("h5feed: pin_memory=True needs CUDA (page-locked memory for GPU copies)")
    out: dict[str, Any] = {}
    for key in keys if keys is not None else list(batch):
        array = batch[key]
        if array.dtype == object:  # strings (file, video) stay NumPy
            out[key] = array
            continue
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_READ_ONLY_WARNING, category=UserWarning)
            tensor = torch.from_numpy(array)
        out[key] = tensor.pin_memory() if pin_memory else tensor
    return out


class TorchFeed:
    """A re-iterable feed of tensor dicts: every ``iter()`` is a new iteration of ``feed``."""

    def __init__(self, feed: Feed, keys: Sequence[str] | None, pin_memory: bool) -> None:
        self.feed = feed
        self.keys = tuple(keys) if keys is not None else None
        self.pin_memory = pin_memory

    def __iter__(self) -> Iterator[dict[str, Any]]:
        with self.feed.stream() as stream:
            for batch in stream:
                yield to_torch(batch, self.keys, self.pin_memory)

    def stats(self) -> dict[str, Any]:
        return self.feed.stats()


def torch_batches(
    files: PathsLike | None = None,
    *,
    keys: Sequence[str] | None = ("frames", "label"),
    pin_memory: bool = False,
    **kwargs: Any,
) -> TorchFeed:
    """``h5feed.batches(files, **kwargs)`` as dicts of ``torch`` tensors with ``keys`` (None:
    every key), without a copy (see the module docstring)."""
    if pin_memory:
        import torch

        if not torch.cuda.is_available():
            raise ValueError("h5feed: pin_memory=True needs CUDA (page-locked memory)")
    return TorchFeed(batches(files, **kwargs), keys, pin_memory)
