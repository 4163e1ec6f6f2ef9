"""The package's version, in the one place both sides read it: the face (``h5feed.__version__``),
the ``h5feed`` command, and the producer's HELLO, which must not import the package face (it
would pull the consumer's lazy names into every worker)."""

__version__ = "0.2.0"
