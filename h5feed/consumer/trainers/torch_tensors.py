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
   workers (docs/performance/gpu.md), it cost 18 ms of trainer CPU per clip and halved the steps/s
   of a model the unpinned path kept 0.89 busy, so leave it off (the default) unless you
   measured otherwise.
5. Same batches, order and semantics as :func:`h5feed.batches` (each iteration runs
   ``epochs`` epochs and continues the epoch count).
6. ``source=`` (your own dataset in the workers): each batch is your element tree (tuples,
   dicts, lists, as :func:`h5feed.batches` gives it) with every numeric leaf a tensor over
   the batch memory as in 1., strings as in 3., and a ``ragged=`` field (a
   :class:`h5feed.common.elements.values.RaggedArray`) a list of tensors, one per row (views of the
   padded batch, as a ``collate_fn`` that keeps variable lengths gives them). ``keys=`` does
   not apply (the tree is yours).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from h5feed.common.elements import tree
from h5feed.common.elements.values import RaggedArray
from h5feed.consumer.feed import Feed, open_feed
from h5feed.consumer.parameters import PathsLike

_READ_ONLY_WARNING = "The given NumPy array is not writable"
#: ``keys=`` of an HDF5 feed when not given (a source feed takes its whole tree).
_HDF5_KEYS = ("frames", "label")


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
        out[key] = _tensor(torch, batch[key], pin_memory)
    return out


def tree_to_torch(batch: Any, pin_memory: bool = False) -> Any:
    """A source batch (any element tree) with its leaves as :func:`to_torch` makes them, and
    each RaggedArray a list of row tensors (see the module docstring, 6.)."""
    import torch

    if pin_memory and not torch.cuda.is_available():
        raise ValueError("h5feed: pin_memory=True needs CUDA (page-locked memory for GPU copies)")

    def convert(_path: str, leaf: Any) -> Any:
        if isinstance(leaf, RaggedArray):
            return [_tensor(torch, row, pin_memory) for row in leaf.rows()]
        return _tensor(torch, leaf, pin_memory) if isinstance(leaf, np.ndarray) else leaf

    return tree.map_with_paths(convert, batch, convention=tree.KERAS)


def _tensor(torch: Any, array: np.ndarray, pin_memory: bool) -> Any:
    if array.dtype == object:  # strings (file, video) stay NumPy
        return array
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_READ_ONLY_WARNING, category=UserWarning)
        tensor = torch.from_numpy(array)
    return tensor.pin_memory() if pin_memory else tensor


class TorchFeed:
    """A re-iterable feed of tensor trees: every ``iter()`` is a new iteration of ``feed``
    (``keys`` None and ``whole_tree``: a source's batches, converted whole)."""

    def __init__(
        self, feed: Feed, keys: Sequence[str] | None, pin_memory: bool, whole_tree: bool = False
    ) -> None:
        self.feed = feed
        self.keys = tuple(keys) if keys is not None else None
        self.pin_memory = pin_memory
        self.whole_tree = whole_tree

    def __iter__(self) -> Iterator[Any]:
        with self.feed.stream() as stream:
            for batch in stream:
                if self.whole_tree:
                    yield tree_to_torch(batch, self.pin_memory)
                else:
                    yield to_torch(batch, self.keys, self.pin_memory)

    def close(self) -> None:
        """Stop the workers the feed keeps across iterations (see ``Feed.close``)."""
        self.feed.close()

    def stats(self) -> dict[str, Any]:
        return self.feed.stats()


def torch_batches(
    files: PathsLike | None = None,
    *,
    keys: Sequence[str] | None = _HDF5_KEYS,
    pin_memory: bool = False,
    **kwargs: Any,
) -> TorchFeed:
    """``h5feed.batches(files, **kwargs)`` as dicts of ``torch`` tensors with ``keys`` (None:
    every key), without a copy (see the module docstring); with ``source=``, your element
    trees with tensor leaves (``keys`` does not apply)."""
    if pin_memory:
        import torch

        if not torch.cuda.is_available():
            raise ValueError("h5feed: pin_memory=True needs CUDA (page-locked memory)")
    if kwargs.get("source") is not None:
        if keys is not _HDF5_KEYS and keys is not None:
            raise TypeError("h5feed: keys= does not apply to source= (the element tree is yours)")
        return TorchFeed(open_feed(files, **kwargs), None, pin_memory, whole_tree=True)
    return TorchFeed(open_feed(files, **kwargs), keys, pin_memory)
