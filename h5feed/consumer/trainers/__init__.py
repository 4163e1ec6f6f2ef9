"""Trainer front ends over one stream of batches: tf.data signatures, Keras ``PyDataset`` and
callbacks, PyTorch tensors, ``tf.distribute`` sharding and ``BackupAndRestore``."""
