"""The consumer as a CURVE server: only listed producers get in.

Guarantees: pyzmq's authenticator (a ZAP handler thread) checks every connecting key before the
connection is accepted, so a producer whose public key is not listed never gets a message
through, and the consumer never reads one of its messages. The keys made for this iteration's
local workers are listed too (they reach the workers by environment, never by command line).
"""

from __future__ import annotations

import logging

import zmq
from zmq.auth.thread import ThreadAuthenticator

from h5feed.common.curve import KeyPair, load_public_keys
from h5feed.common.logs import with_ids

_log = with_ids(logging.getLogger("h5feed.consumer"), "consumer")  # ids in every line


class CurveServer:
    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], key_file: str, authorized: str):
        own = KeyPair.load(key_file)
        self.public = own.public
        self._secret = own.secret
        self.local_keys = KeyPair.generate()
        allowed = load_public_keys(authorized) | {self.local_keys.public}
        self._authenticator = ThreadAuthenticator(context)
        self._authenticator.start()
        self._authenticator.configure_curve_callback("*", credentials_provider=_Listed(allowed))

    def secure(self, socket: zmq.Socket[bytes]) -> None:
        """Make ``socket`` a CURVE server (before it binds)."""
        socket.curve_secretkey = self._secret
        socket.curve_publickey = self.public
        socket.curve_server = True

    def stop(self) -> None:
        self._authenticator.stop()


class _Listed:
    """pyzmq's CURVE credentials provider: a connecting key is allowed if it is listed."""

    def __init__(self, keys: set[bytes]) -> None:
        self._keys = keys

    def callback(self, domain: str, key: bytes) -> bool:
        allowed = key in self._keys
        if not allowed:
            _log.warning("refused a CURVE client whose key is not listed: %s", key.decode())
        return allowed
