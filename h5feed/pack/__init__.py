"""``h5feed pack``: video files or image folders -> sharded HDF5 files in the default layout.

Modules, one job each: :mod:`~h5feed.pack.sources` (which videos, labels, names, order),
:mod:`~h5feed.pack.encode` (one video -> its HDF5 group, in a pool process),
:mod:`~h5feed.pack.shards` (shard files, atomic), :mod:`~h5feed.pack.manifest` (what is done),
:mod:`~h5feed.pack.verify` (check OUT against the manifest), :mod:`~h5feed.pack.run` (the
whole run, resumable), :mod:`~h5feed.pack.command` (the command line). Importing this package
imports none of them.
"""
