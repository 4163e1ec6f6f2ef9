"""The extra readers of the HDF5 files of an iteration: workers that read a file besides its
owner, so that work follows cores, not files.

A file's owner (:mod:`~h5feed.consumer.hdf5.file_owners`) indexes it and keeps it through
hand-overs; once the plan's index is known, the files are also dealt to *extra readers*
(:func:`deal`) so that every worker reads a share of the epoch's samples: 1 file on N workers
is read by all N, N+1 files on N workers have one read by two or more. The dispatch sends each
batch's rows of a file whole to one of its readers (owner or extra), the one with the fewest
rows in flight, so a worker at half speed ends up with about half the work of that file.

An extra reader is *pending* until the file is known to be the planned copy there: a local
worker reading a file whose index was learnt on the trainer's host is confirmed at once (the
same file, the index learnt once per host); any other (a remote producer) sends the file's
INDEX first, compared with the plan's (a digest per extra remote reader, not once per host:
a host name is only what a peer says). No row goes to a pending reader.

Guarantees:

1. A peer is at most once among a file's readers (pending or confirmed), never its owner
   nor its taker (the scheduler drops an extra reader that becomes either), and ``files_of``
   and ``readers`` agree in both directions.
2. A lost peer (:meth:`FileReaders.release`) reads nothing from then on; a refused one
   (:meth:`FileReaders.refuse`) no longer reads that file (the refusal itself is kept by
   ``FileOwners``, which every deal consults).
3. :func:`deal` only adds readers, each to a file whose current readers keep at least the
   share the newcomer gets (a share never goes below another's by a deal), so the shares end
   within one file's weight of fair whenever a deal can move them; it runs at plan start,
   at each join and after each loss, not per batch.
4. Not thread-safe: the loop's thread owns it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from h5feed.consumer.core.ledger import Peer

#: The files of a donor a deal looks at per read, heaviest first: a deal runs per topology
#: change, and a donor of 100,000 files must not cost a scan of them all per read (the
#: heaviest decide, and a read that keeps shares in order is rare further down).
_SCAN = 64

#: Float slack when comparing shares (they are sums of fractions of file weights).
_SLACK = 1e-9


class FileReaders:
    """See the module docstring."""

    def __init__(self) -> None:
        self._readers: dict[int, dict[Peer, bool]] = {}  # file -> reader -> confirmed
        self._files: dict[Peer, dict[int, None]] = {}  # reader -> its files, in order got
        self._confirmed = 0  # confirmed (file, reader) pairs: 0 is the dispatch's fast path

    @property
    def any(self) -> bool:
        """Whether any file has a confirmed extra reader."""
        return self._confirmed > 0

    def confirmed(self, file_index: int) -> list[Peer]:
        """The confirmed extra readers of ``file_index``, in the order they came."""
        readers = self._readers.get(file_index)
        return [] if not readers else [p for p, ok in readers.items() if ok]

    def readers(self, file_index: int) -> list[Peer]:
        """Every extra reader of ``file_index``, pending or confirmed."""
        return list(self._readers.get(file_index, ()))

    def pending(self, file_index: int, peer: Peer) -> bool:
        """Whether ``peer`` is to read ``file_index`` once its INDEX matches."""
        return self._readers.get(file_index, {}).get(peer) is False

    def reads(self, file_index: int, peer: Peer) -> bool:
        """Whether ``peer`` is an extra reader of ``file_index`` (pending or confirmed)."""
        return peer in self._readers.get(file_index, ())

    def files_of(self, peer: Peer) -> list[int]:
        """The files ``peer`` reads as an extra reader, in the order it got them."""
        return list(self._files.get(peer, ()))

    def count(self, peer: Peer) -> int:
        """How many files ``peer`` reads as a confirmed extra reader."""
        return sum(1 for f in self._files.get(peer, ()) if self._readers[f][peer])

    def add(self, file_index: int, peer: Peer, confirmed: bool) -> None:
        """``peer`` reads ``file_index`` from now (``confirmed``) or once :meth:`confirm`\\ ed."""
        readers = self._readers.setdefault(file_index, {})
        if peer in readers:
            raise ValueError(f"{peer} reads file {file_index} already")
        readers[peer] = confirmed
        self._files.setdefault(peer, {})[file_index] = None
        self._confirmed += confirmed

    def confirm(self, file_index: int, peer: Peer) -> None:
        """``peer``'s copy of ``file_index`` is the planned one: rows may go to it."""
        readers = self._readers[file_index]  # KeyError: not a reader
        if not readers[peer]:
            readers[peer] = True
            self._confirmed += 1

    def drop(self, file_index: int, peer: Peer) -> None:
        """``peer`` no longer reads ``file_index`` as an extra reader (refused, or its owner
        now); nothing if it did not."""
        readers = self._readers.get(file_index)
        if readers is None or peer not in readers:
            return
        self._confirmed -= readers.pop(peer)
        if not readers:
            del self._readers[file_index]
        files = self._files[peer]
        del files[file_index]
        if not files:
            del self._files[peer]

    refuse = drop  # the refusal is recorded by FileOwners; here it only ends the reading

    def release(self, lost: Peer) -> list[int]:
        """``lost`` reads nothing from now; returns the files it was reading."""
        files = list(self._files.get(lost, ()))
        for file_index in files:
            self.drop(file_index, lost)
        return files


