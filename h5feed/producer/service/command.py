"""The producer's commands: ``h5feed produce`` (the service), ``h5feed keys`` (CURVE key
pairs) and ``h5feed health`` (its liveness check). Importing this module is cheap (argparse
only); each command imports what it needs when it runs."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from h5feed.common.cli_args import Subcommand, non_negative_int, positive_int, positive_seconds
from h5feed.common.worker_settings import WorkerSettings  # a cheap import (no codec)
from h5feed.producer.service.restarts import DEFAULT_MAX_RESTARTS  # a cheap import too

#: A shared fleet's replica (``h5feed produce --listen``): trainers served at once
#: (``--max-trainers``); each has ``--workers`` processes of its own.
DEFAULT_MAX_TRAINERS = 8
#: ... and how long a trainer may go without saying ATTACH (it says it every second) before
#: its workers are stopped (``--attach-timeout-s``).
DEFAULT_ATTACH_TIMEOUT_S = 10.0

#: (flag, environment variable, metavar, help) of `h5feed produce`'s own options; the workers'
#: options it offers follow from their fields (``Offered`` in h5feed/common/worker_settings.py).
_PRODUCE_OPTIONS = (
    ("--connect", "H5FEED_CONNECT", "ADDR", "the trainer's address, e.g. tcp://trainer-host:5555"),
    (
        "--listen",
        "H5FEED_LISTEN",
        "ADDR",
        "instead of --connect: a shared fleet's replica, serving every trainer that attaches "
        "here (h5feed.dataset(..., fleet=...)), e.g. tcp://*:5556",
    ),
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
    (
        "--trainer-keys",
        "H5FEED_TRAINER_KEYS",
        "DIR",
        "CURVE with --listen: the directory of the public .key files of the trainers that may "
        "attach (each may then read every file under --data-root)",
    ),
    (
        "--max-trainers",
        "H5FEED_MAX_TRAINERS",
        "N",
        f"with --listen: trainers served at once, those that left counted until their "
        f"workers are gone; another is refused, naming this limit (default "
        f"{DEFAULT_MAX_TRAINERS})",
    ),
    (
        "--attach-timeout-s",
        "H5FEED_ATTACH_TIMEOUT_S",
        "SECONDS",
        f"with --listen: a trainer that has not attached again for this long (it says ATTACH "
        f"every second) is gone, and its workers are stopped; until then its port is refused "
        f"to another trainer's key (default {DEFAULT_ATTACH_TIMEOUT_S:g})",
    ),
    (
        "--metrics-port",
        "H5FEED_METRICS_PORT",
        "[HOST:]PORT",
        "serve /metrics and /stats on PORT of 127.0.0.1 (0: a free port), or on HOST:PORT "
        "(0.0.0.0:9100: every interface, for a Prometheus on another host)",
    ),
    (
        "--node-cache",
        "H5FEED_NODE_CACHE",
        "DIR",
        "for s3://, gs://, https:// data: keep whole copies of the objects read in DIR (this "
        "user's, not writable by others; made 0700), so later epochs and jobs on this node read "
        "local disk; the first read of an object streams while it is copied (default: none)",
    ),
    (
        "--node-cache-gib",
        "H5FEED_NODE_CACHE_GIB",
        "GIB",
        "the copies' bound on disk, least recently opened dropped first; a download also leaves "
        "5%% of the disk free (default 20)",
    ),
    (
        "--max-restarts",
        "H5FEED_MAX_RESTARTS",
        "N",
        "a worker that dies before returning any part is restarted after a backoff (1 s "
        "doubling to 60 s); past N such deaths of one worker a minute, h5feed health reports "
        "a crash loop (default 3)",
    ),
)
#: The options of `h5feed produce` that take a positive integer.
_INT_OPTIONS = ("--workers", "--max-trainers")
#: Values of $H5FEED_INSECURE (case aside); anything else is refused, naming the variable.
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
#: Exit status of a refused configuration (an exposed --connect without keys), as argparse's.
_REFUSED = 2

_PRODUCE_DESCRIPTION = """\
Start decoding workers that serve an h5feed consumer (a trainer that called
h5feed.dataset(..., listen="tcp://*:5555", curve_key=...)): with --connect, the one trainer
there; with --listen, as a replica of a shared fleet, every trainer that attaches
(h5feed.dataset(..., listen=..., fleet="tcp://this-host:5556")), --workers processes each.
Every flag has an H5FEED_* environment variable.

