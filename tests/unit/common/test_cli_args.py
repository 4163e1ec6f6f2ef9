"""The argparse types shared by h5feed's commands (h5feed/common/cli_args.py)."""

from __future__ import annotations

import argparse

import pytest

from h5feed.common.cli_args import frame_size


def test_a_frame_size_is_height_by_width() -> None:
    assert frame_size("240x320") == (240, 320)
    assert frame_size("128X160") == (128, 160)


@pytest.mark.parametrize("text", ["240", "240x", "x320", "240x320x3", "4x320", "ax b"])
def test_a_frame_size_that_is_not_two_sizes_of_at_least_8_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="HEIGHTxWIDTH"):
        frame_size(text)
