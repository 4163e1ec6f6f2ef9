"""The previous release that tests/system/test_upgrade.py runs against, as a commit of this
repository.

Moved forward with each protocol bump: the last commit whose protocol is N-1 (the one before
the current ``PROTOCOL_VERSION``). Its code is unpacked with ``git archive``, so it must be in
the clone's history: a shallow clone fails those tests (never skips them).
"""

from __future__ import annotations

from typing import Final

#: The last commit of protocol 5 (package 0.1.0): main before protocol 6 landed.
PREVIOUS_RELEASE: Final = "7a79ce010048d6d0960c617bceb6b018ad2422fe"
PREVIOUS_PROTOCOL: Final = 5
PREVIOUS_PACKAGE: Final = "0.1.0"
