"""The wire protocol: the frames, the typed messages and their schemas, the handshake, the
versions both sides speak, and how a vanished peer is noticed."""
