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
INDEX first, compared with the plan's (the copy check is per extra remote reader, not once
per host: a host name is only what a peer says). No row goes to a pending reader. A batch's
rows of a file go to one reader, so on chunked or compressed layouts two workers never
decompress a chunk for the same batch (across batches they may: a chunk of a shared file can
be read by each of its readers).

Guarantees:

1. A peer is at most once among a file's readers (pending or confirmed), never its owner
   nor its taker (the scheduler drops an extra reader that becomes either), and ``files_of``
   and ``readers`` agree in both directions.
2. A lost peer (:meth:`FileReaders.release`) reads nothing from then on; a refused one
   (:meth:`FileReaders.refuse`) no longer reads that file (the refusal itself is kept by
   ``FileOwners``, which every deal consults).
3. :func:`deal` only adds readers: with the reads it deals (a transfer plan from the peers
   above fair to those below, file by file), a routing exists that gives every live peer
   exactly its fair share of the held samples, unless refusals forbid it; it runs at plan
   start and at the first dispatch after a join, loss, refusal or confirmed move, never per
   batch.
4. Not thread-safe: the loop's thread owns it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from h5feed.consumer.core.ledger import Peer


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
    weights: np.ndarray,
    held: dict[Peer, list[int]],
    may_read: Callable[[int, Peer], bool],
) -> list[tuple[int, Peer]]:
    """The (file, peer) reads that let every peer of ``held`` make exactly its fair share.

    ``weights``: each file's samples (videos), float64; ``held``: each live peer's files that
    it reads in full now (those it owns and is not handing over, and those it is taking over);
    ``may_read(f, p)``: whether ``p`` may read ``f`` (not refused; never asked of a file's
    holder). Fair is the held weight over the peers. Each peer below fair takes what it lacks
    from the peers above (most loaded first), from their heaviest files first, reading each
    file it takes from: a transfer plan, so with these reads (and any others) a routing exists
    that gives every peer exactly fair (guarantee 3; the dispatch approaches it by load). A
    peer refused the files it would take stays below. Costs O(files held by donors x log)
    with NumPy sums for the loads: run per topology change, never per batch. The reads
    returned may include some the caller has already (it filters them).
    """
    peers = list(held)
    if len(peers) < 2:
        return []
    load = {p: float(weights[files].sum()) if files else 0.0 for p, files in held.items()}
    total = sum(load.values())
    fair = total / len(peers)
    slack = total * 1e-12
    above = [p for p in peers if load[p] > fair + slack]
    below = [p for p in peers if load[p] < fair - slack]
    if not above or not below:
        return []
    donors = sorted(above, key=lambda p: (-load[p], p.identity))
    excess = {p: load[p] - fair for p in donors}
    order: dict[Peer, list[int]] = {}  # a donor's files, heaviest first (then by number)
    for donor in donors:
        files = np.asarray(held[donor], np.int64)
        files = files[np.lexsort((files, -weights[files]))]
        order[donor] = [f for f in files.tolist() if weights[f] > 0]
    left: dict[int, float] = {}  # weight of a donor's file not yet given away
    reads: list[tuple[int, Peer]] = []
    for receiver in sorted(below, key=lambda p: (load[p], p.identity)):
        need = fair - load[receiver]
        for donor in donors:
            if need <= slack:
                break
            for file_index in order[donor]:
                if excess[donor] <= slack or need <= slack:
                    break
                amount = min(need, excess[donor], left.get(file_index, weights[file_index]))
                if amount <= slack or not may_read(file_index, receiver):
                    continue
                left[file_index] = left.get(file_index, weights[file_index]) - amount
                excess[donor] -= amount
                need -= amount
                reads.append((file_index, receiver))
    return reads


def ring(
    held: dict[Peer, list[int]], may_read: Callable[[int, Peer], bool]
) -> list[tuple[int, Peer]]:
    """A second reader for every held file: each peer's files are also read by the next peer
    in a ring of the peers (by identity), where allowed.

    :func:`deal` balances by count: files that divide evenly get no extra reader, so a worker
    at half speed would hold up the epoch with the half it owns. With the ring every peer can
    shed work to its neighbour, and the neighbour to the next: the dispatch, which sends each
    batch's rows of a file to its reader with the fewest rows in flight, then balances by
    throughput whatever the file count. Costs one more open file per file (at most
    ``max_open_files`` each still), and for a remote neighbour one more INDEX per file (its
    copy check). Only adds readers, so guarantee 3 holds with it."""
    peers = sorted(held, key=lambda p: p.identity)
    if len(peers) < 2:
        return []
    reads: list[tuple[int, Peer]] = []
    for at, peer in enumerate(peers):
        neighbour = peers[(at + 1) % len(peers)]
        reads += [(f, neighbour) for f in held[peer] if may_read(f, neighbour)]
    return reads
