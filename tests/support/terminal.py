"""Helper of the progress-bar tests: run the ``h5feed`` command with stderr on a terminal."""

from __future__ import annotations

import os
import pathlib
import pty
import subprocess
import sys
import threading


def h5feed_on_a_terminal(
    *args: str,
    timeout_s: float,
    columns: int = 120,
    cwd: pathlib.Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """Run ``python -m h5feed ARGS`` with stderr on a pseudo-terminal (stdout piped, stdin
    empty); return (exit status, stdout, what it wrote to the terminal). A run longer than
    ``timeout_s`` is killed and raises ``subprocess.TimeoutExpired``."""
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:  # drains the terminal, so a chatty child never blocks on it
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        process = subprocess.run(
            [sys.executable, "-m", "h5feed", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
            cwd=cwd,
            env={**os.environ, "COLUMNS": str(columns), **(env or {})},
            timeout=timeout_s,
            text=True,
        )
    finally:
        os.close(slave)
    reader.join(10)
    os.close(master)
    return process.returncode, process.stdout, b"".join(chunks).decode(errors="replace")
