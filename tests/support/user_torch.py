"""Users' PyTorch datasets, as found in the wild, run unchanged by tests/support/backends_sources.py
(in .venv-backends, which has torch): map-style ``torch.utils.data.Dataset`` classes whose
items go through torchvision-style transforms (``Compose`` of callables: ``ToTensor``,
``Normalize``, a random flip), returning tuples or dicts of tensors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

FRAMES, HEIGHT, WIDTH = 3, 4, 5
MEAN, STD = 0.5, 0.25
# As some libraries do at import: without h5feed's torch.set_num_threads(1) after loading
# this module, its workers would each run 4 threads (whatever the machine's cores).
torch.set_num_threads(4)


class Compose:
    """torchvision.transforms.Compose, as written there."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = transforms

    def __call__(self, value: Any) -> Any:
        for transform in self.transforms:
            value = transform(value)
        return value


class ToTensor:
    """uint8 [T, H, W, C] frames to a float tensor [C, T, H, W] in [0, 1] (a video clip as
    PyTorch video models take it)."""

    def __call__(self, frames: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(frames).permute(3, 0, 1, 2).float().div(255)


class Normalize:
    def __init__(self, mean: float, std: float) -> None:
        self.mean, self.std = mean, std

    def __call__(self, clip: torch.Tensor) -> torch.Tensor:
        return (clip - self.mean) / self.std


class RandomFlip:
    """Flips W with probability 1/2, drawing from torch's global generator (as torchvision's
    RandomHorizontalFlip does)."""

    def __call__(self, clip: torch.Tensor) -> torch.Tensor:
        return clip.flip(-1) if torch.rand(1).item() < 0.5 else clip


def frames_of(index: int) -> np.ndarray:
    """The stored frames of video ``index``: uint8 [T, H, W, 3], distinct per video."""
    base = np.arange(FRAMES * HEIGHT * WIDTH * 3, dtype=np.int64).reshape(FRAMES, HEIGHT, WIDTH, 3)
    return ((base + 7 * index) % 256).astype(np.uint8)


def expected_clip(index: int) -> np.ndarray:
    """What ``ToTensor`` then ``Normalize`` make of video ``index`` (no flip)."""
    clip = frames_of(index).transpose(3, 0, 1, 2).astype(np.float32) / 255
    return ((clip - MEAN) / STD).astype(np.float32)


class VideoClips(Dataset):  # type: ignore[type-arg]
    """(clip tensor [3, T, H, W] float32, label int): the usual video classification item."""

    def __init__(self, n: int = 10, flip: bool = False) -> None:
        self.n = n
        steps: list[Callable[[Any], Any]] = [ToTensor(), Normalize(MEAN, STD)]
        self.transform = Compose([*steps, RandomFlip()] if flip else steps)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(frames_of(index)), index % 3


class NamedClips(Dataset):  # type: ignore[type-arg]
    """``{"clip": Tensor, "name": str, "index": 0-d tensor, "threads": int}``: a dict item
    with a string, as a dataset that returns file names does; ``threads`` tells what
    ``torch.get_num_threads()`` is where the item is made (the same in every worker: the
    copies must agree)."""

    def __init__(self, n: int = 10) -> None:
        self.n = n
        self.transform = Compose([ToTensor(), Normalize(MEAN, STD)])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {
            "clip": self.transform(frames_of(index)),
            "name": f"video-{index}",
            "index": torch.tensor(index),
            "threads": torch.get_num_threads(),
        }


class Clips(Dataset):  # type: ignore[type-arg]
    """[C, T, H, W] clips whose T varies (1 + index % 3), for ``ragged=``."""

    def __init__(self, n: int = 6) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        frames = 1 + index % 3
        return torch.full((3, frames, 2, 2), float(index)), index


class Odd(Dataset):  # type: ignore[type-arg]
    """Odd tensors: ``kind="mixed"``, a dict of a bfloat16 tensor and one that requires grad;
    ``kind="meta"``, a tensor on the ``meta`` device (not in host memory, as a CUDA one)."""

    def __init__(self, kind: str, n: int = 4) -> None:
        self.kind, self.n = kind, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> Any:
        if self.kind == "mixed":
            return {
                "bfloat16": torch.tensor([index + 0.5, -index], dtype=torch.bfloat16),
                "grad": torch.tensor([float(index)], requires_grad=True) * 2,
            }
        return torch.zeros(2, device="meta")


def keras_sequence(n_batches: int = 5, batch: int = 4) -> Any:
    """A user's own ``keras.utils.PyDataset`` (class defined at call time: keras is imported
    with the backend the environment names)."""
    import keras

    class Rows(keras.utils.PyDataset):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.order = np.arange(n_batches * batch)

        def __len__(self) -> int:
            return n_batches

        def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
            rows = self.order[index * batch : (index + 1) * batch]
            return rows.astype(np.float32)[:, None], rows.astype(np.float32)

    return Rows()


class LabelledRows(Dataset):  # type: ignore[type-arg]
    """(features tensor [2], id tensor): a torch dataset for Keras (the id is the label)."""

    def __init__(self, n: int = 18) -> None:
        self.n = n
        self.transform = Compose([torch.as_tensor, Normalize(MEAN, STD)])

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.transform(np.asarray([index, -index], np.float32))
        return features, torch.tensor(float(index))
