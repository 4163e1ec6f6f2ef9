"""User sources as input (``source=``): their options, the handshake, the three kinds' plans and
their element trees in TensorFlow. Nothing here knows HDF5 files."""
