"""The peer session alone, under callgrind: no threads, sockets or timing, so its counts repeat
exactly. Two local peers join; then N rounds of what the loop does per unit (the session's
hot path): ``send`` a UNIT to one, ``receive`` its DATA part (a 2-row frames array), and
``check`` (deadlines, probes) every 4 rounds. The transport drops what it is given (the
ROUTER's cost is not the session's). Run with N=1000 and N=11000: the difference of the two
instruction counts over 10000 is the session's instructions per unit round.

    N=1000 valgrind --tool=callgrind --callgrind-out-file=OUT python session_messages.py
"""

import os
import time

import numpy as np

from h5feed.common.protocol import messages
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.session import PeerSession


class Dropping:
    def __init__(self) -> None:
        self.names = ["w0", "w1"]
        self.retired: set[int] = set()

    def send(self, identity: bytes, message: object, flags: int = 0, version: int = 0) -> None:
        pass

    def exited(self) -> list[tuple[str, int, int]]:
        return []


local = Dropping()
session = PeerSession("j", local, local, 60.0, Counters())
for i, name in enumerate(local.names):
    hello = messages.Hello(name, 100 + i, "localhost", "bench", f"nonce-{name}")
    session.receive(name.encode(), messages.encode(hello))
peers = list(session.peers.values())
session.events.clear()
frames = np.zeros((2, 8, 56, 56, 3), np.uint8)
parts = [
    messages.encode(messages.Data("j", unit, 0, (unit * 2, unit * 2 + 1), {"frames": frames}))
    for unit in range(2)
]
unit = messages.Unit("j", 0, 0, 0, ())
for n in range(int(os.environ.get("N", "1000"))):
    peer = peers[n % 2]
    session.send(peer, unit)
    session.receive(peer.identity, parts[n % 2])
    session.events.clear()
    if n % 4 == 0:
        session.check(time.monotonic())
print(len(session.peers), session.counters.malformed_messages)
