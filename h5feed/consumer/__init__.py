"""The consumer side: the library a trainer imports. It holds the epoch plan, coordinates the
workers over ZeroMQ and exposes batches as NumPy dicts or a ``tf.data.Dataset``.
TensorFlow is imported only when a ``tf.data.Dataset`` is asked for."""
