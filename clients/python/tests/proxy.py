"""A TCP proxy whose connections can be cut, to break KeepAlive streams
without losing the broker's (in-memory) leases, or delayed, to make a broker
slow to connect to, or slow to answer (a network with latency)."""

from __future__ import annotations

import queue
import socket
import threading
import time


class Proxy:
    def __init__(self, upstream_port: int, delay: float = 0.0, latency: float = 0.0):
        """``delay``: how long each accepted connection waits before it is
        connected upstream (so the client's handshake takes that long).
        ``latency``: how long every byte takes to cross, each way (so a
        request and its answer take twice that more), in order, however
        many are in flight."""
        self._upstream = ("127.0.0.1", upstream_port)
        self._delay = delay
        self._latency = latency
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.accepted = 0
        self._accepted_cv = threading.Condition(self._lock)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(down,), daemon=True).start()

    def _connect(self, down: socket.socket) -> None:
        if self._delay:
            time.sleep(self._delay)
        try:
            up = socket.create_connection(self._upstream)
        except OSError:
            down.close()
            return
        with self._lock:
            self._sockets += [down, up]
            self.accepted += 1
            self._accepted_cv.notify_all()
        pump = self._delayed if self._latency else self._pump
        for a, b in ((down, up), (up, down)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()

    def _delayed(self, src: socket.socket, dst: socket.socket) -> None:
        """A delay line: what is read is sent ``latency`` after it was
        read, by a thread of its own, so that the delay does not add up
        over chunks."""
        line: "queue.Queue" = queue.Queue()

        def send() -> None:
            while True:
                due, data = line.get()
                if data is None:
                    break
                time.sleep(max(0.0, due - time.monotonic()))  # the latency itself
                try:
                    dst.sendall(data)
                except OSError:
                    break
            try:
                dst.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        threading.Thread(target=send, daemon=True).start()
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                line.put((time.monotonic() + self._latency, data))
        except OSError:
            pass
        line.put((0.0, None))

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def wait_accepted(self, count: int, timeout: float) -> bool:
        with self._lock:
            return self._accepted_cv.wait_for(lambda: self.accepted >= count, timeout)

    def cut(self) -> None:
        """Breaks every open connection (as a network failure would)."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._listener.close()
        self.cut()