def deal(
    weights: Sequence[float],
    peers: Sequence[Peer],
    holders: Callable[[int], list[Peer]],
    may_read: Callable[[int, Peer], bool],
    limit: int | None = None,
) -> list[tuple[int, Peer]]:
    """The (file, peer) extra reads to add so that every peer in ``peers`` reads its share.

    ``weights``: each file's samples (videos); ``holders(f)``: who reads ``f`` now (owner or
    taker, then extra readers); ``may_read(f, p)``: whether ``p`` may be added (not refused,
    not a holder). A file is assumed shared evenly among its readers (the dispatch balances it
    by load): a peer's share is the sum of ``weight / readers`` over its files. Repeatedly,
    the peer with the smallest share reads one more file: of the peers above it (largest
    first), the file that gives it most while each current reader keeps at least what the
    newcomer ends with (guarantee 3). Stops when no such file is left, or after ``limit``
    reads (default: twice the peers). Costs O(files + reads x peers² x 64): run per
    topology change, never per batch.
    """
    if len(peers) < 2:
        return []
    readers = {f: list(holders(f)) for f in range(len(weights)) if weights[f] > 0}
    share = dict.fromkeys(peers, 0.0)
    files_of: dict[Peer, list[int]] = {p: [] for p in peers}
    for file_index, held in readers.items():
        for peer in held:
            if peer in share:
                share[peer] += weights[file_index] / len(held)
                files_of[peer].append(file_index)
    for files in files_of.values():  # heaviest first: a donor's scan stops early
        files.sort(key=lambda f: -weights[f])
    added: list[tuple[int, Peer]] = []
    budget = 2 * len(peers) if limit is None else limit
    while len(added) < budget:
        best = _best_read(weights, readers, share, files_of, may_read)
        if best is None:
            break
        file_index, peer = best
        held = readers[file_index]
        weight = weights[file_index]
        for reader in held:
            if reader in share:
                share[reader] -= weight / len(held) - weight / (len(held) + 1)
        share[peer] += weight / (len(held) + 1)
        held.append(peer)
        _insert_by_weight(files_of[peer], file_index, weights)
        added.append((file_index, peer))
    return added


def _best_read(
    weights: Sequence[float],
    readers: dict[int, list[Peer]],
    share: dict[Peer, float],
    files_of: dict[Peer, list[int]],
    may_read: Callable[[int, Peer], bool],
) -> tuple[int, Peer] | None:
    """The next extra read of :func:`deal`: for the peers in ascending share, the best file
    from the peers above it (None: no read keeps guarantee 3)."""
    order = sorted(share, key=lambda p: (share[p], p.identity))
    fair = sum(share.values()) / len(share)
    for receiver in order:
        if share[receiver] >= fair - _SLACK:
            break  # only peers below fair read more, only from peers above it
        for donor in reversed(order):
            if share[donor] <= fair + _SLACK:
                break
            best: tuple[float, int] | None = None
            for file_index in itertools.islice(files_of[donor], _SCAN):  # heaviest first
                if best is not None and weights[file_index] / 2 <= best[0]:
                    break  # no lighter file can give more
                held = readers[file_index]
                if receiver in held or not may_read(file_index, receiver):
                    continue
                gain = weights[file_index] / (len(held) + 1)
                cut = weights[file_index] / len(held) - gain
                kept = min((share[r] for r in held if r in share), default=0.0) - cut
                if kept + _SLACK >= share[receiver] + gain and (best is None or gain > best[0]):
                    best = (gain, file_index)
            if best is not None:
                return best[1], receiver
    return None


def _insert_by_weight(files: list[int], file_index: int, weights: Sequence[float]) -> None:
    """Insert ``file_index`` into ``files`` (heaviest first), after those as heavy."""
    weight = weights[file_index]
    position = len(files)
    while position > 0 and weights[files[position - 1]] < weight:
        position -= 1
    files.insert(position, file_index)
