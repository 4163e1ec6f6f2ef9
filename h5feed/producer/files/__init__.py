"""The HDF5 files a worker reads: opened within limits, confined to the data root, indexed once."""
