"""Where this host keeps h5feed's index cache (the trainer's ``index_cache=`` default, and
a producer service's workers' own)."""

from __future__ import annotations

import os

__all__ = ["default_cache_dir"]


def default_cache_dir() -> str:
    """The index cache directory.

    ``$H5FEED_CACHE_DIR``, else ``$XDG_CACHE_HOME/h5feed/index``, else ``~/.cache/h5feed/index``.
    """
    explicit = os.environ.get("H5FEED_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "h5feed", "index")
