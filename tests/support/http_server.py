"""A static HTTP server on loopback for the ``https://`` route's tests: the files of one
directory, each with an ``ETag`` (a digest of its bytes) and ranged GETs (``Range: bytes=a-b``
answered ``206`` with ``Content-Range``), which is what fsspec's HTTP filesystem needs to read
a file in ranges. No listing: a feed names its files by URL. Serves from a daemon thread;
:meth:`HttpFiles.stop` closes it (bounded)."""

from __future__ import annotations

import hashlib
import http.server
import pathlib
import re
import threading
import urllib.parse
from typing import Any

_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class HttpFiles:
    """The files under ``root``, at :attr:`endpoint` (``http://127.0.0.1:PORT``); GETs and
    ranged GETs counted."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root.resolve()
        self.gets = self.ranged = 0
        self._lock = threading.Lock()
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: pathlib.Path) -> str:
        return f"{self.endpoint}/{path.resolve().relative_to(self.root).as_posix()}"

    def file(self, url_path: str) -> pathlib.Path | None:
        """The file a request's path names, when it is one under the root."""
        path = (self.root / urllib.parse.unquote(url_path.split("?")[0]).lstrip("/")).resolve()
        return path if path.is_file() and path.is_relative_to(self.root) else None

    def count(self, ranged: bool) -> None:
        with self._lock:
            self.gets += 1
            self.ranged += ranged

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def _handler(files: HttpFiles) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _answer(self, body: bool) -> None:
            path = files.file(self.path)
            if path is None:
                self.send_error(404)
                return
            data = path.read_bytes()
            etag = '"' + hashlib.md5(data, usedforsecurity=False).hexdigest() + '"'
            wanted = _RANGE.match(self.headers.get("Range", ""))
            start, stop = 0, len(data)
            if wanted:
                start = int(wanted.group(1))
                stop = min(len(data), int(wanted.group(2)) + 1 if wanted.group(2) else len(data))
            self.send_response(206 if wanted else 200)
            self.send_header("ETag", etag)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/x-hdf5")
            if wanted:
                self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
            self.send_header("Content-Length", str(stop - start))
            self.end_headers()
            if body:
                files.count(bool(wanted))
                self.wfile.write(data[start:stop])

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

    return Handler
