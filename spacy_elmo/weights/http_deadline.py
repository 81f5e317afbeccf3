"""HTTP requests bounded as a whole: urllib's timeout bounds each wait for bytes, so a server that
sends its status line or headers a byte at a time holds a request as long as it likes. In
`urlopen(request, timeout, end)`, every connection made (redirects too) connects within the time
left and is shut down at the monotonic time `end`: a read still waiting then fails, or ends early,
wherever the response is."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from contextlib import contextmanager
from typing import Any, Iterator, List


class Deadline:
    """Shuts down the sockets `add`ed to it at the monotonic time `end` (one added later at once)
    once `start`ed; `passed` says whether it has."""

    def __init__(self, end: float):
        self.end, self.passed = end, False
        self._lock = threading.Lock()
        self._sockets: List[socket.socket] = []
        self._timer = threading.Timer(max(0.0, end - time.monotonic()), self._expire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def add(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.append(sock)
            if self.passed:
                _shut(sock)
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.passed = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    """Both directions of `sock` shut down (a TLS socket's beneath its TLS layer, which another
    thread may be reading), so that a read blocked on it returns; nothing where it is closed."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def _watched(connection_class, deadline: Deadline):
    """`connection_class` (http.client's) whose connections connect within the time `deadline`
    leaves and register their sockets with it: the one made (a TLS handshake is read from it), then
    the one connected (TLS wraps the first in another)."""

    class Watched(connection_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            create = self._create_connection
            self._create_connection = lambda *a, **k: deadline.add(create(*a, **k))

        def connect(self) -> None:
            left = max(0.01, deadline.end - time.monotonic())
            timeout = self.timeout
            self.timeout = min(timeout, left) if isinstance(timeout, (int, float)) else left
            super().connect()
            deadline.add(self.sock)

    return Watched


class _Watch:
    """A urllib handler whose connections are `_watched` by its `deadline`."""

    deadline: Deadline

    def do_open(self, http_class, req, **kwargs):
        return super().do_open(_watched(http_class, self.deadline), req, **kwargs)  # type: ignore


class _HTTPHandler(_Watch, urllib.request.HTTPHandler):
    pass


class _HTTPSHandler(_Watch, urllib.request.HTTPSHandler):
    pass


@contextmanager
def urlopen(request: urllib.request.Request, timeout: float, end: float) -> Iterator[Any]:
    """The response to `request` for the block, as urllib's `urlopen(request, timeout=timeout)`,
    its connections shut down at the monotonic time `end`."""
    deadline = Deadline(end)
    handlers = [_HTTPHandler(), _HTTPSHandler()]
    for handler in handlers:
        handler.deadline = deadline
    deadline.start()
    try:
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout) as response:
            yield response
    finally:
        deadline.cancel()
