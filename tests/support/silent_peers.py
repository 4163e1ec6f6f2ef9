"""Peers that say hello and nothing else, run as a subprocess by
tests/unit/consumer/test_silent_peers.py
(not a test module), so that their thousands of sockets live in a process of their own.

``python tests/support/silent_peers.py ADDRESS COUNT [KEY_SECRET_FILE SERVER_PUBLIC_FILE]``: COUNT
DEALERs (identities ``silent-0000``...) connect to ADDRESS (as CURVE clients with the keys
given), each sends one HELLO, and ``ready`` is printed. libzmq answers the trainer's
heartbeats for them, so they look alive. When stdin closes, the kinds of message they were
sent are printed as one JSON object and the process exits.
"""

from __future__ import annotations

import collections
import json
import sys

import zmq

from h5feed.common.protocol import messages
from h5feed.common.trust.curve import KeyPair, load_public

address, count = sys.argv[1], int(sys.argv[2])
keys = (KeyPair.load(sys.argv[3]), load_public(sys.argv[4])) if len(sys.argv) > 4 else None
context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
context.set(zmq.MAX_SOCKETS, count + 64)
sockets = []
for i in range(count):
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.ROUTING_ID, f"silent-{i:04d}".encode())
    if keys is not None:
        dealer.curve_secretkey = keys[0].secret
        dealer.curve_publickey = keys[0].public
        dealer.curve_serverkey = keys[1]
    dealer.connect(address)
    hello = messages.Hello(f"silent-{i:04d}", 10**6 + i, "elsewhere", "x", f"n{i}")
    dealer.send_multipart(messages.encode(hello))
    sockets.append(dealer)
print("ready", flush=True)
sys.stdin.read()  # until the test closes it
kinds: collections.Counter[str] = collections.Counter()
for dealer in sockets:
    while dealer.poll(0):
        kinds[type(messages.decode(dealer.recv_multipart())).__name__] += 1
print(json.dumps(kinds), flush=True)
for dealer in sockets:
    dealer.close(0)
context.term()
