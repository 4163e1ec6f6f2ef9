"""How a worker opens an HDF5 file: read-only, under HDF5's file locking where the file system
has locks, and without one where it has none.

Several workers now read one file at once (a file's videos are dealt to several readers), so
the lock matters. HDF5 (1.10 and later) takes a shared ``flock`` on a file opened read-only and
an exclusive one on a file opened for writing. What that gives, with ``locking="best-effort"``:

1. Any number of workers, on one host or several, hold one file open read-only at once: shared
   locks never conflict.
2. A file open for writing elsewhere (being written or replaced in place) is refused at open
   (``unable to lock file, errno = 11``): a :class:`~h5feed.common.errors.FileReadError` naming
   the file and host, the same error as before files were shared; and a writer cannot open a
   file a worker reads. Replacing a file by renaming a new one over it is unaffected: the
   worker keeps reading the old inode it opened.
3. On a file system without locks (``flock`` gives ENOSYS: NFS without a lock daemon, some
   FUSE mounts) the file opens unlocked instead of failing, which with ``locking=True`` (HDF5's
   default) needs ``HDF5_USE_FILE_LOCKING=FALSE`` set by the operator. That variable, where set,
   still wins over this choice (``FALSE``: never lock).
"""

from __future__ import annotations

from typing import Final

import h5py

#: h5py's ``locking=`` for every file a worker opens (see the module docstring).
READ_LOCKING: Final = "best-effort"


def open_read_only(path: str) -> h5py.File:
    """``path`` opened read-only with :data:`READ_LOCKING`; raises what ``h5py.File`` raises."""
    return h5py.File(path, "r", locking=READ_LOCKING)
