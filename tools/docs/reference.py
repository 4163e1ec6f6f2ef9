"""MkDocs hook: the reference pages generated at build time (filled in by issue 28's work)."""

from __future__ import annotations

from typing import Any


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return markdown