Security: a --connect address beyond this host (not 127.0.0.0/8, ::1, localhost or ipc://)
needs CURVE keys (--key, --server-key), and a --listen address beyond it CURVE keys (--key,
--trainer-keys: the trainers allowed to attach), or --insecure (H5FEED_INSECURE=1) where the
network is trusted; otherwise the command refuses to start (exit status 2).

Guarantees: the workers may start before the trainer and wait for it; they serve its jobs
(file list, clip and preprocessing parameters come from the trainer) and outlive its
iterations and restarts; a worker that dies is restarted (at once if it had returned a
part, else after a backoff; a crash loop fails `h5feed health`); SIGTERM stops the service: each
worker sends the unit in hand and hands the units it did not start back to the trainer, within
--stop-wait-s (a worker still working then is killed), exit status 0; a trainer of another
protocol version is refused (exit status 2, both versions named)."""

_PRODUCE_EPILOG = """\
examples:
  h5feed produce --connect tcp://trainer-host:5555 --data-root /data --workers 8 \\
      --key keys/producer1.key_secret --server-key keys/trainer.key
  H5FEED_CONNECT=tcp://127.0.0.1:5555 h5feed produce --data-root ./videos
  h5feed produce --listen tcp://*:5556 --data-root /data --workers 4 --max-trainers 8 \\
      --key keys/fleet.key_secret --trainer-keys keys/trainers/"""


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
            type=positive_int
            if flag in _INT_OPTIONS
            else non_negative_int
            if flag == "--max-restarts"
            else positive_seconds
            if flag == "--attach-timeout-s"
            else str,
            metavar=metavar,
            help=f"{text} (env {variable})",
        )
    repeated_env = _add_worker_options(produce, env)
    produce.add_argument(
        "--insecure",
        action="store_true",
        help="allow a --connect address beyond this host without CURVE keys: whoever answers "
        "there sends this producer its jobs (env H5FEED_INSECURE=1)",
    )
    produce.set_defaults(
        handler=_cmd_produce,
        insecure_env=env.get("H5FEED_INSECURE"),
        repeated_env=repeated_env,
    )

    keys = subcommand(
        "keys",
        "make a CURVE key pair (NAME.key public, NAME.key_secret secret) with pyzmq",
        "Make a CURVE key pair (pyzmq's certificate format).\n\nThe trainer keeps "
        "its NAME.key_secret and lists the producers' public .key files in one directory "
        "(curve_authorized=); each producer keeps its own .key_secret and the trainer's "
        ".key (--key, --server-key).\n\nGuarantees: NAME.key_secret is created mode 0600 "
        "and NAME.key 0644 (each created with its mode, then renamed over an old one); "
        "a secret key that group or others may read is refused (chmod 600), as ssh does; "
        "keys mounted read-only (0400, Docker/Kubernetes secrets) load as they are.",
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


def _env_variable(flag: str) -> str:
    """A flag's environment variable: ``--max-open-files`` is ``H5FEED_MAX_OPEN_FILES``."""
    return "H5FEED_" + flag.removeprefix("--").upper().replace("-", "_")


def _add_worker_options(parser: argparse.ArgumentParser, env: dict[str, str]) -> dict[str, str]:
    """The workers' options `h5feed produce` offers, each from its field (flag, type, help,
    the service's default); returns the environment's values of the repeated ones, by field
    name (comma-separated: split when the flag is not given)."""
    repeated_env = {}
    for name, spec, offer, default in WorkerSettings.offered():
        variable = _env_variable(spec.flag)
        text = offer.help.format(default=default, env=variable)
        if "{env}" not in offer.help:
            text = f"{text} (env {variable})"
        metavar = offer.metavar
        if spec.kind == "repeated":
            parser.add_argument(
                spec.flag, action="append", default=None, metavar=metavar, help=text
            )
            if variable in env:
                repeated_env[name] = env[variable]
        else:
            parser.add_argument(
                spec.flag,
                default=env.get(variable),
                type=offer.parse or spec.parse,
                metavar=metavar,
                help=text,
            )
    return repeated_env


def _worker_values(args: argparse.Namespace) -> dict[str, Any]:
    """The workers' options by field name: the flag's, else the environment's, else the
    service's default."""
    from h5feed.producer.worker.code_policy import split_patterns

    values = {}
    for name, spec, _offer, default in WorkerSettings.offered():
        value = getattr(args, name)
        if spec.kind == "repeated":  # the flags replace the variable, as for any option
            value = tuple(value or split_patterns(args.repeated_env.get(name)))
        values[name] = default if value is None else value
    return values


def _cmd_produce(args: argparse.Namespace) -> int:
    """Run :func:`h5feed.producer.service.server.run_producer` (``--connect``) or
    :func:`~h5feed.producer.service.server.run_fleet` (``--listen``) until SIGTERM/SIGINT."""
    from h5feed.producer.service.cpus import available_cpus
    from h5feed.producer.worker.lifetime import drop_working_directory

    drop_working_directory()  # nothing more is imported from where the command was run

    if (args.connect is None) == (args.listen is None):
        print(
            "h5feed produce: refused: give one of --connect (serve one trainer) and --listen "
            "(a shared fleet's replica)",
            file=sys.stderr,
        )
        return _REFUSED
    if args.listen is not None and not args.listen.startswith("tcp://"):
        print(
            f"h5feed produce: refused: --listen {args.listen}: a fleet's front listens on "
            "tcp:// (trainers' workers connect back to the address an ATTACH came from)",
            file=sys.stderr,
        )
        return _REFUSED
    workers = int(args.workers) if args.workers is not None else available_cpus()
    peer_keys = args.server_key if args.connect is not None else args.trainer_keys
    peer_flag = "--server-key" if args.connect is not None else "--trainer-keys"
    if (args.key is None) != (peer_keys is None):
        raise ValueError(f"CURVE needs both --key and {peer_flag}")
    curve = (args.key, peer_keys) if args.key is not None else None
    if curve is not None:
        from h5feed.common.trust.curve import check_secret_mode

        check_secret_mode(args.key)  # ValueError naming the mode, before any worker starts
    insecure = args.insecure or _env_flag(args.insecure_env, "H5FEED_INSECURE")
    if insecure is None:
        return _REFUSED
    from h5feed.common.trust.exposure import connect_refusal, fleet_refusal, is_local_address

    address = args.connect if args.connect is not None else args.listen
    rule = connect_refusal if args.connect is not None else fleet_refusal
    refusal = rule(address, keyed=curve is not None, insecure=insecure)
    if refusal is not None:
        print(f"h5feed produce: refused: {refusal}", file=sys.stderr)
        return _REFUSED
    if curve is None and not is_local_address(address):
        logging.getLogger("h5feed.producer").warning(
            "%s %s without CURVE keys (--insecure): %s",
            *(
                ("connecting to", address, "whoever answers there sends this producer its jobs")
                if args.connect is not None
                else ("listening on", address, "any host that reaches it can attach as a trainer")
            ),
        )
    metrics = None
    if args.metrics_port is not None:
        from h5feed.common.metrics_http import address_from_env

        metrics = address_from_env({"H5FEED_METRICS_PORT": args.metrics_port})
    from h5feed.producer.service.server import (
        ServiceOptions,
        default_prefix,
        run_fleet,
        run_producer,
        service_worker,
    )
    from h5feed.producer.worker.code_policy import policy_of

    _export_node_cache(args)
    values = _worker_values(args)
    policy_of(values["allow_code"])  # ValueError for an empty pattern, before any worker starts
    template = service_worker(address, args.name or default_prefix(), **values)
    options = ServiceOptions(
        workers,
        template,
        args.health_file,
        metrics,
        _int_or(args.max_restarts, DEFAULT_MAX_RESTARTS),
    )
    if args.connect is not None:
        return run_producer(args.connect, options, curve)
    return run_fleet(
        args.listen,
        options,
        curve,
        _int_or(args.max_trainers, DEFAULT_MAX_TRAINERS),
        DEFAULT_ATTACH_TIMEOUT_S if args.attach_timeout_s is None else float(args.attach_timeout_s),
    )


def _export_node_cache(args: argparse.Namespace) -> None:
    """The node cache's flags into the environment the workers inherit (they read it there:
    :mod:`h5feed.producer.files.node_cache`); ValueError for a bound that is not a positive
    number, before any worker starts."""
    from h5feed.producer.files import node_cache

    for value, variable in (
        (args.node_cache, node_cache.DIR_ENV),
        (args.node_cache_gib, node_cache.GIB_ENV),
    ):
        if value is not None:
            os.environ[variable] = str(value)
    node_cache.bound_bytes()


def _int_or(value: object, default: int) -> int:
    """An option's value (an int from the flag, a string from the environment), or
    ``default`` when unset."""
    return default if value is None else int(str(value))


def _env_flag(text: str | None, variable: str) -> bool | None:
    """``$variable`` as a yes/no (unset: no); None, after saying why, for any other value."""
    if text is None or text.strip().lower() in _FALSE:
        return False
    if text.strip().lower() in _TRUE:
        return True
    print(f"h5feed produce: refused: ${variable}={text!r} is not one of 1/0", file=sys.stderr)
    return None


def _cmd_keys(args: argparse.Namespace) -> int:
    from h5feed.common.trust.curve import write_key_pair

    os.makedirs(args.dir, exist_ok=True)
    public, secret = write_key_pair(args.dir, args.name)
    print(f"public key: {public} (0644)\nsecret key: {secret} (0600: keep it private)")
    return 0


def _cmd_health(args: argparse.Namespace) -> int:
    from h5feed.producer.service.server import check_health

    problem = check_health(args.path, args.max_age)
    if problem is not None:
        print(f"h5feed health: {problem}", file=sys.stderr)
        return 1
    return 0
