"""The small dataset, options and checks the scheduler tests and the in-process loop tests
share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from fake_peers import FakeWorker, Fleet, fake_index, fake_videos, hdf_config, make_peer

from h5feed.common.protocol import messages
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.scheduler import Send
from h5feed.consumer.hdf5.scheduler import HdfScheduler
from h5feed.consumer.options import FeedConfig
from h5feed.consumer.plan.epoch_plan import Cursor, Index, epoch_order

JOB = "job-7"


VIDEOS = fake_videos([4, 5, 3])  # 12 videos in 3 files


FILES = list(VIDEOS)


INDEX = fake_index(VIDEOS)


#: Small plan options: 2 clips per video, 24 samples, batches of 5 (the last one partial).
HDF_OPTIONS: dict[str, Any] = {"clips_per_video": 2, "batch_size": 5, "seed": 3}


def job_files(sends: Sequence[Send]) -> list[int]:
    """The file numbers the JOBs among ``sends`` give."""
    return [f.number for s in sends if isinstance(m := s.message, messages.Job) for f in m.files]


def epochs_from(start: Cursor, count: int) -> range:
    """The epochs an iteration from ``start`` runs (as the stream passes them)."""
    return range(start.epoch, start.epoch + count)


def hdf_fleet(
    peers: int | Sequence[Peer],
    *,
    epochs: int = 2,
    start: Cursor | None = None,
    budget: int = 4,
    slots: bool = False,
    known: Index | None = None,
    **options: Any,
) -> tuple[Fleet, HdfScheduler, FeedConfig]:
    """Fake workers (``peers``, or that many named p0, p1, ...) around a real HDF5 scheduler
    of the small dataset, an iteration of ``epochs`` from ``start`` (the beginning)."""
    start = Cursor() if start is None else start
    config = hdf_config(FILES, **{**HDF_OPTIONS, **options})
    counters = Counters()
    scheduler = HdfScheduler(config, JOB, iter(epochs_from(start, epochs)), start, counters, known)
    gate = CreditGate(budget, lambda: None)
    if isinstance(peers, int):
        peers = [make_peer(f"p{i}") for i in range(peers)]
    workers = [FakeWorker(peer, VIDEOS, slots=slots) for peer in peers]
    return Fleet(scheduler, workers, gate, counters), scheduler, config


def check_hdf_batch(batch: Batch, clips_per_video: int = 2) -> list[int]:
    """The batch's samples, after checking every row came from its own sample."""
    arrays = batch.arrays
    samples = arrays["sample"]
    rows = len(samples)
    expected = np.broadcast_to(
        (samples % 256).astype(np.uint8)[:, None, None, None, None], (rows, 1, 1, 1, 1)
    )
    assert arrays["frames"].dtype == np.uint8
    assert arrays["frames"].shape[0] == rows
    assert (arrays["frames"] == expected).all(), "a row landed in another sample's place"
    videos = samples // clips_per_video
    assert arrays["label"].tolist() == INDEX.labels[videos].tolist()
    assert arrays["video"].tolist() == INDEX.names[videos].tolist()
    assert arrays["epoch"].tolist() == [batch.epoch] * rows
    assert arrays["batch"].tolist() == [batch.index] * rows
    return samples.tolist()  # type: ignore[no-any-return]


LENGTH = 23  # items of the map source (batches of the keras one)


def map_ids(batch: Batch) -> list[int]:
    element = batch.element
    assert set(element) == {"id", "x"}
    ids = element["id"]
    assert (element["x"] == ids[:, None].astype(np.float32)).all()
    assert batch.rows == len(ids)
    return ids.tolist()  # type: ignore[no-any-return]


def expected_items(
    config: FeedConfig, length: int, per_batch: int, epochs: Sequence[int]
) -> list[tuple[int, int, list[int]]]:
    out = []
    for epoch in epochs:
        order = epoch_order(length, config.options.plan, epoch).tolist()
        for position in range(-(-len(order) // per_batch)):
            out.append((epoch, position, order[position * per_batch : (position + 1) * per_batch]))
    return out
