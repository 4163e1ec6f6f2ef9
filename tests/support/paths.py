"""Where things are, for tests and their support modules wherever they sit in tests/."""

from __future__ import annotations

import pathlib

#: tests/support/: user modules, trainer scripts, peers (on every worker's PYTHONPATH in tests).
SUPPORT = pathlib.Path(__file__).resolve().parent
#: tests/
TESTS = SUPPORT.parent
#: The repository's root.
REPO = TESTS.parent
