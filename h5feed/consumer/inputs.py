"""The input kinds as objects: a feed's configuration's :func:`input_of`, which the feed,
its streams and an iteration's position ask what differs between an HDF5 feed and a user
source (:class:`~h5feed.consumer.hdf5.input.HdfInput`,
:class:`~h5feed.consumer.sources.input.SourceInput`), so that no other module tests a
configuration's type (tests/project/test_input_kinds.py checks it)."""

from __future__ import annotations

from typing import TypeAlias

from h5feed.consumer.hdf5.input import HdfInput
from h5feed.consumer.options import FeedConfig, HdfConfig
from h5feed.consumer.sources.input import SourceInput

#: A feed's input kind: HDF5 files, or the user's code in the workers.
FeedInput: TypeAlias = HdfInput | SourceInput


def input_of(config: FeedConfig) -> FeedInput:
    """The input kind of ``config``: the one place that asks a configuration its type."""
    return HdfInput(config) if isinstance(config, HdfConfig) else SourceInput(config)
