"""What producer and consumer share: the wire protocol, clip configuration and errors.

This package imports neither ``h5feed.producer`` nor ``h5feed.consumer``, and never TensorFlow.
"""
