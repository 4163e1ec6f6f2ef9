"""The wire protocol between a trainer and its workers. Its one entrance is
:mod:`h5feed.common.protocol.messages`, the codec: every message class, :func:`encode` and
:func:`decode`; code sends and receives through it and nothing else. Below it, each module one
thing:

- :mod:`.wire`: the frames (a msgpack header, raw array frames) and their strict check;
- :mod:`.message_types`: the message types of a job (JOB ... DATA, ERROR), and every kind's
  schema; :mod:`.control_types`: the connection's (HELLO, BYE, PING, ATTACH, ATTACHED);
- :mod:`.message_records`: the records inside messages (a UNIT's rows, ...) and the bounds;
- :mod:`.message_schema`: how a class's annotations become its wire schema;
- :mod:`.versions` (N and N-1), :mod:`.handshake` (the first HELLO), :mod:`.liveness`
  (heartbeats), :mod:`.frame_cap` (the cap on one frame).
"""
