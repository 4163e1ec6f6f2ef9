"""Which copy of the user's code a job means: a module's identity, checked by the workers.

A worker outlives the trainers it serves (``h5feed produce``, a trainer's kept local workers)
and imports a user's module once: Python keeps it in ``sys.modules``. After the file is
edited, or when a trainer names a module of the same name from another checkout, the worker
would go on running the copy it imported first — batches other than the trainer's code makes,
and nothing would say so. So the trainer sends with its job (JOB and SOURCE, protocol 6) the
identity of the module each of its import paths names (``transform=``, ``source=``): the
module's name, the SHA-256 of its file as the trainer finds it, and that file's path. A
worker records the same of each module the first time it loads it (the copy it then runs),
and refuses a job whose identity differs, naming both files and digests
(:class:`~h5feed.producer.worker.loaded_code.CodeVersionRefused`): the run ends with that error
before any data moves.

Limits, stated:

1. The named module's file only: a helper module it imports is not covered.
2. The trainer finds the file without running the module (``importlib.util.find_spec``; a
   dotted name's parent packages are imported, as by any import) or, for ``__main__``, its
   script. A module it cannot find (one only the producers have) travels without an identity,
   and the workers do not check it.
3. A worker records a module when a job first names it: one imported earlier only by another
   module is recorded from its file as it is then.
4. A file over :data:`MAX_HASHED_BYTES` is not hashed (no identity, no check).
5. A producer of protocol 5 is sent the job without identities (the field is advisory:
   :class:`~h5feed.common.protocol.message_schema.Since`) and does not check.
"""

from __future__ import annotations

import hashlib
import os
from typing import Final

#: A module file larger than this is not hashed (a source file never is; bounds the work).
MAX_HASHED_BYTES: Final = 16 << 20
#: How many hex digits of a digest an error message shows.
SHOWN_DIGITS: Final = 12


def digest_of(path: str) -> bytes | None:
    """The SHA-256 of the file at ``path``; None when it is not a readable regular file of
    at most :data:`MAX_HASHED_BYTES`."""
    try:
        with open(path, "rb") as file:
            if not os.path.isfile(path) or os.fstat(file.fileno()).st_size > MAX_HASHED_BYTES:
                return None
            return hashlib.sha256(file.read(MAX_HASHED_BYTES + 1)).digest()
    except OSError:
        return None


def shown(digest: bytes) -> str:
    """``digest`` as error messages show it (its first hex digits)."""
    return digest.hex()[:SHOWN_DIGITS]
