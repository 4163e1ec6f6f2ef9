"""CURVE keys for the wire (ZeroMQ's CurveZMQ): who may connect, and to whom.

Key files are pyzmq's certificates (``zmq.auth.create_certificates``): ``NAME.key`` holds the
public key, ``NAME.key_secret`` both keys. The consumer is the CURVE server: it holds its
secret key and accepts only the producers whose public keys it lists (pyzmq's authenticator).
Producers hold their own secret key and the consumer's public key, so they also check whom
they talk to.
"""

from __future__ import annotations

import dataclasses
import pathlib

import zmq
import zmq.auth

#: Environment variables through which the consumer gives its local workers their CURVE keys
#: (Z85 text), so that no key reaches a command line.
CURVE_ENV_PUBLIC = "H5FEED_CURVE_PUBLIC_Z85"
CURVE_ENV_SECRET = "H5FEED_CURVE_SECRET_Z85"
CURVE_ENV_SERVER = "H5FEED_CURVE_SERVER_Z85"


@dataclasses.dataclass(frozen=True)
class KeyPair:
    public: bytes
    secret: bytes

    @classmethod
    def load(cls, path: str) -> KeyPair:
        """From a ``.key_secret`` certificate file; ValueError naming the file otherwise."""
        public, secret = zmq.auth.load_certificate(path)
        if secret is None:
            raise ValueError(f"{path} holds no secret key (use the .key_secret file)")
        return cls(public, secret)

    @classmethod
    def generate(cls) -> KeyPair:
        public, secret = zmq.curve_keypair()
        return cls(public, secret)


def load_public(path: str) -> bytes:
    public, _ = zmq.auth.load_certificate(path)
    return bytes(public)


def load_public_keys(directory: str) -> set[bytes]:
    """The public keys of every ``*.key`` certificate in ``directory``."""
    files = sorted(pathlib.Path(directory).glob("*.key"))
    if not files:
        raise ValueError(f"no producer public keys (*.key) in {directory}")
    return {load_public(str(path)) for path in files}


def make_client(socket: zmq.Socket[bytes], own: KeyPair, server_public: bytes) -> None:
    """Set a socket up as a CURVE client of the server with ``server_public``."""
    socket.curve_secretkey = own.secret
    socket.curve_publickey = own.public
    socket.curve_serverkey = server_public
