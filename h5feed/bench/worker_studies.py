"""The help and arguments of the studies of many workers and of the balance between them
(argparse only: cheap to import; registered by :mod:`h5feed.bench.subcommands`):

* ``h5feed bench many-workers`` (:mod:`h5feed.bench.many_workers`): one trainer with hundreds
  or a thousand connected synthetic workers;
* ``h5feed bench balance`` (:mod:`h5feed.bench.balance`): each worker's share of the clips
  with workers whose per-clip cost is a sleep, over 1, 3 and 32 files.
"""

from __future__ import annotations

import argparse

from h5feed.common.cli_args import int_list, positive_int

MANY_WORKERS = """\
One trainer with many connected workers: what the trainer's loop costs at 100, 300 and
1,000 workers, and how fast it hands over the work of 10 % of them vanishing at once.

The workers are synthetic (h5feed/bench/swarm.py): each its own DEALER socket, identity and
connection, speaking the real protocol (HELLO, JOB, INDEX, UNIT/DATA), nothing read or
decoded; --processes processes hold them (many sockets per process, libzmq's MAX_SOCKETS
raised), so one process is 1/--processes of the workers. The trainer is h5feed.batches(
workers=0, listen=ipc://...) over --files tiny files (the scale study's), clips of 2 frames,
default timeouts (peer_timeout_s 5, unit_timeout_s 120). For each count of --workers:

  budget        the credit budget (batches in flight) the trainer settled on
  1st batch s   iter() to the first batch (the workers were started just before)
  idle loop     the loop thread's CPU, share of one core, every worker connected and
                nothing to make (the trainer takes no batch: the budget is spent)
  full loop     the same while the trainer takes batches as fast as they come
  batches/s     that rate
  loop ms/b     the loop thread's CPU per batch at full rate
  proc ms/b     the trainer process's CPU per batch (ZeroMQ's I/O thread included)
  kill s        SIGKILL of one process (10 % of the workers with --processes 10) at full
                rate: seconds until every one of them was declared lost and its work
                handed over
  stop s        the same with SIGSTOP (a silent host: only heartbeats tell)

The loop's CPU comes from /proc/self/task/TID/stat (10 ms ticks: use windows of seconds).
On a machine shared with other work the shares are upper bounds."""


def many_workers_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--workers", type=int_list, default="100,300,1000", metavar="N,...",
        help="connected workers, comma-separated (default %(default)s)")  # fmt: skip
    add("--processes", type=positive_int, default=10,
        help="processes holding them (default %(default)s: one is 10 %%)")  # fmt: skip
    add("--files", type=positive_int, default=1000, help="files (default %(default)s)")
    add("--videos", type=positive_int, default=4, help="videos per file (default 4)")
    add("--batch-size", type=positive_int, default=32, help="(default %(default)s)")
    add("--budget", type=positive_int, default=None,
        help="max_inflight_batches (default: unset, grown with the workers)")  # fmt: skip
    add("--window-s", type=float, default=3.0, help="seconds per CPU window (default 3)")
    add("--limit-s", type=float, default=30.0, help="longest wait for a hand-over (30)")
    add("--json", default=None, help="also write the results here")


BALANCE = """\
The balance a many-core machine would get: each worker's share of the clips, with workers
whose per-clip cost is a sleep, so 15 workers fit on 2 cores.

The real consumer scheduler (h5feed.batches over real small HDF5 files, local workers) with
a transform (h5feed/bench/sleepy.py, allowed by trust_code) that sleeps --clip-ms per clip,
and in the "slow" case 2 x --clip-ms in one worker (half speed). For each count of
--workers and each file count of --files (every file --videos videos, the same epoch):

  clips/s   over --epochs epochs after the first batch
  ideal     what the workers could make together (workers x 1000/clip-ms clips/s, the
            slow one counted at half)
  shares    each worker's share of the clips (stats()["workers"]), sorted, in %

Under one owner per file, a worker that owns no file makes nothing: 1 file on 8 workers is
one busy worker; 32 files on 15 workers leave some with 3 files and some with 2."""


def balance_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--workers", type=int_list, default="8,15", metavar="N,...", help="(default %(default)s)")
    add("--files", type=int_list, default="1,3,32", metavar="F,...", help="(default %(default)s)")
    add("--videos", type=positive_int, default=96,
        help="videos in all, dealt to the files (default %(default)s)")  # fmt: skip
    add("--clip-ms", type=float, default=20.0, help="sleep per clip (default 20)")
    add("--epochs", type=positive_int, default=2, help="(default %(default)s)")
    add("--no-slow", action="store_true", help="skip the runs with a half-speed worker")
    add("--json", default=None, help="also write the results here")
