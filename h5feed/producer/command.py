"""The producer's commands: ``h5feed produce`` (the service), ``h5feed keys`` (CURVE key
pairs) and ``h5feed health`` (its liveness check). Importing this module is cheap (argparse
only); each command imports what it needs when it runs."""

from __future__ import annotations

import argparse
import os
import sys

from h5feed.common.cli_args import Subcommand, positive_int
from h5feed.producer.code_policy import ALLOW_CODE_ENV as _ALLOW_CODE_ENV  # a cheap import

#: (flag, environment variable, metavar, help) of `h5feed produce`.
_PRODUCE_OPTIONS = (
    ("--connect", "H5FEED_CONNECT", "ADDR", "the trainer's address, e.g. tcp://trainer-host:5555"),
    ("--data-root", "H5FEED_DATA_ROOT", "DIR", "the job's relative file paths resolve under this"),
    (
        "--workers",
        "H5FEED_WORKERS",
        "N",
        "worker processes; default: the CPUs this process may use, cgroup CPU quota included",
    ),
    ("--name", "H5FEED_NAME", "NAME", "prefix of the workers' names; default: host-pid"),
    ("--health-file", "H5FEED_HEALTH_FILE", "PATH", "keep writing liveness here (h5feed health)"),
    ("--key", "H5FEED_KEY", "FILE", "CURVE: this producer's .key_secret file (h5feed keys)"),
    ("--server-key", "H5FEED_SERVER_KEY", "FILE", "CURVE: the trainer's public .key file"),
    ("--metrics-port", "H5FEED_METRICS_PORT", "PORT", "serve /metrics and /stats (0: a free port)"),
)

_PRODUCE_DESCRIPTION = """\
Start decoding workers that serve an h5feed consumer (a trainer that called
h5feed.dataset(..., listen="tcp://*:5555")). Every flag has an H5FEED_* environment variable.

Guarantees: the workers may start before the trainer and wait for it; they serve its jobs
(file list, clip and preprocessing parameters come from the trainer) and outlive its
iterations and restarts; a worker that dies is restarted; SIGTERM stops the service within
10 s with exit status 0; a trainer of another protocol version is refused (exit status 2,
both versions named)."""

_PRODUCE_EPILOG = """\
examples:
  h5feed produce --connect tcp://trainer-host:5555 --data-root /data --workers 8
  H5FEED_CONNECT=tcp://127.0.0.1:5555 h5feed produce --data-root ./videos"""


def register(subcommand: Subcommand) -> None:
    """Add ``produce``, ``keys`` and ``health`` to the ``h5feed`` command."""
    produce = subcommand(
        "produce",
        "serve a trainer: decoding workers that connect to its h5feed consumer",
        _PRODUCE_DESCRIPTION,
        _PRODUCE_EPILOG,
    )
    # The environment is read here, in the entry point, never at import time; an empty
    # variable (compose's ${VAR:-}) counts as unset.
    env = {k: v for k, v in os.environ.items() if k.startswith("H5FEED_") and v}
    for flag, variable, metavar, text in _PRODUCE_OPTIONS:
        produce.add_argument(
            flag,
            default=env.get(variable),
            required=flag == "--connect" and variable not in env,
            type=positive_int if flag == "--workers" else str,
            metavar=metavar,
            help=f"{text} (env {variable})",
        )
    produce.add_argument(
        "--allow-code",
        action="append",
        default=None,
        metavar="PATTERN",
        help="import user code (source=, transform=) only at import paths 'module:name' "
        "matching this fnmatch pattern, e.g. 'mypkg.data:*' (repeatable; default: none; "
        f"env {_ALLOW_CODE_ENV}, comma-separated)",
    )
    produce.set_defaults(handler=_cmd_produce, allow_code_env=env.get(_ALLOW_CODE_ENV))

    keys = subcommand(
        "keys",
        "make a CURVE key pair (NAME.key public, NAME.key_secret secret) with pyzmq",
        "Make a CURVE key pair with pyzmq's certificate helpers.\n\nThe trainer keeps "
        "its NAME.key_secret and lists the producers' public .key files in one directory "
        "(curve_authorized=); each producer keeps its own .key_secret and the trainer's "
        ".key (--key, --server-key).",
        "example:\n  h5feed keys keys/ --name trainer && h5feed keys keys/ --name producer1",
    )
    keys.add_argument("dir", metavar="DIR", help="directory to write the two files into")
    keys.add_argument("--name", default="h5feed", help="file name stem (default: %(default)s)")
    keys.set_defaults(handler=_cmd_keys)

    health = subcommand(
        "health",
        "exit 0 if the producer writing PATH is alive with running workers (a HEALTHCHECK)",
        "Read the health file of `h5feed produce --health-file PATH`.\n\nGuarantees: exit 0 "
        "only if the file was written within --max-age seconds by a producer with at least "
        "one running worker; else exit 1, saying why.",
        "example:\n  h5feed health /tmp/h5feed-producer.health",
    )
    health.add_argument("path", metavar="PATH", help="the producer's --health-file")
    health.add_argument(
        "--max-age", type=float, default=10.0, metavar="S",
        help="seconds after which the file is stale (default: %(default)s)",
    )  # fmt: skip
    health.set_defaults(handler=_cmd_health)


def _cmd_produce(args: argparse.Namespace) -> int:
    """Run :func:`h5feed.producer.service.run_producer` until SIGTERM/SIGINT."""
    from h5feed.producer.cpus import available_cpus
    from h5feed.producer.service import run_producer

    workers = int(args.workers) if args.workers is not None else available_cpus()
    if (args.key is None) != (args.server_key is None):
        raise ValueError("CURVE needs both --key and --server-key")
    curve = (args.key, args.server_key) if args.key is not None else None
    metrics_port = None
    if args.metrics_port is not None:
        from h5feed.common.metrics_http import port_from_env

        metrics_port = port_from_env({"H5FEED_METRICS_PORT": args.metrics_port})
    from h5feed.producer.code_policy import policy_of, split_patterns

    # The flags replace the environment variable (as for every other option).
    allow_code = args.allow_code if args.allow_code else split_patterns(args.allow_code_env)
    policy_of(allow_code)  # ValueError for an empty pattern, before any worker starts
    return run_producer(
        args.connect,
        args.data_root,
        workers,
        args.name,
        args.health_file,
        curve,
        metrics_port,
        allow_code,
    )


def _cmd_keys(args: argparse.Namespace) -> int:
    import zmq.auth

    os.makedirs(args.dir, exist_ok=True)
    public, secret = zmq.auth.create_certificates(args.dir, args.name)
    print(f"public key: {public}\nsecret key: {secret} (keep it private)")
    return 0


def _cmd_health(args: argparse.Namespace) -> int:
    from h5feed.producer.service import check_health

    problem = check_health(args.path, args.max_age)
    if problem is not None:
        print(f"h5feed health: {problem}", file=sys.stderr)
        return 1
    return 0
