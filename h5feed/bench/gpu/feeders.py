"""What feeds the GPU trainer: each feeder yields uint8 frame batches [8, 16, 112, 112, 3]
(a torch tensor or a NumPy array), forever, with the workload of ``h5feed bench``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from h5feed.bench.workload import BATCH_SIZE, ClipReader, draw_clip, index_videos

#: The per-clip work of ``h5feed bench``, as h5feed options.
CLIP_OPTIONS: dict[str, Any] = {
    "clip_len": 16, "resize": (128, 171), "crop": (112, 112), "flip": True,
    "batch_size": BATCH_SIZE,
}  # fmt: skip


def h5feed_source(paths: list[str], workers: int, pin_memory: bool = False) -> Iterator[Any]:
    """``h5feed.torch_batches(workers=N)``: tensors over the batch memory."""
    import h5feed

    feed = h5feed.torch_batches(
        paths, keys=("frames",), workers=workers, epochs=None, start_timeout_s=120,
        pin_memory=pin_memory, **CLIP_OPTIONS,
    )  # fmt: skip
    for batch in feed:
        yield batch["frames"]


def dataloader_source(paths: list[str], workers: int) -> Iterator[Any]:
    """``DataLoader(map-style Dataset, shuffle=True, num_workers=N, persistent_workers=True,
    pin_memory=True)``: the same per-clip work (h5py read + cv2)."""
    import torch
    import torch.utils.data

    videos = index_videos(paths)

    class Clips(torch.utils.data.Dataset):  # type: ignore[misc,type-arg]
        """One random clip per video, h5py opened lazily in each DataLoader worker."""

        def __init__(self) -> None:
            self.reader: ClipReader | None = None
            self.rng: np.random.Generator | None = None

        def __len__(self) -> int:
            return len(videos)

        def __getitem__(self, index: int) -> Any:
            if self.reader is None or self.rng is None:  # opened inside each worker
                self.reader, self.rng = ClipReader(paths), np.random.default_rng()
            return torch.from_numpy(self.reader.clip(draw_clip(self.rng, videos[index])))

    loader = torch.utils.data.DataLoader(
        Clips(), batch_size=BATCH_SIZE, shuffle=True, num_workers=workers,
        persistent_workers=True, pin_memory=torch.cuda.is_available(), prefetch_factor=4,
    )  # fmt: skip
    while True:
        yield from loader


def cached_source(paths: list[str], workers: int) -> Iterator[Any]:
    """One real batch, made once, then handed out forever (moved to the GPU by the step, which
    keeps the GPU copy: see :func:`h5feed.bench.gpu.loops.run_torch`)."""
    reader = ClipReader(paths)
    rng = np.random.default_rng(0)
    videos = index_videos(paths)
    batch = np.stack([reader.clip(draw_clip(rng, videos[i])) for i in range(BATCH_SIZE)])
    while True:
        yield batch
