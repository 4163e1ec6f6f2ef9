"""HDF5 files as input: ownership of files, their index, the units cut from the plan, bad samples.

The HDF5 kind's scheduler follows :mod:`h5feed.consumer.core.scheduler`; nothing here knows user
sources.
"""
