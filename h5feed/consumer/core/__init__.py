"""The loop core: one thread that composes the peer session, the credit gate and a scheduler.

``loop`` drives; ``session`` and ``events`` say what happens to peers; ``recovery`` what a loss
means; ``credits`` and ``ordering`` how many batches are in flight and in which order they are
released; ``scheduler`` is the protocol every input kind follows; ``ledger`` records the units
sent; ``counters`` what the loop counts (``stats()`` reads it); ``assembly`` and ``slots`` put
parts into batch memory; ``router``, ``security`` and ``waker`` are the socket's end.
Nothing here knows HDF5 files or user sources.
"""
