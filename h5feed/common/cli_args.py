"""Pieces every ``h5feed`` subcommand's parser uses (argparse only: cheap to import)."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Callable
from typing import Any

#: ``subcommand(name, summary, description, epilog)`` -> the command's ArgumentParser, as
#: :func:`h5feed.cli.build_parser` hands it to each command's ``register``.
Subcommand = Callable[[str, str, str, str], Any]


#: The width help texts are laid out at by hand (the project's line length): a longer line of
#: a description or epilog was written as one paragraph, and is wrapped.
HAND_WRAPPED = 100


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's and epilog's line breaks (their examples and paragraphs are
    laid out by hand, at most :data:`HAND_WRAPPED` columns), and wraps to the terminal a line
    longer than that which starts at the margin: prose written as one line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines = []
        for line in text.splitlines():
            if len(line) > HAND_WRAPPED and not line[:1].isspace():
                lines += textwrap.wrap(line, width, initial_indent=indent, subsequent_indent=indent)
            else:
                lines.append(indent + line)
        return "\n".join(lines)


def int_in(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for integers >= ``minimum`` (and <= ``maximum`` when given)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if maximum is not None and not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be in {minimum}..{maximum}, got {value}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


positive_int = int_in(1)
non_negative_int = int_in(0)


def positive_seconds(text: str) -> float:
    """An argparse ``type`` for a duration in seconds: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return value


def frame_size(text: str) -> tuple[int, int]:
    """An argparse ``type`` for ``HEIGHTxWIDTH`` (``240x320``): two integers >= 8."""
    height, sep, width = text.lower().partition("x")
    try:
        size = int(height), int(width)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not HEIGHTxWIDTH: {text!r}") from None
    if not sep or min(size) < 8:
        raise argparse.ArgumentTypeError(f"needs HEIGHTxWIDTH, each >= 8, got {text!r}")
    return size


def int_list(text: str) -> list[int]:
    """An argparse ``type`` for ``1,2,4``: integers >= 1, in the order given."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"need integers >= 1, got {text!r}")
    return values
