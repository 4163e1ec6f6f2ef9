"""The frames check of an HDF5 part on its own (which parts are taken, through the scheduler:
tests/unit/consumer/test_schedulers.py,
test_hdf_a_part_with_other_samples_or_bad_frames_is_dropped)."""

from __future__ import annotations

import numpy as np
import pytest
from fake_peers import hdf_config

from h5feed.consumer.hdf5.parts import bad_frames

CLIP = hdf_config(["a.h5"], clip_len=2).clip
WITH_TRANSFORM = hdf_config(["a.h5"], clip_len=2, transform="json:loads").clip


def test_one_uint8_clip_per_row_is_well_formed() -> None:
    assert not bad_frames(np.zeros((3, 2, 4, 5, 3), np.uint8), 3, CLIP)


@pytest.mark.parametrize(
    "frames",
    [
        None,  # no frames, and no slot to have written them
        np.zeros((), np.uint8),  # no rows at all
        np.zeros((2, 2, 4, 5, 3), np.uint8),  # a row short
        np.zeros((3, 2, 4, 5, 3), np.float32),  # another dtype
        np.zeros((3, 2, 4, 5), np.uint8),  # no colour axis
        np.zeros((3, 1, 4, 5, 3), np.uint8),  # clips of another length
        np.zeros((3, 2, 4, 5, 4), np.uint8),  # four channels
    ],
)
def test_a_part_of_another_shape_or_dtype_is_bad(frames: np.ndarray | None) -> None:
    assert bad_frames(frames, 3, CLIP)


def test_with_a_transform_only_the_rows_are_checked() -> None:
    assert not bad_frames(np.zeros((3, 7), np.float32), 3, WITH_TRANSFORM)
    assert bad_frames(np.zeros((2, 7), np.float32), 3, WITH_TRANSFORM)
    assert bad_frames(np.zeros((), np.float32), 3, WITH_TRANSFORM)
