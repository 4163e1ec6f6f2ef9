"""The kinds of job a worker runs, one class each (:class:`~h5feed.producer.worker.job.Job`).

The worker's event loop opens a job of the kind whose start message arrives (JOB: HDF5 files,
:class:`~h5feed.producer.worker.hdf5_job.Hdf5Job`; SOURCE: the user's source,
:class:`~h5feed.producer.sources.job.SourceJob`). A new way to read is a new class here.
"""

from __future__ import annotations

from typing import Any

from h5feed.producer.sources.job import SourceJob
from h5feed.producer.worker.hdf5_job import Hdf5Job
from h5feed.producer.worker.job import Job

__all__ = ["KINDS"]

#: Every kind of job a worker runs; each answers its own start message (``STARTS``).
KINDS: tuple[type[Job[Any, Any]], ...] = (Hdf5Job, SourceJob)
