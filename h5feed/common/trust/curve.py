"""CURVE keys for the wire (ZeroMQ's CurveZMQ): who may connect, and to whom.

Key files are pyzmq's certificates (``zmq.auth.create_certificates``): ``NAME.key`` holds the
public key, ``NAME.key_secret`` both keys. The consumer is the CURVE server: it holds its
secret key and accepts only the producers whose public keys it lists (pyzmq's authenticator).
Producers hold their own secret key and the consumer's public key, so they also check whom
they talk to.

Modes: :func:`write_key_pair` creates the secret file 0600 and the public one 0644 (less if
the umask says so), each created with its mode (never widened for a moment, then narrowed).
A secret key file that group or others may read, write or run (any bit of 0077) is refused
before it is read, as ssh refuses such a private key: a ValueError naming the file, its mode
and ``chmod 600``. A secret mounted read-only as a Docker secret (0400) loads as it is.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time

import zmq
import zmq.auth

from h5feed.common.system.atomic import atomic_file

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
        """From a ``.key_secret`` certificate file; ValueError naming the file otherwise, or
        its mode when group or others may access it."""
        check_secret_mode(path)
        public, secret = _load(path)
        if secret is None:
            raise ValueError(f"{path} holds no secret key (use the .key_secret file)")
        return cls(public, secret)

    @classmethod
    def generate(cls) -> KeyPair:
        public, secret = zmq.curve_keypair()
        return cls(public, secret)


#: The mode bits a secret key file must not have: any access by group or others.
_NOT_PRIVATE = 0o077


def check_secret_mode(path: str) -> None:
    """ValueError if group or others may access the secret key file ``path`` (as ssh does)."""
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError as exc:
        raise ValueError(f"no such key file: {path}") from exc
    if mode & _NOT_PRIVATE:
        raise ValueError(
            f"the secret key file {path} is mode {mode:04o}: group or others may read it; a "
            f"secret key must be private to its owner (run: chmod 600 {path})"
        )


def load_public(path: str) -> bytes:
    public, _ = _load(path)
    return bytes(public)


def _load(path: str) -> tuple[bytes, bytes | None]:
    """pyzmq's certificate reader; a file this process may not read is a ValueError that says
    who owns it, its mode and who we are (a secret mounted 0400 for another uid)."""
    try:
        return zmq.auth.load_certificate(path)
    except PermissionError as exc:
        info = os.stat(path)
        raise ValueError(
            f"cannot read the key file {path} (mode {info.st_mode & 0o777:04o}, owner uid "
            f"{info.st_uid} gid {info.st_gid}; this process runs as uid {os.getuid()}): make it "
            "readable by this user, e.g. a Docker/Kubernetes secret owned by it or by its group"
        ) from exc


#: Modes of the files :func:`write_key_pair` creates (the umask may only remove bits).
SECRET_MODE = 0o600
PUBLIC_MODE = 0o644


def write_key_pair(directory: str, name: str) -> tuple[str, str]:
    """A new key pair as pyzmq certificates ``directory/name.key`` (public, 0644) and
    ``directory/name.key_secret`` (0600); returns their paths. Each is written to a new file
    created with its mode, then renamed over any old one: the secret key never sits in a
    file others may read, not even while an old world-readable file is being replaced."""
    public, secret = zmq.curve_keypair()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    base = os.path.join(directory, name)
    public_text = _certificate(stamp, "Public", public, None)
    secret_text = _certificate(stamp, "**Secret**", public, secret)
    _create(f"{base}.key", public_text, PUBLIC_MODE)
    _create(f"{base}.key_secret", secret_text, SECRET_MODE)
    return f"{base}.key", f"{base}.key_secret"


def _certificate(stamp: str, kind: str, public: bytes, secret: bytes | None) -> str:
    """The text of a certificate as ``zmq.auth.create_certificates`` writes it (ZPL)."""
    lines = [f"#   ****  Generated on {stamp} by h5feed keys (pyzmq format)  ****"]
    lines.append(f"#   ZeroMQ CURVE {kind} Certificate")
    if secret is not None:
        lines.append("#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.")
    lines += ["", "metadata", "curve", f'    public-key = "{public.decode()}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    return "\n".join(lines) + "\n"


def write_public_key(path: str, public: bytes) -> str:
    """``public`` (Z85) as a public certificate file at ``path`` (0644); returns ``path``."""
    _create(path, _certificate(time.strftime("%Y-%m-%d %H:%M:%S"), "Public", public, None), 0o644)
    return path


def _create(path: str, text: str, mode: int) -> None:
    with atomic_file(path, mode) as tmp, open(tmp, "w", encoding="utf-8") as out:
        out.write(text)


def load_public_keys(directory: str) -> set[bytes]:
    """The public keys of every ``*.key`` certificate in ``directory``."""
    files = sorted(pathlib.Path(directory).glob("*.key"))
    if not files:
        raise ValueError(f"no producer public keys (*.key) in {directory}")
    return {load_public(str(path)) for path in files}


def client_key_files(key: str | None, server_key: str | None) -> tuple[KeyPair, bytes] | None:
    """A CURVE client's own key pair (its ``.key_secret`` file) and the server's public key
    (its ``.key`` file); None when neither is given, ValueError when only one is."""
    if key is None and server_key is None:
        return None
    if key is None or server_key is None:
        raise ValueError("CURVE needs both --key and --server-key")
    return KeyPair.load(key), load_public(server_key)


def make_client(socket: zmq.Socket[bytes], own: KeyPair, server_public: bytes) -> None:
    """Set a socket up as a CURVE client of the server with ``server_public``."""
    socket.curve_secretkey = own.secret
    socket.curve_publickey = own.public
    socket.curve_serverkey = server_public
