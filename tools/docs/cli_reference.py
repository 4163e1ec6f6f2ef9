"""The command line page of the reference (docs/reference/cli.md): every command's
``--help``, formatted as on a terminal :data:`HELP_COLUMNS` wide whatever the build's
terminal (tools/docs/reference.py's guarantees 5 and 6). A sibling of the hook, imported by it."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

from rest_markdown import fence

#: The terminal width the help texts are formatted for (argparse reads $COLUMNS).
HELP_COLUMNS = 100


@contextlib.contextmanager
def help_width(columns: int = HELP_COLUMNS) -> Iterator[None]:
    """argparse formats for a terminal ``columns`` wide (it reads $COLUMNS) while inside."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def subcommands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``(words, parser)`` for ``parser`` and every subcommand below it, depth first in the
    order they were added (an alias is not listed twice)."""
    yield words, parser
    seen: set[int] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    yield from subcommands(sub, (*words, name))


def cli_markdown(parser: argparse.ArgumentParser) -> str:
    """Each command's ``--help`` under a heading ``h5feed WORDS`` (built, never run)."""
    parts: list[str] = []
    with help_width():
        for words, command in subcommands(parser):
            title = " ".join((parser.prog, *words))
            heading = "#" * min(max(len(words), 1) + 1, 6)  # h5feed and its commands: h2
            parts.append(f"{heading} {title}\n\n{fence(command.format_help().rstrip(), 'text')}")
    return "\n\n".join(parts) + "\n"
