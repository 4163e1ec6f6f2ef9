"""Which h5feed protocol versions this side speaks, and how two peers agree on one.

Every side speaks the current version N (:data:`PROTOCOL_VERSION`) and the one before it,
N-1 (:data:`OLDEST_VERSION`), so producers can be upgraded one process at a time while their
trainers run (docs/deploy/upgrading.md). The rule, on every connection:

1. A producer says its first HELLO in the **oldest** version it speaks, which every peer of
   its range or the one before decodes, and names its whole range in it: from version 6 on
   in HELLO's ``protocols`` field; in version 5, which has no such field and refuses unknown
   fields, in the one free-text field a version-5 trainer never reads, ``package``, as
   ``"<package> (protocols 5-6; clips 1)"`` (:func:`legacy_package`). A version-5 HELLO
   without that suffix is a version-5 peer.
2. The trainer answers in the **highest version both speak** (:meth:`VersionRange.common`)
   and uses it for everything it sends that peer; none in common: it refuses the peer with a
   BYE that names both ranges.
3. The producer speaks the version of what the trainer sent it last (it mirrors), so it
   never sends a version its trainer did not choose.

A feature of a later version that a job needs is refused for peers on the earlier one when
the message is encoded (:class:`~h5feed.common.errors.FeatureVersionError`, naming the field),
never dropped silently.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Final

#: N: the version this side prefers. 6: version negotiation (HELLO ``protocols`` and
#: ``clip_semantics``, JOB ``clip_semantics``).
PROTOCOL_VERSION: Final = 6
#: N-1: the oldest version this side still speaks.
OLDEST_VERSION: Final = 5


@dataclasses.dataclass(frozen=True, slots=True)
class VersionRange:
    """The protocol versions one side speaks, lowest to highest (both included)."""

    lowest: int
    highest: int

    def __post_init__(self) -> None:
        if not 0 < self.lowest <= self.highest:
            raise ValueError(f"bad protocol version range {self.lowest}-{self.highest}")

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lowest <= version <= self.highest

    def __str__(self) -> str:
        if self.lowest == self.highest:
            return str(self.lowest)
        return f"{self.lowest}-{self.highest}"

    def common(self, other: VersionRange) -> int | None:
        """The highest version both ranges hold, or None."""
        highest = min(self.highest, other.highest)
        return highest if highest >= max(self.lowest, other.lowest) else None


#: The versions this side speaks.
SPOKEN: Final = VersionRange(OLDEST_VERSION, PROTOCOL_VERSION)

# The version-5 form of a HELLO's range and clip semantics, after the package version.
_LEGACY = re.compile(
    r"(?P<package>[^ ]{1,64}) "
    r"\(protocols (?P<low>\d{1,4})-(?P<high>\d{1,4}); clips (?P<clips>\d{1,4})\)"
)


def legacy_package(package: str, versions: VersionRange, clip_semantics: int) -> str:
    """The ``package`` field of a version-5 HELLO that also says the sender's range."""
    return f"{package} (protocols {versions.lowest}-{versions.highest}; clips {clip_semantics})"


def read_legacy_package(package: str) -> tuple[str, VersionRange, int] | None:
    """(package, range, clip semantics) said by a version-5 HELLO's ``package``, or None
    when it says only a package (a version-5 peer). ValueError for a malformed range."""
    said = _LEGACY.fullmatch(package)
    if said is None:
        return None
    versions = VersionRange(int(said["low"]), int(said["high"]))
    return said["package"], versions, int(said["clips"])
