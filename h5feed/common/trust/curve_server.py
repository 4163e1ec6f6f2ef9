"""A CURVE server: only listed clients get in. The trainer is one for its producers
(``curve_authorized=``), a shared fleet's front for its trainers (``--trainer-keys``).

Guarantees: pyzmq's authenticator (a ZAP handler thread) checks every connecting key before the
connection is accepted, so a client whose public key is not listed never gets a message
through, and the server never reads one of its messages. Each refusal is counted
(:attr:`CurveServer.refused_keys`, ``stats()["refused_keys"]``) and logged at most once per
10 s for all keys together (``h5feed/common/trust/refusal_log.py``: a fresh key costs nothing),
with the count refused since the last line. A message
through gets the client's public key as its ``User-Id`` property (Z85): the fleet's front
reads who attached from it. ``extra_keys`` are listed too (the trainer's keys made for this
iteration's local workers, which reach them by environment, never by command line).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import zmq
from zmq.auth.thread import ThreadAuthenticator

from h5feed.common.system.logs import with_ids
from h5feed.common.trust.curve import KeyPair, load_public_keys
from h5feed.common.trust.refusal_log import RefusalLog


class CurveServer:
    def __init__(
        self,
        context: zmq.Context[zmq.Socket[bytes]],
        key_file: str,
        authorized: str,
        extra_keys: Iterable[bytes] = (),
        role: str = "consumer",
    ):
        """``role``: whose log lines ("consumer", "producer")."""
        own = KeyPair.load(key_file)
        self.public = own.public
        self._secret = own.secret
        allowed = load_public_keys(authorized) | set(extra_keys)
        log = with_ids(logging.getLogger(f"h5feed.{role}"), role)  # ids in every line
        self._listed = _Listed(allowed, log)
        self._authenticator = ThreadAuthenticator(context)
        self._authenticator.start()
        self._authenticator.configure_curve_callback("*", credentials_provider=self._listed)

    @property
    def refused_keys(self) -> int:
        """Connections refused so far for a key that is not listed (read from any thread)."""
        return self._listed.refused

    def secure(self, socket: zmq.Socket[bytes]) -> None:
        """Make ``socket`` a CURVE server (before it binds)."""
        socket.curve_secretkey = self._secret
        socket.curve_publickey = self.public
        socket.curve_server = True

    def stop(self) -> None:
        self._authenticator.stop()


class _Listed:
    """pyzmq's CURVE credentials provider: a connecting key is allowed if it is listed."""

    def __init__(
        self, keys: set[bytes], log: logging.Logger | logging.LoggerAdapter[logging.Logger]
    ) -> None:
        self._keys = keys
        self.refused = 0  # written by the authenticator's thread only
        # One line per 10 s for all keys together: a fresh key costs a client nothing.
        self._lines = RefusalLog(log, "CURVE clients")

    def callback(self, domain: str, key: bytes) -> bool:
        if key in self._keys:
            return True
        self.refused += 1
        self._lines.refused("refused (key not listed)", key.decode(errors="replace"))
        return False
