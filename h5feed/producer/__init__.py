"""The producer side: worker processes that read HDF5 files, decode and preprocess clips, and
send them to the consumer over ZeroMQ. Never imports TensorFlow."""
