"""The cap on one ZeroMQ frame, a setting of both ends (kept apart so that the command line
and the worker's settings read it without loading the codec)."""

from __future__ import annotations

from typing import Final

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES"]

#: Default cap on one ZeroMQ frame (``ZMQ_MAXMSGSIZE``), set on every socket before it binds or
#: connects. The largest legal frame is one DATA array: a unit's rows of clips, rows x T x H x
#: W x 3 bytes; 1 GiB holds 8 clips of 16 full-HD (1080 x 1920) frames (796 MB), so the
#: default batch of full-size frames fits. libzmq reads a frame's declared size first and
#: disconnects a peer that declares more, before it buffers a byte of it.
DEFAULT_MAX_MESSAGE_BYTES: Final = 1 << 30
