"""``python -m h5feed``: the ``h5feed`` command line (see :mod:`h5feed.cli`)."""

from __future__ import annotations

import sys

from h5feed.cli import main

if __name__ == "__main__":
    sys.exit(main())
