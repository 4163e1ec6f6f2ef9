"""A shared fleet's front (:class:`h5feed.producer.service.fleet.Front`) run in the test's own
process, stepped on a thread of its own: for the fleet front and fleet trust tests."""

from __future__ import annotations

import logging
import pathlib
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ports import free_port

from h5feed.common.worker_settings import WorkerSettings
from h5feed.producer.service.fleet import Front


class SteppedFront:
    """A :class:`Front` on a free loopback port, stepped every 20 ms until :meth:`close`."""

    def __init__(
        self,
        tmp_path: pathlib.Path,
        workers: int,
        settings_for: Callable[..., WorkerSettings],
        env: Mapping[str, str],
        log: logging.Logger,
        **kwargs: Any,
    ) -> None:
        self.port = free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.front = Front(
            self.endpoint, f"f{self.port}", workers, settings_for, dict(env), str(tmp_path), log,
            **kwargs,
        )  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.front.step(20)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.front.close()
